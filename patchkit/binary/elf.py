"""A small reader of an ELF file's dynamic section, safe on hostile bytes.

It reads what the dynamic loader reads: the ELF header, the program headers, the
`PT_DYNAMIC` segment and the strings it names in `DT_STRTAB` (mapped through the
`PT_LOAD` segments), and nothing else. It seeks and reads small pieces, never the whole
file, with caps on every count and length, and checks every offset against the file's
size, so a crafted or truncated file is a `ElfFormatError`, never a crash, a hang or a
huge allocation. A file that does not start with the ELF magic is not an error: the
readers return None for it.

`read_dynamic(path)` never follows a symbolic link unless asked (`follow_symlinks=True`);
a link, a folder or anything else that is not a regular file is an `ElfFormatError`.
`parse_dynamic(stream, size)` reads from an open, seekable binary stream (an archive
member).

The version needs (``.gnu.version_r``, found through the dynamic section's
`DT_VERNEED`/`DT_VERNEEDNUM`, as the loader finds them) are read with the same care: each
library's entry and each version's entry are counted against a cap and bounds-checked,
and a chain that loops or points outside the file is an `ElfFormatError`.
`newest_versions(dyn)` gives the newest GLIBC_/GLIBCXX_/CXXABI_/GCC_ version a file needs:
its C library floor.

`rpath_problems(dyn)` is the shipping policy: every RPATH/RUNPATH entry must be
`$ORIGIN` or start with `$ORIGIN/` (also spelled `${ORIGIN}`); an empty entry (the
current directory for the loader), any other relative entry (relative to the current
directory) and an absolute path (a path of the machine that built it) are problems.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

__all__ = [
    "FLOOR_PREFIXES",
    "MAGIC",
    "MAX_DYNAMIC_ENTRIES",
    "MAX_STRING",
    "MAX_VERSION_NEEDS",
    "ElfDynamic",
    "ElfFormatError",
    "RpathProblem",
    "VersionNeed",
    "above_floor",
    "is_elf",
    "newest_versions",
    "parse_dynamic",
    "read_dynamic",
    "rpath_problems",
    "version_key",
]

MAGIC = b"\x7fELF"
MAX_PHNUM = 4096  # real binaries have about a dozen program headers
MAX_DYNAMIC_ENTRIES = 65536  # real ones have well under a hundred
MAX_NEEDED = 4096
MAX_STRING = 65536  # one NEEDED/SONAME/RPATH string, in bytes
_CHUNK = 4096

PT_LOAD = 1
PT_DYNAMIC = 2
DT_NULL = 0
DT_NEEDED = 1
DT_STRTAB = 5
DT_STRSZ = 10
DT_SONAME = 14
DT_RPATH = 15
DT_RUNPATH = 29
DT_VERNEED = 0x6FFFFFFE
DT_VERNEEDNUM = 0x6FFFFFFF
MAX_VERSION_NEEDS = 4096  # Verneed + Vernaux entries in one file (real ones: a few dozen)
# the symbol-version families of the C and C++ runtime a distribution fixes
FLOOR_PREFIXES = ("GLIBC", "GLIBCXX", "CXXABI", "GCC")

_MACHINES = {
    3: "x86",
    8: "mips",
    20: "ppc",
    21: "ppc64",
    22: "s390",
    40: "arm",
    62: "x86_64",
    183: "aarch64",
    190: "cuda",
    243: "riscv",
    258: "loongarch",
}


class ElfFormatError(ValueError):
    """The file claims to be ELF (or was expected to be a readable file) but cannot be
    read as one: truncated, an offset out of range, a count over a cap, a link."""


@dataclass(frozen=True, kw_only=True)
class VersionNeed:
    """One library of a file's ``.gnu.version_r``: the symbol versions it needs of it."""

    library: str  # libc.so.6
    versions: tuple[str, ...]  # ("GLIBC_2.2.5", "GLIBC_2.34"), as written


@dataclass(frozen=True, kw_only=True)
class ElfDynamic:
    """What an ELF file asks of the dynamic loader. A static executable or an object
    file has no dynamic segment: `dynamic` is False and the tuples are empty."""

    elf_class: int  # 32 or 64
    machine: str  # "x86_64", "aarch64", ... or "machine-N" for one not named here
    dynamic: bool
    needed: tuple[str, ...] = ()
    rpath: tuple[str, ...] = ()  # DT_RPATH, split on ":" (empty entries kept)
    runpath: tuple[str, ...] = ()  # DT_RUNPATH, split on ":" (empty entries kept)
    soname: str | None = None
    version_needs: tuple[VersionNeed, ...] = ()


