"""An exclusive, non-blocking lock on the cache, on Linux and Windows.

The OS releases the lock when the process dies (Ctrl-C, crash, kill -9), so a
stale lock never blocks the next run. Who holds it is kept in a side file so a
second run can say so.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from patchkit.core.errors import ConfigError, LockBusy
from patchkit.core.fs import atomic_write_text

__all__ = ["cache_lock"]

_OWNER_MAX = 4096  # lock.owner is one short JSON line; anything bigger is not ours


def _open_lock(path: Path) -> IO[bytes]:
    """The lock file, opened without following a symlink planted in its place."""
    flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        raise ConfigError(
            f"cannot open the cache lock {path}: {e.strerror or e}",
            hint="it must be a plain file (remove it if it is a link or a "
            "folder), or set PATCHKIT_CACHE to use another cache",
        ) from None
    return os.fdopen(fd, "a+b")


def _holder(info_path: Path) -> str:
    """Who holds the lock, from lock.owner (read with a size cap, never a FIFO or device)."""
    holder = "another patchkit run"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        fd = os.open(info_path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return holder
            info = json.loads(f.read(_OWNER_MAX).decode("utf-8"))
        holder = (
            f"pid {int(info['pid'])} on {str(info['host'])[:100]} "
            f"({str(info['what'])[:200]}, since {str(info['since'])[:40]})"
        )
    return holder


def _try_lock(f: IO[bytes]) -> bool:
    if sys.platform == "win32":
        import msvcrt

        try:
            f.seek(0)
            msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _unlock(f: IO[bytes]) -> None:
    if sys.platform == "win32":
        import msvcrt

        with contextlib.suppress(OSError):
            f.seek(0)
            msvcrt.locking(f.fileno(), msvcrt.LK_UNLCK, 1)
    else:
        import fcntl

        fcntl.flock(f.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def cache_lock(cache: Path, what: str) -> Iterator[None]:
    cache.mkdir(parents=True, exist_ok=True)
    lock_path = cache / "lock"
    info_path = cache / "lock.owner"
    f = _open_lock(lock_path)
    try:
        if not _try_lock(f):
            holder = _holder(info_path)
            raise LockBusy(
                f"the cache {cache} is in use by {holder}",
                hint="wait for it to finish, or set PATCHKIT_CACHE to use another cache",
            )
        try:
            # atomic: a link planted as lock.owner is replaced, never written through
            atomic_write_text(
                info_path,
                json.dumps(
                    {
                        "pid": os.getpid(),
                        "host": socket.gethostname(),
                        "what": what,
                        "since": dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
                    }
                ),
            )
        except BaseException:
            _unlock(f)
            raise
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                info_path.unlink()
            _unlock(f)
    finally:
        f.close()
