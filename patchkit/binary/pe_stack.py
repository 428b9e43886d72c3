"""Windows PE header edits: the main thread's stack reserve (like ``editbin /STACK``).

Tensor split over RPC makes ggml-rpc's client recurse over ~1,800 graph nodes; the
1 MB (MSVC) / 2 MB (mingw) default stack overflows on Windows. Setting
``OPTIONAL_HEADER.SizeOfStackReserve`` after the build fixes it without touching the
sources, on any OS.

An edit is planned on the bytes first (every refusal happens there, nothing is
written), then written to a temp file next to the original, re-read and verified,
and only then renamed over the original (``os.replace``, through
``core.fs.atomic_write_many``: a batch is all or nothing): a crash leaves either the
old file or the verified new one. A file that already has the asked values is not
rewritten.

The headers are read by one parser, this module's own (``_layout``), not pefile: it
reads only the fixed fields it edits (COFF header, optional header magic, stack
reserve/commit, checksum, the certificate directory) and refuses, naming the file, any
offset or size that runs past the end, a section table beyond the file, a wrong magic
or a short optional header. pefile is built to load odd files leniently (it warns and
goes on, and parses far more than these fields), which is what a reader of import
tables wants (``pe_imports``) and not what a writer of hostile files should trust:
an edit must never be computed from a header pefile accepted but the loader reads
differently. The checksum is the one imagehlp and pefile compute (the tests compare
it with pefile's).
"""

from __future__ import annotations

import dataclasses
import stat
import struct
import sys
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from patchkit.core.errors import PEError
from patchkit.core.fs import BatchWriteError, atomic_write_many, read_capped
from patchkit.core.record import Record
from patchkit.core.units import PAGE_SIZE, format_size, parse_size

__all__ = [
    "PEInfo",
    "StackEdit",
    "StackPlan",
    "apply_stack_edit",
    "apply_stack_edits",
    "pe_checksum",
    "pe_info",
    "plan_stack_edit",
    "set_stack_reserve",
]

_MAGIC_PE32 = 0x10B
_MAGIC_PE32_PLUS = 0x20B
_FILE_DLL = 0x2000
_FILE_LARGE_ADDRESS_AWARE = 0x0020
# what the Windows loader can give a thread's stack: the user address space
X64_USER_SPACE = 128 << 40  # 128 TiB (x64, 47-bit user addresses)
PE32_USER_SPACE = 2 << 30  # 2 GiB for a 32-bit exe...
PE32_LAA_USER_SPACE = 4 << 30  # ...4 GiB with IMAGE_FILE_LARGE_ADDRESS_AWARE (on 64-bit Windows)
_SECURITY_DIR = 4  # IMAGE_DIRECTORY_ENTRY_SECURITY: (file offset, size) of the certificate table

_MACHINES = {0x8664: "x86_64", 0x14C: "i386", 0xAA64: "arm64", 0x1C4: "armnt", 0x200: "ia64"}
_SUBSYSTEMS = {
    1: "native",
    2: "windows-gui",
    3: "console",
    9: "windows-ce-gui",
    10: "efi-application",
    11: "efi-boot-driver",
    12: "efi-runtime-driver",
    14: "xbox",
    16: "boot-application",
}