@dataclass(frozen=True, kw_only=True)
class RpathProblem:
    tag: str  # "RUNPATH" or "RPATH"
    entry: str  # the entry as written ("" for an empty one)
    why: str  # "empty entry (the current directory)", ...

    def describe(self) -> str:
        shown = ascii(self.entry) if self.entry else "''"
        return f"{self.tag} entry {shown}: {self.why}"


def is_elf(head: bytes) -> bool:
    return head[:4] == MAGIC


def read_dynamic(path: Path, *, follow_symlinks: bool = False) -> ElfDynamic | None:
    """The dynamic section of the ELF file at `path`, or None when it is not ELF.

    Raises ElfFormatError for a malformed ELF file, and (unless `follow_symlinks`) for a
    symbolic link; OSError for a file that cannot be opened."""
    # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below)
    flags = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)
    if not follow_symlinks:
        if path.is_symlink():
            raise ElfFormatError(f"{path.name}: is a symbolic link (not followed)")
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ElfFormatError(f"{path.name}: is a symbolic link (not followed)") from e
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ElfFormatError(f"{path.name}: not a regular file")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:
        return parse_dynamic(f, st.st_size)


def parse_dynamic(stream: IO[bytes], size: int) -> ElfDynamic | None:
    """The dynamic section of the ELF image in a seekable binary `stream` of `size`
    bytes, or None when it does not start with the ELF magic."""
    return _Reader(stream, size).read()


