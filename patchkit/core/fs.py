"""Files: hashing, and writes that are never seen half done.

Every write goes to a temp file in the target's folder, is flushed to disk, and is then
renamed over the target with ``os.replace`` (atomic on POSIX and on Windows, same
volume): readers see the old file or the new one, never a mix. On any error (Ctrl-C
included) the temp file is removed and the target is untouched.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from patchkit.core.errors import FatalError

__all__ = [
    "NO_SPACE_ERRNOS",
    "atomic_file",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_many",
    "atomic_write_text",
    "contained",
    "mount_point",
    "read_capped",
    "safe_copy",
    "sha256_bytes",
    "sha256_file",
    "sha256_stream",
    "write_failure",
]

# the errors that mean "the file system (or a limit on it) has no room for this"
NO_SPACE_ERRNOS = frozenset(
    e for e in (errno.ENOSPC, getattr(errno, "EDQUOT", None), errno.EFBIG) if e is not None
)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_stream(f: IO[bytes]) -> str:
    h = hashlib.sha256()
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
    return h.hexdigest()


def sha256_file(path: Path) -> str:
    with path.open("rb") as f:
        return sha256_stream(f)


def _temp_beside(path: Path) -> tuple[int, Path]:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    return fd, Path(tmp)


@contextlib.contextmanager
def atomic_file(path: Path, *, mode: int | None = None) -> Iterator[tuple[IO[bytes], Path]]:
    """``with atomic_file(p) as (f, tmp):`` write ``f`` (a binary file open for read and
    write); when the block ends without an error, ``tmp`` is synced and renamed to ``p``.

    ``mode``: the new file's permissions (default: the old file's, else 0o644 minus umask).
    Code in the block may check ``tmp`` (after ``f.flush()``) and raise to keep the old file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None and path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
    fd, tmp = _temp_beside(path)
    try:
        with os.fdopen(fd, "w+b") as f:
            yield f, tmp
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes, *, mode: int | None = None) -> None:
    with atomic_file(path, mode=mode) as (f, _):
        f.write(data)


def atomic_write_text(path: Path, text: str, *, mode: int | None = None) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def atomic_write_many(files: Mapping[Path, bytes]) -> None:
    """Write every file to a temp sibling first, then rename them all into place: an
    error while writing leaves every target as it was (permissions are kept)."""
    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            fd, tmp = _temp_beside(path)
            staged.append((path, tmp))
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if path.exists():
                os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
    except BaseException:
        for _, tmp in staged:
            tmp.unlink(missing_ok=True)
        raise
    for path, tmp in staged:
        os.replace(tmp, path)


def contained(path: Path, root: Path, *, error: type[FatalError], what: str = "") -> Path:
    """``path`` with every link followed; ``error`` if that is not inside ``root``.

    What patchkit copies out of a worktree, a build dir or an output folder must come from
    there: a symlink a patch (or anyone) planted to a host file is refused, never read.
    """
    real = path.resolve()
    base = root.resolve()
    if not real.is_relative_to(base):
        where = f"{what}: " if what else ""
        raise error(
            f"{where}{path} resolves to {real}, outside {base}: refusing to copy it",
            hint="a symlink leaves the folder it belongs to; remove it (or rebuild with --clean)",
        )
    return real


def safe_copy(src: Path, dest: Path, *, root: Path, error: type[FatalError]) -> Path:
    """Copy ``src`` (which must resolve inside ``root`` to a regular file) to ``dest`` as a
    plain file (a symlink at ``dest`` is replaced, never written through)."""
    real = contained(src, root, error=error)
    try:
        st = real.stat()
    except OSError as e:
        raise error(f"{src}: cannot read it: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(
            f"{src} is not a regular file: refusing to copy it",
            hint="only plain files are copied out of a build",
        )
    if dest.is_symlink():
        dest.unlink()
    shutil.copy2(real, dest, follow_symlinks=True)
    return dest


def read_capped(path: Path, *, limit: int, error: type[FatalError], what: str = "") -> bytes:
    """The bytes of a regular file no larger than ``limit``; ``error`` (one line) for a
    missing, special (FIFO, device: reading could block or never end), unreadable or too
    large file. Never reads more than ``limit + 1`` bytes."""
    label = what or str(path)
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        with open(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise error(f"{label} is not a regular file")
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise error(f"{label} does not exist") from None
    except IsADirectoryError:
        raise error(f"{label} is a folder, not a file") from None
    except OSError as e:
        raise error(f"cannot read {label}: {e.strerror or e}") from None
    if len(data) > limit:
        raise error(
            f"{label} is larger than {_human(limit)}: not a file patchkit wrote or reads",
            hint="is it the right file?",
        )
    return data


def _human(n: int) -> str:
    for unit, mult in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult:
            return f"{n / mult:.3g} {unit}"
    return f"{n} bytes"


def mount_point(path: Path) -> Path:
    """The mount point of the file system holding ``path`` (or its nearest existing parent)."""
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    p = p.resolve()
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p


def write_failure(
    e: OSError,
    *,
    dest: Path,
    folder: Path,
    error: type[FatalError],
    full_error: type[FatalError] | None = None,
) -> FatalError:
    """A one-line error for a failed write of ``dest`` into ``folder`` (the folder the user
    named, e.g. --out): a full disk names that folder's file system, its mount point and
    free space, and the file being written; a refusal (permissions, read-only) says so."""
    reason = e.strerror or str(e)
    if e.errno in NO_SPACE_ERRNOS:
        mount = mount_point(folder)
        try:
            free = f"{_human(shutil.disk_usage(mount).free)} free"
        except OSError:
            free = "free space unknown"
        if e.errno == errno.EFBIG:
            msg = (
                f"{dest} is too large for {folder}: its file system (mounted at {mount}, "
                f"{free}) or a file size limit (ulimit -f) refuses it"
            )
        else:
            msg = (
                f"no space left on the file system of {folder} (mounted at {mount}, "
                f"{free}) while writing {dest}"
            )
        return (full_error or error)(
            msg, hint=f"free space on {mount}, or pass another --out on another disk"
        )
    return error(
        f"cannot write {dest}: {reason}",
        hint=f"is {folder} writable? Pass another --out, or fix its permissions",
    )
