"""Files: hashing, and writes that are never seen half done.

Every write goes to a temp file in the target's folder, is flushed to disk, and is then
renamed over the target with ``os.replace`` (atomic on POSIX and on Windows, same
volume): readers see the old file or the new one, never a mix. On any error (Ctrl-C
included) the temp file is removed and the target is untouched.

Only a regular file (or a new name) is replaced that way; a device, a FIFO or this
process's own stdout is written in place, a link is replaced (or, for a file the user
named, followed), and the rest is refused: ``core.fs_target`` decides what a target is.
The writers that need their temp file (:func:`atomic_file`, :func:`atomic_write_many`)
refuse a device or FIFO.

Also here: the one test of whether a folder is patchkit's to replace
(:func:`first_foreign`), copies out of a build (:func:`contained`, :func:`safe_copy`) and
a failed write's one line (:func:`write_failure`). The all-or-nothing batch writer lives in
``core.fs_batch``, the careful readers in ``core.fs_read``; their names are importable
from here too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, Literal, NamedTuple

from patchkit.core.errors import FatalError, Problem
from patchkit.core.fs_batch import BatchWriteError, atomic_write_many, recover_batches
from patchkit.core.fs_problems import CopyRefused, WriteFailed
from patchkit.core.fs_read import NotRegularFile, open_regular, read_capped, read_regular
from patchkit.core.fs_target import (
    check_writable,
    replaceable,
    temp_beside,
    write_stream,
    write_target,
)

__all__ = [
    "NO_SPACE_ERRNOS",
    "BatchWriteError",
    "Foreign",
    "ForeignEntry",
    "NotRegularFile",
    "atomic_file",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_many",
    "atomic_write_text",
    "check_writable",
    "contained",
    "first_foreign",
    "folder_entries",
    "mount_point",
    "open_regular",
    "read_capped",
    "read_regular",
    "recover_batches",
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


@contextlib.contextmanager
def atomic_file(path: Path, *, mode: int | None = None) -> Iterator[tuple[IO[bytes], Path]]:
    """``with atomic_file(p) as (f, tmp):`` write ``f`` (a binary file open for read and
    write); when the block ends without an error, ``tmp`` is synced and renamed to ``p``.

    ``mode``: the new file's permissions (default: the old file's, else 0o644 minus umask).
    Code in the block may check ``tmp`` (after ``f.flush()``) and raise to keep the old file.
    A link at ``p`` is replaced; a device, FIFO, socket or folder: ConfigError, nothing
    written.
    """
    path = replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None and path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
    fd, tmp = temp_beside(path)
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


def atomic_write_bytes(
    path: Path, data: bytes, *, mode: int | None = None, follow_links: bool = False
) -> None:
    """``data`` into ``path``: replaced atomically, or written in place into a character
    device, a FIFO or this process's stdout/stderr. ``follow_links``: ``path`` is a name
    the user gave (``-o FILE``): a link there is followed (see the module docstring)."""
    t = write_target(path, follow_links=follow_links)
    if t.kind != "file":
        write_stream(t, data)
        return
    with atomic_file(t.path, mode=mode) as (f, _):
        f.write(data)


def atomic_write_text(path: Path, text: str, *, mode: int | None = None, follow_links: bool = False) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode, follow_links=follow_links)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


class Foreign(NamedTuple):
    """An entry of a folder that its owner did not write there: ``name`` (relative to the
    folder: ``raw``, ``bin/x``), whether it is a ``link``, and ``why`` (the owner's reason,
    "" when the name is not one it writes or the entry is not the plain file or folder it
    writes)."""

    name: str
    link: bool = False
    why: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ForeignEntry(Problem):
    """A folder patchkit would replace or write into holds what its owner did not write."""

    folder: Path  # the folder, as the user named it
    entry: Foreign  # the first entry its owner did not write
    owner: str  # whose folder it would be: "build" (an output folder), "bench" (a results folder)


def folder_entries(folder: Path) -> list[str] | None:
    """The sorted names in ``folder``; None when nothing is there. OSError (``ENOTDIR``)
    when it is a link or not a folder, or the error listing it failed with."""
    if not os.path.lexists(folder):
        return None
    if folder.is_symlink() or not folder.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(folder))
    return sorted(os.listdir(folder))


def first_foreign(
    folder: Path,
    entries: Iterable[str],
    *,
    files: Callable[[str], bool],
    dirs: Mapping[str, Callable[[Path], Foreign | None] | None],
) -> Foreign | None:
    """The first entry of ``folder`` that its owner does not write, or None: the owner writes
    plain files whose names ``files`` accepts and plain folders named in ``dirs`` (each with
    an optional check of its contents, which returns the first foreign entry in it). A link
    is never the owner's: a planted link must not make a folder look like one it may replace.

    This is the one test of "is this folder patchkit's to replace or write into"; the proof
    of ownership that comes first (a marker file, a valid build-info.json) is the owner's.
    """
    for name in entries:
        p = folder / name
        link = p.is_symlink()
        if not link and files(name) and p.is_file():
            continue
        if not link and name in dirs and p.is_dir():
            inner = dirs[name]
            found = inner(p) if inner is not None else None
            if found is not None:
                return found
            continue
        return Foreign(name, link=link)
    return None


def contained(path: Path, root: Path, *, error: type[FatalError], what: str = "") -> Path:
    """``path`` with every link followed; ``error`` if that is not inside ``root``.

    What patchkit copies out of a worktree, a build dir or an output folder must come from
    there: a symlink a patch (or anyone) planted to a host file is refused, never read.
    """
    real = path.resolve()
    base = root.resolve()
    if not real.is_relative_to(base):
        raise error(problem=CopyRefused(path=path, found="outside", real=real, root=base, what=what))
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
        raise error(problem=CopyRefused(path=src, found="not-plain"))
    if dest.is_symlink():
        dest.unlink()
    shutil.copy2(real, dest, follow_symlinks=True)
    return dest


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
    if e.errno in NO_SPACE_ERRNOS:
        mount = mount_point(folder)
        free: int | None
        try:
            free = shutil.disk_usage(mount).free
        except OSError:
            free = None
        found: Literal["full", "too-large"] = "too-large" if e.errno == errno.EFBIG else "full"
        problem = WriteFailed(dest=dest, folder=folder, found=found, mount=mount, free=free)
        return (full_error or error)(problem=problem)
    return error(problem=WriteFailed(dest=dest, folder=folder, found="refused", reason=e.strerror or str(e)))