def pe_checksum(data: bytes | bytearray, checksum_offset: int) -> int:
    """The PE image checksum (as pefile's ``generate_checksum`` / imagehlp's CheckSumMappedFile).

    A one's-complement sum of the file's 16-bit little-endian words, skipping the
    4-byte CheckSum field, folded to 16 bits, plus the file length.
    """
    words = array("H")
    words.frombytes(bytes(data) + (b"\0" if len(data) % 2 else b""))
    if sys.byteorder == "big":  # pragma: no cover
        words.byteswap()
    skip = checksum_offset // 2
    total = sum(words) - sum(words[skip : skip + 2])
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total + len(data)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PEInfo(Record):
    """A PE file's header, as ``pe-info`` shows it."""

    json_derived: ClassVar[tuple[str, ...]] = ("checksum_ok",)

    path: Path  # the file, as named
    machine: str  # x86_64, i386, arm64, ... or 0xNNNN
    format: str  # "PE32" or "PE32+"
    subsystem: str  # console, windows-gui, ...
    is_dll: bool  # IMAGE_FILE_DLL is set
    large_address_aware: bool  # IMAGE_FILE_LARGE_ADDRESS_AWARE (PE32: 4 GiB, not 2 GiB)
    stack_reserve: int  # SizeOfStackReserve, bytes
    stack_commit: int  # SizeOfStackCommit, bytes
    checksum: int  # as stored in the header
    checksum_computed: int  # what the file's bytes give
    signed: bool  # the security (certificate) directory is non-empty
    certificate_offset: int  # of the certificate table, 0 when unsigned
    certificate_size: int  # of the certificate table, 0 when unsigned
    size: int  # file size in bytes

    @property
    def checksum_ok(self) -> bool:
        """the stored checksum is the computed one"""
        return self.checksum == self.checksum_computed

    @property
    def field_max(self) -> int:
        """The largest page multiple the header's field holds (32 or 64 bits)."""
        return (1 << 32) - PAGE_SIZE if self.format == "PE32" else (1 << 64) - PAGE_SIZE

    @property
    def loader_max(self) -> tuple[int, str]:
        """The largest stack the Windows loader can honour for this exe, and why."""
        if self.format == "PE32+":
            return X64_USER_SPACE, "the x64 user address space"
        if self.large_address_aware:
            return PE32_LAA_USER_SPACE, ("the 32-bit address space of a large-address-aware exe")
        return PE32_USER_SPACE, (
            "the user address space of a 32-bit exe without IMAGE_FILE_LARGE_ADDRESS_AWARE"
        )

    @property
    def max_stack(self) -> int:
        return min(self.field_max, self.loader_max[0])


@dataclasses.dataclass(frozen=True, kw_only=True)
class StackEdit(Record):
    """What ``set_stack_reserve`` did to one file."""

    file: Path  # the file, as named
    reserve_before: int  # stack reserve before, bytes
    reserve_after: int  # stack reserve after, bytes
    commit_before: int  # stack commit before, bytes
    commit_after: int  # stack commit after, bytes
    checksum_before: int  # header checksum before
    checksum_after: int  # header checksum after
    changed: bool  # False: the file already had these values and was not rewritten
    signature_removed: bool = False  # its Authenticode signature was removed (--allow-unsign)

    def describe(self) -> str:
        if not self.changed:
            return (
                f"{self.file.name}: already {format_size(self.reserve_after)} "
                f"(commit {format_size(self.commit_after)}); not rewritten"
            )
        text = (
            f"{self.file.name}: stack reserve {format_size(self.reserve_before)} -> "
            f"{format_size(self.reserve_after)}"
        )
        if self.commit_after != self.commit_before:
            text += f", commit {format_size(self.commit_before)} -> {format_size(self.commit_after)}"
        else:
            text += f" (commit {format_size(self.commit_after)})"
        text += f"; checksum 0x{self.checksum_before:08x} -> 0x{self.checksum_after:08x}"
        if self.signature_removed:
            text += "; Authenticode signature removed"
        return text


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Layout:
    """Offsets of the fields we read and write, found by our own parser."""

    is_plus: bool
    machine: int
    characteristics: int
    subsystem: int
    checksum_off: int
    reserve_off: int
    commit_off: int
    security_off: int | None  # offset of the security directory entry, None if absent

    @property
    def field_fmt(self) -> str:
        return "<Q" if self.is_plus else "<I"


def _fail(label: str, msg: str) -> PEError:
    return PEError(f"{label}: {msg}")


