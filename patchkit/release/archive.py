"""Reproducible archives: the same members give the same bytes on any machine.

Both formats put every member under one top folder (``ROOT/...``), in sorted order,
with one fixed mtime, owner 0/0 with empty names, and mode 0755 or 0644; there are
no directory entries. ``.tar.gz``: PAX tar in a gzip stream whose header has mtime 0
and no file name. ``.zip``: deflate level 9, Unix "made by" (so modes survive on any
host), no extra fields, dates in UTC (zip cannot hold dates before 1980, so those
clamp to 1980-01-01; zip keeps even seconds only).

Deflate output is byte-identical for the same zlib; different zlib builds could in
principle compress differently, which is why ``check_archive`` checks the recorded
metadata rather than re-compressing.
"""

from __future__ import annotations

import calendar
import contextlib
import dataclasses
import gzip
import hashlib
import io
import lzma
import shutil
import stat
import struct
import tarfile
import tempfile
import time
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from patchkit.binary.elf import MAGIC as ELF_MAGIC
from patchkit.binary.elf import ElfDynamic, ElfFormatError, parse_dynamic
from patchkit.core.fs import atomic_file, sha256_stream
from patchkit.core.tarcap import CappedReader

__all__ = [
    "ARCHIVE_SUFFIXES",
    "DEFAULT_LIMITS",
    "ArchiveRefused",
    "EntryInfo",
    "Limits",
    "Member",
    "archive_kind",
    "check_archive",
    "read_archive",
    "unsafe_member_name",
    "write_archive",
    "zip_date_time",
]

ARCHIVE_SUFFIXES = (".tar.gz", ".zip")
_ZIP_MIN = 315532800  # 1980-01-01T00:00:00Z
_LEVEL = 9
_UNIX = 3  # zip "version made by" host: Unix
_CHUNK = 1 << 16  # hashing reads (tar: no single read may exceed Limits.header + a block)


class ArchiveRefused(ValueError):
    """Reading an archive hit one of its :class:`Limits` (a bomb?): nothing more is read."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Limits:
    """What ``read_archive`` will read before it refuses: every size and count is capped,
    and so is the time, so a hostile archive costs bounded memory and time."""

    keep: int = 4 << 20  # a member kept in memory (manifest.json)
    members: int = 10_000
    total: int = 32 << 30  # uncompressed bytes of all members (a CUDA bundle is ~1.5 GB)
    header: int = 1 << 16  # one tar header record (pax, GNU long name)
    central_directory: int = 16 << 20  # a zip's directory, read whole by zipfile
    seconds: float = 1800.0  # the whole read


DEFAULT_LIMITS = Limits()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Member:
    """One file to pack: ``name`` is relative to the archive's top folder (posix)."""

    name: str
    mode: int  # 0o755 or 0o644
    data: bytes | None = None
    source: Path | None = None

    def __post_init__(self) -> None:
        if (self.data is None) == (self.source is None):
            raise ValueError("a Member needs exactly one of data or source")

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else self.source.stat().st_size  # type: ignore[union-attr]

    def open(self) -> io.BufferedIOBase:
        if self.data is not None:
            return io.BytesIO(self.data)
        return self.source.open("rb")  # type: ignore[union-attr]


@dataclasses.dataclass(frozen=True, kw_only=True)
class EntryInfo:
    """One entry as found in an archive (for verify)."""

    name: str  # full name in the archive, top folder included
    is_file: bool
    size: int
    sha256: str
    data: bytes | None  # kept only for names the caller asked for
    mode: int
    mtime: int  # tar: seconds; zip: seconds since epoch of its (UTC) date_time
    owner: tuple[int, int, str, str] | None  # tar: uid, gid, uname, gname
    extra: bool  # zip: has extra fields / a comment / a non-Unix "made by"
    # with inspect_elf: an ELF member's dynamic section, or why it cannot be read
    elf: ElfDynamic | None = None
    elf_error: str | None = None


def archive_kind(name: str) -> str:
    """'tar.gz' or 'zip' from a file name; ValueError for anything else."""
    for suffix in ARCHIVE_SUFFIXES:
        if name.endswith(suffix):
            return suffix[1:]
    raise ValueError(f"{name}: not a .tar.gz or .zip")


