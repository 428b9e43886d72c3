"""The output dir: the built executables, the shared libraries they need, LICENSE
and build-info.json. Written to a temp dir and swapped in, so an interrupted
run never leaves a half-written output.

An existing folder is replaced only when it is provably patchkit's: a build-info.json
patchkit can read (its schema and keys), and nothing else but what a build writes there
(``bin/`` holding exactly the artifacts that build-info lists, ``LICENSE``). Anything
else in it stops the build (exit 2) naming the first foreign entry, the folder untouched.
Every file copied in must resolve inside the folder it comes from (the build dir, the
worktree): a symlink planted to a host file is refused, never read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from patchkit.builder.cmake import Artifact
from patchkit.builder.problems import OutDirBusy, OutDirClash, OutDirRefused
from patchkit.core.errors import BuildError, ConfigError, FatalError
from patchkit.core.fs import (
    NO_SPACE_ERRNOS,
    Foreign,
    ForeignEntry,
    contained,
    first_foreign,
    read_capped,
    sha256_file,
    write_failure,
)
from patchkit.spec.buildinfo import BUILD_INFO, ArtifactRecord, BuildInfo, PeEditRecord, write_build_info

__all__ = ["check_out_dir", "check_replaceable", "write_output"]

BUILD_INFO_MAX = 16 << 20  # a build-info.json is a few KiB


def _is_plain_file(p: Path) -> bool:
    return not p.is_symlink() and p.is_file()


def check_replaceable(out_dir: Path) -> None:
    """ConfigError (exit 2) unless ``out_dir`` is absent, empty, or provably patchkit's."""
    if not os.path.lexists(out_dir):
        return
    if not out_dir.is_dir():
        raise ConfigError(problem=OutDirRefused(folder=out_dir, found="not-a-folder"))
    try:
        entries = sorted(os.listdir(out_dir))
    except OSError as e:
        raise ConfigError(
            problem=OutDirRefused(folder=out_dir, found="unlistable", cause=str(e.strerror or e))
        ) from None
    if not entries:
        return
    info_path = out_dir / BUILD_INFO
    if BUILD_INFO not in entries:
        raise ConfigError(problem=OutDirRefused(folder=out_dir, found="no-record", entry=entries[0]))
    if not _is_plain_file(info_path):
        foreign = Foreign(BUILD_INFO, why="not a plain file")
        raise ConfigError(problem=ForeignEntry(folder=out_dir, entry=foreign, owner="build"))
    data = read_capped(info_path, limit=BUILD_INFO_MAX, error=ConfigError, what=str(info_path))
    try:
        obj = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ConfigError(problem=OutDirRefused(folder=out_dir, found="bad-json")) from None
    try:
        info = BuildInfo.from_json(obj, where=str(info_path), error=ConfigError)
    except ConfigError as e:
        raise ConfigError(
            problem=OutDirRefused(folder=out_dir, found="bad-record", cause=e.message)
        ) from None
    listed = {a.path for a in info.artifacts}

    def artifacts_only(bin_dir: Path) -> Foreign | None:
        for sub in sorted(os.listdir(bin_dir)):
            if f"bin/{sub}" not in listed:
                return Foreign(f"bin/{sub}", why=f"not an artifact {BUILD_INFO} lists")
            if not _is_plain_file(bin_dir / sub):
                return Foreign(f"bin/{sub}", why="not a plain file")
        return None

    found = first_foreign(
        out_dir, entries, files={BUILD_INFO, "LICENSE"}.__contains__, dirs={"bin": artifacts_only}
    )
    if found is not None:
        raise ConfigError(problem=ForeignEntry(folder=out_dir, entry=found, owner="build"))