def _layout(data: bytes, label: str) -> _Layout:
    """Parse the headers strictly; anything odd is a PEError naming the file."""
    n = len(data)
    if n < 0x40 or data[:2] != b"MZ":
        raise _fail(label, "not a PE file (no MZ header)")
    e_lfanew = struct.unpack_from("<I", data, 0x3C)[0]
    if e_lfanew + 24 > n:
        raise _fail(label, "truncated or corrupt PE headers (PE header offset beyond the end)")
    if data[e_lfanew : e_lfanew + 4] != b"PE\0\0":
        raise _fail(label, "not a PE file (MZ header without a PE signature: DOS program?)")
    coff = e_lfanew + 4
    machine, nsections, _, _, _, opt_size, characteristics = struct.unpack_from("<HHIIIHH", data, coff)
    opt = coff + 20
    if opt + 2 > n:
        raise _fail(label, "truncated PE headers (no optional header)")
    magic = struct.unpack_from("<H", data, opt)[0]
    if magic not in (_MAGIC_PE32, _MAGIC_PE32_PLUS):
        raise _fail(
            label, f"corrupt PE headers (optional header magic 0x{magic:x} is neither PE32 nor PE32+)"
        )
    is_plus = magic == _MAGIC_PE32_PLUS
    nrva_rel = 108 if is_plus else 92
    dirs_rel = nrva_rel + 4
    if opt_size < dirs_rel:
        raise _fail(
            label,
            f"corrupt PE headers (optional header is {opt_size} bytes, "
            f"too short for {'PE32+' if is_plus else 'PE32'})",
        )
    sections = opt + opt_size
    headers_end = sections + 40 * nsections
    if headers_end > n:
        raise _fail(label, "truncated PE headers (section table beyond the end of the file)")
    size_of_headers = struct.unpack_from("<I", data, opt + 60)[0]
    if size_of_headers > n:
        raise _fail(label, "truncated file (SizeOfHeaders beyond the end of the file)")
    for i in range(nsections):
        raw_size, raw_ptr = struct.unpack_from("<II", data, sections + 40 * i + 16)
        if raw_size and raw_ptr + raw_size > n:
            name = data[sections + 40 * i : sections + 40 * i + 8].rstrip(b"\0").decode("latin-1")
            raise _fail(
                label,
                f"truncated file (section {name!r} ends at byte {raw_ptr + raw_size}, the file has {n})",
            )
    subsystem = struct.unpack_from("<H", data, opt + 68)[0]
    nrva = struct.unpack_from("<I", data, opt + nrva_rel)[0]
    security_off = None
    if nrva > _SECURITY_DIR and dirs_rel + 8 * (_SECURITY_DIR + 1) <= opt_size:
        security_off = opt + dirs_rel + 8 * _SECURITY_DIR
    return _Layout(
        is_plus=is_plus,
        machine=machine,
        characteristics=characteristics,
        subsystem=subsystem,
        checksum_off=opt + 64,
        reserve_off=opt + 72,
        commit_off=opt + (80 if is_plus else 76),
        security_off=security_off,
    )


PE_MAX = 4 << 30  # a PE image cannot be larger (its sizes are 32-bit)