def zip_date_time(mtime: int) -> tuple[int, int, int, int, int, int]:
    t = time.gmtime(max(mtime, _ZIP_MIN))
    return (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec - t.tm_sec % 2)


def _zip_epoch(date_time: tuple[int, ...]) -> int:
    return calendar.timegm((*date_time, 0, 0, 0))


def _sorted(members: Sequence[Member]) -> list[Member]:
    names = [m.name for m in members]
    if len(set(names)) != len(names):
        raise ValueError("duplicate member names")
    return sorted(members, key=lambda m: m.name)


def _write_tar_gz(f: IO[bytes], root: str, members: Sequence[Member], mtime: int) -> None:
    with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=_LEVEL) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for m in _sorted(members):
                info = tarfile.TarInfo(f"{root}/{m.name}")
                info.size = m.size
                info.mtime = mtime
                info.mode = m.mode
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.type = tarfile.REGTYPE
                with m.open() as src:
                    tar.addfile(info, src)


def _write_zip(f: IO[bytes], root: str, members: Sequence[Member], mtime: int) -> None:
    date_time = zip_date_time(mtime)
    with zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_DEFLATED, compresslevel=_LEVEL) as zf:
        for m in _sorted(members):
            info = zipfile.ZipInfo(f"{root}/{m.name}", date_time=date_time)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = _UNIX
            info.external_attr = (stat.S_IFREG | m.mode) << 16
            info.file_size = m.size  # decides zip64 up front, so it never depends on timing
            # ZipFile(compresslevel=) is not applied to open(info, "w"): set it on the entry
            # (Python 3.13 renamed the private slot)
            setattr(info, "compress_level" if hasattr(info, "compress_level") else "_compresslevel", _LEVEL)
            with m.open() as src, zf.open(info, mode="w") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)


def write_archive(path: Path, root: str, members: Sequence[Member], *, mtime: int) -> str:
    """Pack ``members`` under ``root/`` into ``path`` (kind from its suffix), atomically.

    The archive is written to a temp file beside ``path`` and renamed over it, so an
    interrupted run leaves no half archive. Returns the archive's sha256.
    """
    kind = archive_kind(path.name)
    with atomic_file(path, mode=0o644) as (f, _):
        if kind == "zip":
            _write_zip(f, root, members, mtime)
        else:
            _write_tar_gz(f, root, members, mtime)
        f.flush()
        f.seek(0)
        digest = sha256_stream(f)
    return digest


def read_archive(
    path: Path, keep: Sequence[str] = (), *, limits: Limits = DEFAULT_LIMITS, inspect_elf: bool = False
) -> list[EntryInfo]:
    """Every entry of an archive, in stored order, hashed as a stream; the data of ``keep``
    names kept (each at most ``limits.keep`` bytes). With ``inspect_elf``, a member that
    starts with the ELF magic is spooled to a temp file as it streams past (its size is
    already within the limits) and its dynamic section read from there (``elf``,
    ``elf_error``): a tar.gz cannot be read backwards, and the loader's view of a big
    library ends far from its start.

    Raises ValueError (with a one-line reason) when the file is not a readable archive,
    and :class:`ArchiveRefused` (a ValueError) when it would take more than ``limits``.
    """
    kind = archive_kind(path.name)
    budget = _Budget(limits, path.name)
    budget.inspect_elf = inspect_elf
    try:
        return list(_read_zip(path, keep, budget) if kind == "zip" else _read_tar(path, keep, budget))
    except ArchiveRefused:
        raise
    except RecursionError:
        raise ArchiveRefused("tar headers chained too deeply (a bomb?)") from None
    except (
        tarfile.TarError,
        zipfile.BadZipFile,
        OSError,
        EOFError,
        zlib.error,
        lzma.LZMAError,
        NotImplementedError,
        RuntimeError,
        struct.error,
        UnicodeError,
        OverflowError,
        ValueError,
    ) as e:
        raise ValueError(f"not a readable {kind} archive ({str(e)[:200]})") from None


