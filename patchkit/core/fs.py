"""Files: hashing, and writes that are never seen half done.

Every write goes to a temp file in the target's folder, is flushed to disk, and is then
renamed over the target with ``os.replace`` (atomic on POSIX and on Windows, same
volume): readers see the old file or the new one, never a mix. On any error (Ctrl-C
included) the temp file is removed and the target is untouched.
"""

from __future__ import annotations

import contextlib
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
    "atomic_file",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_many",
    "atomic_write_text",
    "contained",
    "safe_copy",
    "sha256_bytes",
    "sha256_file",
    "sha256_stream",
]


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
        raise error(f"{where}{path} resolves to {real}, outside {base}: refusing to copy it",
                    hint="a symlink leaves the folder it belongs to; remove it (or rebuild "
                         "with --clean)")
    return real


def safe_copy(src: Path, dest: Path, *, root: Path, error: type[FatalError]) -> Path:
    """Copy ``src`` (which must resolve inside ``root``) to ``dest`` as a plain file."""
    real = contained(src, root, error=error)
    shutil.copy2(real, dest, follow_symlinks=True)
    return dest