def _read(path: Path) -> bytes:
    """The whole file; a FIFO or device (/dev/zero, /dev/stdin) is refused, never read."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise PEError(f"{path}: no such file") from None
    except OSError as e:
        raise PEError(f"{path}: cannot read: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise PEError(f"{path}: is a directory, not a PE file")
    if not stat.S_ISREG(st.st_mode):
        raise PEError(f"{path}: not a regular file (a FIFO or a device?), not a PE file")
    if st.st_size > PE_MAX:
        raise PEError(f"{path}: {st.st_size} bytes, larger than any PE file can be")
    return read_capped(path, limit=PE_MAX, error=PEError, what=str(path))


def _certificate(data: bytes, layout: _Layout, label: str) -> tuple[int, int]:
    if layout.security_off is None:
        return 0, 0
    off, size = struct.unpack_from("<II", data, layout.security_off)
    if size == 0:
        return 0, 0
    if off + size > len(data):
        raise _fail(
            label,
            f"corrupt certificate table ({size} bytes at offset {off} run past "
            f"the end of the {len(data)}-byte file)",
        )
    return off, size


def _info(path: Path, data: bytes) -> PEInfo:
    label = str(path)
    layout = _layout(data, label)
    cert_off, cert_size = _certificate(data, layout, label)
    fmt = layout.field_fmt
    return PEInfo(
        path=path,
        machine=_MACHINES.get(layout.machine, f"0x{layout.machine:04x}"),
        format="PE32+" if layout.is_plus else "PE32",
        subsystem=_SUBSYSTEMS.get(layout.subsystem, f"subsystem-{layout.subsystem}"),
        is_dll=bool(layout.characteristics & _FILE_DLL),
        large_address_aware=bool(layout.characteristics & _FILE_LARGE_ADDRESS_AWARE),
        stack_reserve=struct.unpack_from(fmt, data, layout.reserve_off)[0],
        stack_commit=struct.unpack_from(fmt, data, layout.commit_off)[0],
        checksum=struct.unpack_from("<I", data, layout.checksum_off)[0],
        checksum_computed=pe_checksum(data, layout.checksum_off),
        signed=cert_size > 0,
        certificate_offset=cert_off,
        certificate_size=cert_size,
        size=len(data),
    )


def pe_info(path: Path | str) -> PEInfo:
    """Machine, PE32/PE32+, subsystem, stack reserve/commit, checksum, signed or not."""
    path = Path(path)
    return _info(path, _read(path))


@dataclasses.dataclass(frozen=True, kw_only=True)
class StackPlan:
    """A checked edit of one file, not yet written (``apply_stack_edit`` writes it)."""

    path: Path  # resolved: symlinks are followed, the target is edited
    before: PEInfo
    reserve: int
    commit: int
    new_data: bytes | None  # None: nothing to change
    signature_removed: bool


def _check_size(label: str, what: str, value: int, info: PEInfo) -> None:
    if value <= 0:
        raise _fail(label, f"stack {what} must be positive, not {value}")
    if value % PAGE_SIZE:
        raise _fail(
            label,
            f"stack {what} {value} ({format_size(value)}) is not a multiple of the page size ({PAGE_SIZE})",
        )
    if value > info.field_max:
        field = "32-bit" if info.format == "PE32" else "64-bit"
        raise _fail(
            label,
            f"stack {what} {format_size(value)} does not fit the {info.format} "
            f"{field} field (at most {format_size(info.field_max)})",
        )
    limit, why = info.loader_max
    if value > limit:
        raise _fail(
            label,
            f"stack {what} {format_size(value)} is more than the Windows loader "
            f"can honour for a {info.format} exe: at most {format_size(limit)} "
            f"({why})",
        )


def plan_stack_edit(
    path: Path | str,
    reserve: int | str,
    commit: int | str | None = None,
    *,
    allow_dll: bool = False,
    allow_unsign: bool = False,
) -> StackPlan:
    """Check everything and compute the new bytes; writes nothing.

    ``commit=None`` keeps the file's commit, lowered to the reserve if it was larger.
    """
    given = Path(path)
    target = given.resolve()
    label = str(given)
    data = _read(target)
    info = _info(given, data)
    reserve_n = parse_size(reserve)
    _check_size(label, "reserve", reserve_n, info)
    if commit is None:
        commit_n = min(info.stack_commit, reserve_n)
    else:
        commit_n = parse_size(commit)
        _check_size(label, "commit", commit_n, info)
        if commit_n > reserve_n:
            raise _fail(
                label,
                f"stack commit {format_size(commit_n)} is larger than the reserve {format_size(reserve_n)}",
            )
    if info.is_dll and not allow_dll:
        raise _fail(
            label,
            "is a DLL: Windows takes the stack size from the .exe, not from "
            "DLLs (pass --allow-dll to edit it anyway)",
        )
    if reserve_n == info.stack_reserve and commit_n == info.stack_commit:
        return StackPlan(
            path=target,
            before=info,
            reserve=reserve_n,
            commit=commit_n,
            new_data=None,
            signature_removed=False,
        )
    layout = _layout(data, label)
    new = bytearray(data)
    removed = False
    if info.signed:
        if not allow_unsign:
            raise _fail(
                label,
                "is Authenticode-signed and editing its header invalidates the "
                "signature (pass --allow-unsign to remove the signature, then "
                "re-sign the file)",
            )
        end = info.certificate_offset + info.certificate_size
        # Signing tools append the table last, 8-byte aligned; allow zero padding after it.
        if any(new[end:]) or len(new) - end >= 8:
            raise _fail(
                label,
                "the certificate table is not at the end of the file: cannot remove the signature safely",
            )
        del new[info.certificate_offset :]
        assert layout.security_off is not None
        struct.pack_into("<II", new, layout.security_off, 0, 0)
        removed = True
    struct.pack_into(layout.field_fmt, new, layout.reserve_off, reserve_n)
    struct.pack_into(layout.field_fmt, new, layout.commit_off, commit_n)
    struct.pack_into("<I", new, layout.checksum_off, pe_checksum(new, layout.checksum_off))
    return StackPlan(
        path=target,
        before=info,
        reserve=reserve_n,
        commit=commit_n,
        new_data=bytes(new),
        signature_removed=removed,
    )


def _verify(plan: StackPlan, tmp: Path, label: str) -> int:
    """Re-read the written temp file: the bytes meant, and the header fields read back by the
    same strict parser that planned the edit; the new checksum."""
    assert plan.new_data is not None
    data = tmp.read_bytes()
    if data != plan.new_data:
        raise _fail(
            label,
            "verification failed: the written file differs from what was meant "
            "to be written (disk full?); the original is unchanged",
        )
    try:
        after = _info(plan.before.path, data)
    except PEError as e:
        raise _fail(label, f"verification failed: {e.message}; the original is unchanged") from None
    got = (after.stack_reserve, after.stack_commit, after.checksum)
    want = (plan.reserve, plan.commit, after.checksum_computed)
    if got != want:
        raise _fail(
            label,
            f"verification failed: the edited file reads reserve/commit/checksum {got}, "
            f"expected {want}; the original is unchanged",
        )
    if plan.signature_removed and after.signed:
        raise _fail(
            label, "verification failed: the certificate directory is still set; the original is unchanged"
        )
    return want[2]


def _unchanged(plan: StackPlan) -> StackEdit:
    before = plan.before
    return StackEdit(
        file=before.path,
        reserve_before=before.stack_reserve,
        reserve_after=before.stack_reserve,
        commit_before=before.stack_commit,
        commit_after=before.stack_commit,
        checksum_before=before.checksum,
        checksum_after=before.checksum,
        changed=False,
    )


def _distinct(plans: Sequence[StackPlan], names: Sequence[str]) -> dict[Path, tuple[StackPlan, str]]:
    """Each file once (a file named twice, or through a link, is edited once), in order."""
    out: dict[Path, tuple[StackPlan, str]] = {}
    for plan, label in zip(plans, names):
        out.setdefault(plan.path, (plan, label))
    return out


def apply_stack_edits(plans: Sequence[StackPlan], *, labels: Sequence[str] | None = None) -> list[StackEdit]:
    """Write planned edits, all or nothing (:func:`patchkit.core.fs.atomic_write_many`):
    every file's new bytes are staged beside it and verified (read back) first; only then are
    they renamed into place, and if one rename fails the files already renamed get their
    originals back. A file named twice is edited once.
    """
    names = list(labels) if labels is not None else [str(p.before.path) for p in plans]
    todo = _distinct(plans, names)
    checksums: dict[Path, int] = {}

    def verify(target: Path, tmp: Path) -> None:
        plan, label = todo[target]
        checksums[target] = _verify(plan, tmp, label)

    writes = {path: plan.new_data for path, (plan, _) in todo.items() if plan.new_data is not None}
    try:
        atomic_write_many(writes, check=verify)
    except BatchWriteError as e:
        what = "no file was changed" if len(todo) > 1 else "the original is unchanged"
        label = todo[e.target][1] if e.target in todo else ""
        raise _fail(label, f"cannot write the edited file: {e.strerror or e}; {what}") from None
    edits: list[StackEdit] = []
    for plan, label in todo.values():
        if plan.path not in checksums:
            edits.append(_unchanged(plan))
            continue
        checksum = checksums[plan.path]
        after = _info(plan.before.path, _read(plan.path))
        if (after.stack_reserve, after.stack_commit, after.checksum) != (plan.reserve, plan.commit, checksum):
            raise _fail(label, "the file changed on disk right after the edit (another writer?)")
        before = plan.before
        edits.append(
            StackEdit(
                file=before.path,
                reserve_before=before.stack_reserve,
                reserve_after=plan.reserve,
                commit_before=before.stack_commit,
                commit_after=plan.commit,
                checksum_before=before.checksum,
                checksum_after=checksum,
                changed=True,
                signature_removed=plan.signature_removed,
            )
        )
    return edits


def apply_stack_edit(plan: StackPlan, *, label: str | None = None) -> StackEdit:
    """Write one planned edit: temp file, verify, rename over the original."""
    (edit,) = apply_stack_edits([plan], labels=[label or str(plan.before.path)])
    return edit


def set_stack_reserve(
    path: Path | str,
    reserve: int | str,
    commit: int | str | None = None,
    *,
    allow_dll: bool = False,
    allow_unsign: bool = False,
) -> StackEdit:
    """Set the stack reserve (and optionally commit) of one PE file, atomically and verified.

    ``reserve``/``commit`` are bytes or size strings (``"256MiB"``). Idempotent: a file
    that already has the values is not rewritten (``changed=False``). Raises PEError.
    """
    plan = plan_stack_edit(path, reserve, commit, allow_dll=allow_dll, allow_unsign=allow_unsign)
    return apply_stack_edit(plan, label=str(path))