class _Budget:
    """The limits of one read: members seen, bytes hashed, the deadline."""

    def __init__(self, limits: Limits, label: str) -> None:
        self.limits = limits
        self.inspect_elf = False
        self.members = 0
        self.total = 0
        self.deadline = time.monotonic() + limits.seconds

    def member(self, name: str, declared: int, keep: bool) -> None:
        self.members += 1
        lim = self.limits
        if self.members > lim.members:
            raise ArchiveRefused(f"more than {lim.members} members (a bomb?)")
        if declared < 0 or self.total + declared > lim.total:
            raise ArchiveRefused(
                f"{name}: its {declared} bytes take the members past {_gib(lim.total)} uncompressed (a bomb?)"
            )
        if keep and declared > lim.keep:
            raise ArchiveRefused(
                f"{name} is {declared} bytes uncompressed, more than the "
                f"{lim.keep >> 20} MiB a manifest may be (a bomb?)"
            )

    def add(self, n: int) -> None:
        self.total += n
        if self.total > self.limits.total:
            raise ArchiveRefused(f"the members inflate past {_gib(self.limits.total)} (a bomb?)")
        self.tick()

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise ArchiveRefused(f"reading it took more than {self.limits.seconds:.0f}s")


def _gib(n: int) -> str:
    return f"{n / (1 << 30):g} GiB"


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Hashed:
    sha256: str
    size: int
    data: bytes | None
    elf: ElfDynamic | None = None
    elf_error: str | None = None


def _hash_and_keep(src: IO[bytes], keep: bool, budget: _Budget, declared: int, name: str) -> _Hashed:
    h = hashlib.sha256()
    size = 0
    kept = bytearray() if keep else None
    with contextlib.ExitStack() as stack:
        spool: IO[bytes] | None = None
        for chunk in iter(lambda: src.read(_CHUNK), b""):
            if size == 0 and budget.inspect_elf and chunk[:4] == ELF_MAGIC:
                spool = stack.enter_context(tempfile.TemporaryFile(prefix="patchkit-elf-"))
            h.update(chunk)
            size += len(chunk)
            budget.add(len(chunk))
            if size > declared:
                raise ArchiveRefused(f"{name} inflates past its declared {declared} bytes")
            if kept is not None:
                kept += chunk
            if spool is not None:
                spool.write(chunk)
        elf, elf_error = None, None
        if spool is not None:
            spool.flush()
            try:
                elf = parse_dynamic(spool, size)
            except ElfFormatError as e:
                elf_error = str(e)
    return _Hashed(
        sha256=h.hexdigest(),
        size=size,
        data=bytes(kept) if kept is not None else None,
        elf=elf,
        elf_error=elf_error,
    )


def _read_tar(path: Path, keep: Sequence[str], budget: _Budget) -> Iterator[EntryInfo]:
    with gzip.GzipFile(path, mode="rb") as gz:
        cap = budget.limits.header + tarfile.BLOCKSIZE
        raw = CappedReader(gz, cap, tick=budget.tick, refused=ArchiveRefused)  # type: ignore[arg-type]
        with tarfile.open(fileobj=raw, mode="r:") as tar:
            for info in tar:
                wanted = info.name in keep
                budget.member(info.name, info.size if info.isfile() else 0, wanted)
                got = _Hashed(sha256="", size=info.size, data=None)
                if info.isfile():
                    src = tar.extractfile(info)
                    assert src is not None
                    got = _hash_and_keep(src, wanted, budget, info.size, info.name)
                # tarfile keeps every header it read: drop them, so memory stays flat
                tar.members.clear()  # type: ignore[attr-defined]
                yield EntryInfo(
                    name=info.name,
                    is_file=info.isreg() and not info.issparse(),
                    size=got.size,
                    sha256=got.sha256,
                    data=got.data,
                    mode=info.mode,
                    mtime=int(info.mtime),
                    owner=(info.uid, info.gid, info.uname, info.gname),
                    extra=False,
                    elf=got.elf,
                    elf_error=got.elf_error,
                )