def check_out_dir(out_dir: Path, cache: Path) -> Path:
    """The resolved output folder, checked before anything is built: never inside the cache
    (a worktree, a build dir, the cache itself) nor holding it, and replaceable."""
    real = out_dir.resolve()
    root = cache.resolve()
    if real == root or real.is_relative_to(root):
        raise ConfigError(problem=OutDirClash(out=out_dir, cache=root, holds_cache=False))
    if root.is_relative_to(real):
        raise ConfigError(problem=OutDirClash(out=out_dir, cache=root, holds_cache=True))
    check_replaceable(real)
    return real


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_output(
    out_dir: Path,
    artifacts: list[Artifact],
    license_file: Path | None,
    info: BuildInfo,
    post: Callable[[Path], tuple[PeEditRecord, ...]] | None = None,
    *,
    build_dir: Path | None = None,
    source_dir: Path | None = None,
) -> BuildInfo:
    """Copy artifacts into ``out_dir/bin`` and write build-info.json; returns what it wrote.

    ``post(bin_dir)`` runs on the copies before they are hashed (PE header edits); the
    edits it returns are recorded. Each artifact must resolve inside ``build_dir`` (default:
    its own folder), the licence inside ``source_dir`` (default: its folder).
    """
    check_replaceable(out_dir)
    entries: list[ArtifactRecord] = []
    current = out_dir
    tmp: Path | None = None
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
        os.chmod(tmp, (stat.S_IMODE(out_dir.stat().st_mode) if out_dir.is_dir() else 0o777 & ~_umask()))
        (tmp / "bin").mkdir()
        copied: list[tuple[Artifact, Path]] = []
        for a in artifacts:
            real = _source(a.path, build_dir or a.path.parent, "artifact")
            # the artifact's own name (the one build-info lists and programs look for),
            # also for a link to another file of the build dir: that file's bytes, copied
            dest = tmp / "bin" / a.path.name
            if not dest.exists():
                current = dest
                shutil.copy2(real, dest)
                copied.append((a, dest))
        if post is not None:
            current = tmp / "bin"
            info = dataclasses.replace(info, pe_edits=post(tmp / "bin"))
        for a, dest in copied:
            entries.append(
                ArtifactRecord(
                    target=a.target,
                    type=a.type,
                    path=f"bin/{dest.name}",
                    sha256=sha256_file(dest),
                    size=dest.stat().st_size,
                )
            )
        if license_file is not None and os.path.lexists(license_file):
            real = _source(license_file, source_dir or license_file.parent, "LICENSE")
            current = tmp / "LICENSE"
            shutil.copy2(real, current)
        entries.sort(key=lambda e: e.path)
        info = dataclasses.replace(info, artifacts=tuple(entries))
        current = tmp / BUILD_INFO
        write_build_info(tmp, info)
        _swap_in(tmp, out_dir)
    except OSError as e:
        # name the file as it will be in the out dir, not by its temp folder's random name
        if tmp is not None and current.is_relative_to(tmp):
            current = out_dir / current.relative_to(tmp)
        raise _write_error(e, current, out_dir) from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return info


def _source(path: Path, root: Path, what: str) -> Path:
    """``path`` resolved, refused (BuildError) unless it is a regular file inside ``root``."""
    real = contained(path, root, error=BuildError, what=what)
    if not real.is_file():
        raise BuildError(f"{what}: {path} is not a regular file: refusing to copy it")
    return real


def _write_error(e: OSError, dest: Path, out_dir: Path) -> FatalError:
    # (a full disk first: shutil's sendfile copy names the *source* in its ENOSPC error)
    outside = e.filename and not Path(e.filename).absolute().is_relative_to(out_dir.parent.absolute())
    if e.errno not in NO_SPACE_ERRNOS and outside:
        return BuildError(f"cannot read {e.filename}: {e.strerror or e}")
    return write_failure(e, dest=dest, folder=out_dir, error=ConfigError, full_error=BuildError)


def _swap_in(tmp: Path, out_dir: Path) -> None:
    """Put ``tmp`` in place of ``out_dir``; on failure the previous output stays."""
    holder: Path | None = None
    try:
        if os.path.lexists(out_dir):
            holder = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
            os.replace(out_dir, holder / "old")
        try:
            os.replace(tmp, out_dir)
        except OSError:
            if holder is not None:
                os.replace(holder / "old", out_dir)  # put the previous output back
            raise
    except OSError as e:
        kept = None
        if holder is not None:
            if os.path.lexists(holder / "old"):
                kept = holder / "old"
            else:
                with contextlib.suppress(OSError):
                    holder.rmdir()
        raise BuildError(problem=OutDirBusy(out=out_dir, cause=str(e.strerror or e), kept=kept)) from None
    if holder is not None:
        shutil.rmtree(holder, ignore_errors=True)
