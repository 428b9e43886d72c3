"""What a write to a path means, decided before anything is written.

Only a regular file (or a new name) is replaced (written to a temp file beside it and
renamed over it: ``core.fs``); what else a target is gets decided first
(:func:`write_target`), and a device or FIFO is never replaced by a regular file:

- a character device (``/dev/null``, a terminal) or a FIFO: written in place, as a shell's
  ``>`` would; a FIFO that no process reads is refused at once instead of waiting;
- this process's own stdout or stderr: written to that stream where it is (a file opened
  with ``>>`` is appended to, not truncated);
- a block device, a socket, a folder: refused (``ConfigError``, one line), left as it is;
- a symlink: replaced, never written through (a link planted in patchkit's cache or output
  folder cannot redirect a write), unless the caller writes a file the user named
  (``follow_links=True``: ``ci-template -o``, ``bump --summary``). Then the link is
  followed: a link to a regular file is written through (that file is replaced, the link
  stays), to a device, a FIFO or ``/proc/self/fd/1`` (``-o /dev/stdout``) written in place
  as above; a dangling link is refused.

The writers that need their temp file (``core.fs.atomic_file``,
``core.fs_batch.atomic_write_many``) take :func:`replaceable` targets only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

from patchkit.core.errors import ConfigError
from patchkit.core.fs_problems import WriteRefused

__all__ = [
    "WriteTarget",
    "check_writable",
    "kind_of",
    "replaceable",
    "temp_beside",
    "write_all",
    "write_stream",
    "write_target",
]


def temp_beside(path: Path) -> tuple[int, Path]:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    return fd, Path(tmp)


class WriteTarget(NamedTuple):
    """Where a write to a path goes: ``file`` (replaced atomically: the path itself or
    the regular file a link names), ``fd`` (this process's stdout/stderr), ``stream`` (a
    character device or FIFO, opened and written in place)."""

    kind: str
    path: Path
    fd: int = -1


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISFIFO, "a FIFO"),
)


def kind_of(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _refused(path: Path, what: str) -> ConfigError:
    return ConfigError(problem=WriteRefused(path=path, found="special", kind=what))


def write_target(path: Path, *, follow_links: bool = False) -> WriteTarget:
    """What writing ``path`` means (see the module docstring); ConfigError if nothing sane."""
    try:
        lst = os.lstat(path)
    except OSError:  # missing (a new file), or unreachable: the write itself says why
        return WriteTarget("file", path)
    if stat.S_ISREG(lst.st_mode) or (stat.S_ISLNK(lst.st_mode) and not follow_links):
        return WriteTarget("file", path)
    st = lst
    if stat.S_ISLNK(lst.st_mode):
        try:
            st = os.stat(path)  # follows the link (and the kernel's protected_symlinks rule)
        except FileNotFoundError:
            raise ConfigError(
                problem=WriteRefused(path=path, found="dangling-link", link=os.readlink(path))
            ) from None
        except OSError as e:
            raise ConfigError(f"cannot write {path}: {e.strerror or e}") from None
    for fd in (1, 2):
        try:
            own = os.fstat(fd)
        except OSError:
            continue
        if (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino):
            return WriteTarget("fd", path, fd)
    if stat.S_ISREG(st.st_mode):  # a link to a regular file: replace that file
        return WriteTarget("file", Path(os.path.realpath(path)))
    if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        return WriteTarget("stream", path)
    raise _refused(path, kind_of(st.st_mode))


def replaceable(path: Path) -> Path:
    """``path`` when it can be replaced by a regular file; ConfigError for a device, FIFO,
    socket or folder (a link is replaced: see the module docstring)."""
    t = write_target(path)
    if t.kind != "file":
        raise ConfigError(
            problem=WriteRefused(path=path, found="not-replaceable", kind=kind_of(os.stat(path).st_mode))
        )
    return t.path


def check_writable(path: Path, *, follow_links: bool = False) -> None:
    """ConfigError now when a later :func:`atomic_write_bytes` of ``path`` could not write it:
    a folder, socket or block device there (or a dangling link, ``follow_links``), or no
    folder to hold it (the nearest existing parent is a file, or not writable). For a command
    that changes other files first: check every output before the first write."""
    t = write_target(path, follow_links=follow_links)
    if t.kind != "file":
        return  # a terminal, FIFO or our own stdout: written in place
    parent = t.path.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(problem=WriteRefused(path=path, found="no-folder", parent=parent))
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot write {path}: the folder {parent} is not writable")


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_stream(t: WriteTarget, data: bytes) -> None:
    """Write ``data`` into a character device or FIFO (or our stdout/stderr) in place."""
    if t.kind == "fd":
        for stream in (sys.stdout, sys.stderr):  # what Python buffered goes first
            with contextlib.suppress(Exception):
                stream.flush()
        write_all(t.fd, data)
        return
    flags = os.O_WRONLY | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        # O_NONBLOCK: opening a FIFO for writing would otherwise wait for a reader forever
        fd = os.open(t.path, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        if e.errno == errno.ENXIO:
            raise ConfigError(problem=WriteRefused(path=t.path, found="no-reader")) from None
        raise ConfigError(f"cannot write {t.path}: {e.strerror or e}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):  # swapped since it was looked at
            raise _refused(t.path, kind_of(mode) if not stat.S_ISREG(mode) else "no longer what it was")
        os.set_blocking(fd, True)
        try:
            write_all(fd, data)
        except BrokenPipeError:
            raise ConfigError(f"{t.path}: its reader closed it before everything was written") from None
    finally:
        os.close(fd)