def _check_zip_directory(f: IO[bytes], budget: _Budget) -> None:
    """Before zipfile reads the central directory whole: its entry count and size."""
    end_rec = getattr(zipfile, "_EndRecData", None)
    if end_rec is None:  # pragma: no cover - a Python without the private helper
        return
    rec = end_rec(f)
    if rec is None:
        return  # zipfile says "not a zip file" itself
    entries, size = rec[getattr(zipfile, "_ECD_ENTRIES_TOTAL", 4)], rec[getattr(zipfile, "_ECD_SIZE", 5)]
    lim = budget.limits
    if entries > lim.members:
        raise ArchiveRefused(f"its directory lists {entries} members, more than {lim.members} (a bomb?)")
    if size > lim.central_directory:
        raise ArchiveRefused(
            f"its directory is {size} bytes, more than {lim.central_directory >> 20} MiB (a bomb?)"
        )


def _read_zip(path: Path, keep: Sequence[str], budget: _Budget) -> Iterator[EntryInfo]:
    with path.open("rb") as f:
        _check_zip_directory(f, budget)
        f.seek(0)
        with zipfile.ZipFile(f) as zf:
            for info in zf.infolist():
                wanted = info.filename in keep
                budget.member(info.filename, info.file_size, wanted)
                with zf.open(info) as src:
                    got = _hash_and_keep(src, wanted, budget, info.file_size, info.filename)
                unix = info.external_attr >> 16
                kind = stat.S_IFMT(unix)
                mode = unix & 0o7777
                yield EntryInfo(
                    name=info.filename,
                    is_file=not info.is_dir() and kind in (0, stat.S_IFREG),
                    size=got.size,
                    sha256=got.sha256,
                    data=got.data,
                    mode=mode,
                    mtime=_zip_epoch(info.date_time),
                    owner=None,
                    extra=bool(info.extra or info.comment)
                    or info.create_system != _UNIX
                    or info.compress_type != zipfile.ZIP_DEFLATED,
                    elf=got.elf,
                    elf_error=got.elf_error,
                )


def unsafe_member_name(name: str) -> str:
    """Why an unpacker could write a member outside its folder (or nowhere sane), or ''."""
    if not name or "\0" in name:
        return "an empty name or one with a NUL byte"
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return "an absolute name"
    if "\\" in name:
        return "a backslash in the name (a folder separator on Windows)"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "an empty, '.' or '..' component in the name"
    return ""


def check_archive(path: Path, entries: Sequence[EntryInfo], *, root: str, mtime: int) -> list[str]:
    """What about an archive's layout is not what ``write_archive`` would have written.

    One short sentence per problem (the caller prefixes the archive name).
    """
    problems: list[str] = []
    names = [e.name for e in entries]
    if names != sorted(names):
        problems.append("entries are not in sorted order")
    seen: set[str] = set()
    for n in names:
        if n in seen:
            problems.append(f"{n}: appears twice (an unpacker keeps the last one)")
        seen.add(n)
        why = unsafe_member_name(n)
        if why:
            problems.append(f"{n[:200]!r}: {why}")
    kind = archive_kind(path.name)
    want_mtime = _zip_epoch(zip_date_time(mtime)) if kind == "zip" else mtime
    for e in entries:
        if not e.name.startswith(f"{root}/"):
            problems.append(f"{e.name}: outside the top folder {root}/")
        if not e.is_file:
            problems.append(f"{e.name}: not a regular file")
        if e.mode not in (0o755, 0o644):
            problems.append(f"{e.name}: mode {e.mode:o}, expected 755 or 644")
        if e.mtime != want_mtime:
            problems.append(f"{e.name}: mtime {e.mtime}, the manifest declares {want_mtime}")
        if e.owner is not None and e.owner != (0, 0, "", ""):
            problems.append(
                f"{e.name}: owner {e.owner[0]}:{e.owner[1]} "
                f"({e.owner[2]!r}:{e.owner[3]!r}), expected 0:0 with no names"
            )
        if e.extra:
            problems.append(f"{e.name}: zip entry is not deflated/Unix, or has extra fields")
    if kind == "tar.gz":
        with path.open("rb") as f:
            head = f.read(10)
        if len(head) == 10 and head[:2] == b"\x1f\x8b":
            if head[3] & 0x08:
                problems.append("gzip header holds a file name")
            if head[4:8] != b"\0\0\0\0":
                problems.append("gzip header holds a timestamp")
    return problems