class _Reader:
    def __init__(self, stream: IO[bytes], size: int) -> None:
        self.f = stream
        self.size = size

    def fail(self, why: str) -> ElfFormatError:
        return ElfFormatError(f"malformed ELF: {why}")

    def at(self, offset: int, length: int, what: str) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise self.fail(f"{what} lies outside the file ({offset}+{length} > {self.size} bytes)")
        self.f.seek(offset)
        data = self.f.read(length)
        if len(data) != length:
            raise self.fail(f"{what}: the file ends early")
        return data

    def read(self) -> ElfDynamic | None:
        if self.size < 16:
            return None
        ident = self.at(0, 16, "ELF ident")
        if not is_elf(ident):
            return None
        ei_class, ei_data = ident[4], ident[5]
        if ei_class not in (1, 2):
            raise self.fail(f"unknown class {ei_class}")
        if ei_data not in (1, 2):
            raise self.fail(f"unknown byte order {ei_data}")
        is64 = ei_class == 2
        end = "<" if ei_data == 1 else ">"
        if is64:
            hdr = self.at(16, 48, "ELF header")
            (
                _etype,
                machine,
                _ver,
                _entry,
                phoff,
                _shoff,
                _flags,
                _ehsize,
                phentsize,
                phnum,
                _shentsize,
                _shnum,
                _shstrndx,
            ) = struct.unpack(end + "HHIQQQIHHHHHH", hdr)
            ph_fmt, ph_size = end + "IIQQQQQQ", 56
        else:
            hdr = self.at(16, 36, "ELF header")
            (
                _etype,
                machine,
                _ver,
                _entry,
                phoff,
                _shoff,
                _flags,
                _ehsize,
                phentsize,
                phnum,
                _shentsize,
                _shnum,
                _shstrndx,
            ) = struct.unpack(end + "HHIIIIIHHHHHH", hdr)
            ph_fmt, ph_size = end + "IIIIIIII", 32
        elf_class = 64 if is64 else 32
        mname = _MACHINES.get(machine, f"machine-{machine}")
        if phnum == 0:
            return ElfDynamic(elf_class=elf_class, machine=mname, dynamic=False)
        if phnum > MAX_PHNUM:  # also PN_XNUM (0xffff): no real binary needs it
            raise self.fail(f"{phnum} program headers (at most {MAX_PHNUM} are read)")
        if phentsize < ph_size:
            raise self.fail(f"program header size {phentsize} < {ph_size}")
        raw = self.at(phoff, phentsize * phnum, "program headers")
        loads: list[tuple[int, int, int]] = []  # (vaddr, filesz, offset)
        dyn: tuple[int, int] | None = None  # (offset, filesz)
        for i in range(phnum):
            fields = struct.unpack_from(ph_fmt, raw, i * phentsize)
            if is64:
                p_type, _pf, p_offset, p_vaddr, _pa, p_filesz, _pm, _al = fields
            else:
                p_type, p_offset, p_vaddr, _pa, p_filesz, _pm, _pf, _al = fields
            if p_type == PT_LOAD:
                loads.append((p_vaddr, p_filesz, p_offset))
            elif p_type == PT_DYNAMIC:
                if dyn is not None:
                    raise self.fail("two PT_DYNAMIC segments")
                dyn = (p_offset, p_filesz)
        if dyn is None:
            return ElfDynamic(elf_class=elf_class, machine=mname, dynamic=False)
        return self.dynamic(dyn, loads, is64=is64, end=end, elf_class=elf_class, machine=mname)

    def dynamic(
        self,
        dyn: tuple[int, int],
        loads: list[tuple[int, int, int]],
        *,
        is64: bool,
        end: str,
        elf_class: int,
        machine: str,
    ) -> ElfDynamic:
        offset, filesz = dyn
        entsize = 16 if is64 else 8
        count = filesz // entsize
        if count > MAX_DYNAMIC_ENTRIES:
            raise self.fail(f"{count} dynamic entries (at most {MAX_DYNAMIC_ENTRIES} are read)")
        raw = self.at(offset, count * entsize, "dynamic segment")
        fmt = end + ("qQ" if is64 else "iI")
        strtab: int | None = None
        strsz: int | None = None
        needed: list[int] = []
        tags: dict[int, int] = {}
        for i in range(count):
            tag, val = struct.unpack_from(fmt, raw, i * entsize)
            if tag == DT_NULL:
                break
            if tag == DT_NEEDED:
                if len(needed) >= MAX_NEEDED:
                    raise self.fail(f"more than {MAX_NEEDED} NEEDED entries")
                needed.append(val)
            elif tag == DT_STRTAB:
                strtab = val
            elif tag == DT_STRSZ:
                strsz = val
            elif tag in (DT_SONAME, DT_RPATH, DT_RUNPATH, DT_VERNEED, DT_VERNEEDNUM):
                if tag in tags:
                    raise self.fail(f"two {_TAG_NAMES[tag]} entries")
                tags[tag] = val
        if not needed and not tags:
            return ElfDynamic(elf_class=elf_class, machine=machine, dynamic=True)
        if strtab is None or strsz is None:
            raise self.fail("dynamic strings named without DT_STRTAB/DT_STRSZ")
        str_off = self.map_vaddr(strtab, loads)
        if str_off + strsz > self.size:
            raise self.fail("the dynamic string table lies outside the file")

        def string(index: int, what: str) -> str:
            return self.string(str_off, strsz, index, what)

        rpath = tags.get(DT_RPATH)
        runpath = tags.get(DT_RUNPATH)
        soname = tags.get(DT_SONAME)
        verneed = tags.get(DT_VERNEED)
        needs: tuple[VersionNeed, ...] = ()
        if verneed is not None and tags.get(DT_VERNEEDNUM, 0) > 0:
            needs = self.version_needs(
                self.map_vaddr(verneed, loads, "DT_VERNEED"), tags[DT_VERNEEDNUM], end, string
            )
        return ElfDynamic(
            elf_class=elf_class,
            machine=machine,
            dynamic=True,
            needed=tuple(string(v, "NEEDED") for v in needed),
            rpath=tuple(string(rpath, "RPATH").split(":")) if rpath is not None else (),
            runpath=tuple(string(runpath, "RUNPATH").split(":")) if runpath is not None else (),
            soname=string(soname, "SONAME") if soname is not None else None,
            version_needs=needs,
        )

    def version_needs(
        self, offset: int, count: int, end: str, string: Callable[[int, str], str]
    ) -> tuple[VersionNeed, ...]:
        """The Verneed chain at ``offset`` (``count`` libraries) and each one's Vernaux
        chain; every entry counted against MAX_VERSION_NEEDS (so a loop ends)."""
        if count > MAX_VERSION_NEEDS:
            raise self.fail(f"DT_VERNEEDNUM {count} (at most {MAX_VERSION_NEEDS} are read)")
        out: list[VersionNeed] = []
        seen = 0
        pos = offset
        for _ in range(count):
            seen += 1
            if seen > MAX_VERSION_NEEDS:
                raise self.fail(f"more than {MAX_VERSION_NEEDS} version needs")
            vn_version, vn_cnt, vn_file, vn_aux, vn_next = struct.unpack(
                end + "HHIII", self.at(pos, 16, "version need")
            )
            if vn_version != 1:
                raise self.fail(f"version need revision {vn_version} (only 1 is defined)")
            versions: list[str] = []
            aux = pos + vn_aux
            for _ in range(vn_cnt):
                seen += 1
                if seen > MAX_VERSION_NEEDS:
                    raise self.fail(f"more than {MAX_VERSION_NEEDS} version needs")
                _hash, _flags, _other, vna_name, vna_next = struct.unpack(
                    end + "IHHII", self.at(aux, 16, "version need entry")
                )
                versions.append(string(vna_name, "version name"))
                if vna_next == 0:
                    break
                aux += vna_next
            out.append(VersionNeed(library=string(vn_file, "version need file"), versions=tuple(versions)))
            if vn_next == 0:
                break
            pos += vn_next
        return tuple(out)

    def map_vaddr(self, vaddr: int, loads: list[tuple[int, int, int]], what: str = "DT_STRTAB") -> int:
        for seg_vaddr, seg_filesz, seg_offset in loads:
            if seg_vaddr <= vaddr < seg_vaddr + seg_filesz:
                return seg_offset + (vaddr - seg_vaddr)
        raise self.fail(f"{what} address {vaddr:#x} is in no loaded segment")

    def string(self, table: int, table_size: int, index: int, what: str) -> str:
        if index >= table_size:
            raise self.fail(f"{what} string index {index} is past the string table ({table_size} bytes)")
        limit = min(table_size - index, MAX_STRING + 1)
        out = b""
        pos = table + index
        while len(out) < limit:
            n = min(_CHUNK, limit - len(out))
            chunk = self.at(pos, n, f"{what} string")
            nul = chunk.find(b"\0")
            if nul >= 0:
                out += chunk[:nul]
                return out.decode("utf-8", "surrogateescape")
            out += chunk
            pos += n
        if len(out) > MAX_STRING:
            raise self.fail(f"{what} string longer than {MAX_STRING} bytes")
        raise self.fail(f"{what} string runs past the string table")


