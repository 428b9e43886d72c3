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
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from patchkit.core.errors import LockBusy

__all__ = ["cache_lock"]


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
    f = lock_path.open("a+b")
    try:
        if not _try_lock(f):
            holder = "another patchkit run"
            with contextlib.suppress(OSError, ValueError):
                info = json.loads(info_path.read_text(encoding="utf-8"))
                holder = (f"pid {info['pid']} on {info['host']} "
                          f"({info['what']}, since {info['since']})")
            raise LockBusy(
                f"the cache {cache} is in use by {holder}",
                hint="wait for it to finish, or set PATCHKIT_CACHE to use another cache",
            )
        info_path.write_text(json.dumps({
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "what": what,
            "since": dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
        }), encoding="utf-8")
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                info_path.unlink()
            _unlock(f)
    finally:
        f.close()
