"""Reading files that may not be what they seem: :func:`read_capped` (a file the user named
or patchkit wrote, no larger than a cap) and :func:`open_regular` / :func:`read_regular`,
**the** readers of what a sandboxed step could have planted (no link followed, no FIFO
waited on, a regular file only, capped)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import IO, Literal

from patchkit.core.errors import FatalError
from patchkit.core.fs_problems import TooLarge, human_size
from patchkit.core.fs_target import kind_of

__all__ = ["NotRegularFile", "open_regular", "read_capped", "read_regular"]


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
        raise error(problem=TooLarge(label=label, limit=limit))
    return data


class NotRegularFile(OSError):
    """:func:`open_regular`'s refusal of a FIFO, device, socket or folder, or of a file over
    its cap (an OSError: a caller that takes an unreadable file for a missing one still does)."""


def open_regular(path: Path) -> IO[bytes]:
    """``path`` opened for reading when it is itself a regular file: for what a process
    patchkit does not trust could have planted (the build dir and worktree after a
    sandboxed configure or build, read back outside the sandbox). A symbolic link is not
    followed (``O_NOFOLLOW``, ``ELOOP``: a link swapped in never reads a host file), a FIFO
    does not block (``O_NONBLOCK``), and what was opened must be a regular file (``fstat``).
    Every refusal is an OSError. Only the last component is not followed: the folders
    above are the caller's to check (:func:`contained`)."""
    flags = os.O_RDONLY | getattr(os, "O_BINARY", 0)
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    f = open(os.open(path, flags), "rb")  # noqa: SIM115 (the caller closes it)
    try:
        mode = os.fstat(f.fileno()).st_mode
    except OSError:
        f.close()
        raise
    if not stat.S_ISREG(mode):
        f.close()
        raise NotRegularFile(errno.EINVAL, f"not a regular file ({kind_of(mode)})", str(path))
    return f


def read_regular(path: Path, *, limit: int, part: Literal["all", "head", "tail"] = "all") -> bytes:
    """The bytes of a regular file (:func:`open_regular`: no link followed, no FIFO
    waited on), at most ``limit`` of them: a larger file is refused (an OSError), or with
    ``part`` ``"head"`` / ``"tail"`` its first / last ``limit`` bytes are returned."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        if part == "all" and size > limit:
            raise NotRegularFile(errno.EFBIG, f"larger than {human_size(limit)}", str(path))
        if part == "tail" and size > limit:
            f.seek(size - limit)
        data = f.read(limit + 1)
    if len(data) > limit:  # it grew while read
        if part == "all":
            raise NotRegularFile(errno.EFBIG, f"larger than {human_size(limit)}", str(path))
        data = data[:limit] if part == "head" else data[-limit:]
    return data