_TAG_NAMES = {
    DT_SONAME: "SONAME",
    DT_RPATH: "RPATH",
    DT_RUNPATH: "RUNPATH",
    DT_VERNEED: "VERNEED",
    DT_VERNEEDNUM: "VERNEEDNUM",
}


def version_key(version: str) -> tuple[int, ...]:
    """ "2.31" -> (2, 31); a part that is not a number counts as 0 ("2.x" -> (2, 0))."""
    return tuple(int(p) if p.isdigit() and len(p) <= 9 else 0 for p in version.split("."))


def _split(name: str) -> tuple[str, str] | None:
    """ "GLIBC_2.34" -> ("GLIBC", "2.34"); None for a name of no floor family
    (GLIBC_PRIVATE, OPENSSL_3.0.0, a library's own version)."""
    prefix, sep, version = name.partition("_")
    if not sep or prefix not in FLOOR_PREFIXES or not version[:1].isdigit():
        return None
    return prefix, version


def newest_versions(needs: Iterable[VersionNeed]) -> dict[str, str]:
    """{family: newest version} over the needs, for GLIBC, GLIBCXX, CXXABI and GCC:
    the oldest C and C++ runtime that can load the file."""
    out: dict[str, str] = {}
    for need in needs:
        for name in need.versions:
            split = _split(name)
            if split is None:
                continue
            prefix, version = split
            if prefix not in out or version_key(version) > version_key(out[prefix]):
                out[prefix] = version
    return dict(sorted(out.items()))


def above_floor(newest: Mapping[str, str], floor: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(family, needed, floor) for each family whose newest version is above the floor."""
    return [
        (prefix, newest[prefix], limit)
        for prefix, limit in floor.items()
        if prefix in newest and version_key(newest[prefix]) > version_key(limit)
    ]


def _origin_based(entry: str) -> bool:
    return any(entry == token or entry.startswith(token + "/") for token in ("$ORIGIN", "${ORIGIN}"))


def rpath_problems(dyn: ElfDynamic) -> tuple[RpathProblem, ...]:
    """Every RPATH/RUNPATH entry that is not `$ORIGIN`-based, in the order written."""
    out: list[RpathProblem] = []
    for tag, entries in (("RUNPATH", dyn.runpath), ("RPATH", dyn.rpath)):
        for entry in entries:
            if entry == "":
                why = "empty entry (the loader reads it as the current directory)"
            elif _origin_based(entry):
                continue
            elif entry.startswith("/"):
                why = "absolute path (a path of the machine that built it)"
            else:
                why = "relative entry (the current directory's); only $ORIGIN-based ones are allowed"
            out.append(RpathProblem(tag=tag, entry=entry, why=why))
    return tuple(out)
