"""Reading a .tar.gz someone handed us without letting its headers take the memory.

:mod:`tarfile` reads a pax extended header's or a GNU long-name header's whole payload in
one call (``fileobj.read(size)``) before it looks at it: a 3 MB gzip whose first member is
a pax header claiming 700 MiB of zeros costs 700 MiB of memory and more, then fails. Here
the decompressed stream refuses any single read above a cap (a header record larger than
``header_cap``, 1 MiB by default, is refused before it is read), members are counted and
the bytes skipped past are capped, and tarfile's list of every header read is emptied as
the members go by, so memory stays flat whatever the archive holds.

``patchkit.release.archive`` (verify's reader) guards its reads the same way with its own
budget; this is the small shared piece for callers that want one member out of a tarball
(``patchkit model get --from``).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import tarfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["HEADER_CAP", "NOT_A_TAR_GZ", "CappedReader", "TarRefused", "capped_members", "open_tar_gz"]

HEADER_CAP = 1 << 20  # a pax/GNU long-name header larger than this is refused unread

# what a caller catches besides TarRefused: the file is not a readable tar.gz
# (gzip.BadGzipFile, not OSError: a failed write in the caller's body is no bad archive)
NOT_A_TAR_GZ: tuple[type[Exception], ...] = (tarfile.TarError, gzip.BadGzipFile, EOFError, zlib.error)


class TarRefused(ValueError):
    """The archive would take more than its caps (the message: one line, why)."""


class CappedReader(io.RawIOBase):
    """A forward-only stream that refuses any single read above ``cap`` bytes (and any read
    after ``deadline``, a :func:`time.monotonic` value)."""

    def __init__(self, f: IO[bytes], cap: int, deadline: float | None = None) -> None:
        self.f, self.cap, self.deadline = f, cap, deadline

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0 or size > self.cap:
            what = "the rest of the stream" if size is None or size < 0 else f"{size} bytes"
            raise TarRefused(
                f"a tar header record of {what}, more than {self.cap - tarfile.BLOCKSIZE} (a bomb?)"
            )
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise TarRefused("reading it took too long")
        return self.f.read(size)

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET and offset < self.f.tell():
            raise TarRefused("the tar stream asks to be read backwards")
        return self.f.seek(offset, whence)

    def tell(self) -> int:
        return self.f.tell()


@contextlib.contextmanager
def open_tar_gz(
    path: Path, *, header_cap: int = HEADER_CAP, seconds: float | None = 600.0
) -> Iterator[tarfile.TarFile]:
    """``path`` (gzip-compressed tar) open for reading through a :class:`CappedReader`.

    Member data must be read in chunks of at most ``header_cap`` bytes. Raises
    :class:`TarRefused` for a cap, and :data:`NOT_A_TAR_GZ` for a file that is not a
    tar.gz; the caller turns both into its one-line error.
    """
    deadline = None if seconds is None else time.monotonic() + seconds
    with gzip.GzipFile(path, mode="rb") as gz:
        raw = CappedReader(gz, header_cap + tarfile.BLOCKSIZE, deadline)  # type: ignore[arg-type]
        with tarfile.open(fileobj=raw, mode="r:") as tar:
            yield tar


def capped_members(
    tar: tarfile.TarFile, *, members: int = 100_000, skipped: int = 1 << 30
) -> Iterator[tarfile.TarInfo]:
    """The members of ``tar`` one by one, forgetting each header once the next is read,
    refusing more than ``members`` of them or more than ``skipped`` bytes of member data
    declared before the caller stops (each member's data is skipped by decompressing it)."""
    total = 0
    for count, info in enumerate(tar, start=1):
        if count > members:
            raise TarRefused(f"more than {members} members (a bomb?)")
        if info.isfile():
            total += max(info.size, 0)
            if total > skipped:
                raise TarRefused(f"its members declare more than {skipped >> 20} MiB (a bomb?)")
        tar.members.clear()  # type: ignore[attr-defined]
        yield info
