"""patchkit.build.pe and `patchkit pe-stack` / `pe-info`.

Unit tests work on PE images built byte by byte here (no process, no binary in the
repo). Integration tests compile tests/fixtures/pe_progs/*.c with mingw-w64, check the edit
with objdump (an independent reader) and run a deep recursion under wine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pefile
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchkit.build import pe as pemod
from patchkit.build.pe import (
    pe_checksum,
    pe_info,
    plan_stack_edit,
    set_stack_reserve,
)
from patchkit.cli import main
from patchkit.core.errors import PEError
from patchkit.model.units import PAGE_SIZE, format_size, parse_size
from tests.fixtures.paths import PE_PROGS

MIB = 1 << 20
PROGS = PE_PROGS
POSIX = os.name == "posix"


# ---------------------------------------------------------------- synthetic PE images

def ref_checksum(data: bytes) -> int:
    """The PE checksum written independently of patchkit (dword sum, as imagehlp does)."""
    e_lfanew = struct.unpack_from("<I", data, 0x3C)[0]
    skip = (e_lfanew + 4 + 20 + 64) // 4
    padded = data + b"\0" * (-len(data) % 4)
    total = 0
    for i in range(len(padded) // 4):
        if i == skip:
            continue
        total += struct.unpack_from("<I", padded, 4 * i)[0]
        total = (total & 0xFFFFFFFF) + (total >> 32)
    total = (total & 0xFFFF) + (total >> 16)
    total = (total + (total >> 16)) & 0xFFFF
    return total + len(data)


def synth_pe(*, plus: bool = True, dll: bool = False, reserve: int = 2 * MIB,
             commit: int = PAGE_SIZE) -> bytes:
    """A small, valid PE image: DOS header, PE header, one .text section."""
    dos = bytearray(0x80)
    dos[0:2] = b"MZ"
    struct.pack_into("<I", dos, 0x3C, 0x80)
    opt_size = 240 if plus else 224
    chars = 0x0022 | (0x2000 if dll else 0) | (0 if plus else 0x0100)
    coff = struct.pack("<HHIIIHH", 0x8664 if plus else 0x14C, 1, 0, 0, 0, opt_size, chars)
    if plus:
        opt = struct.pack("<HBBIIIIIQIIHHHHHHIIIIHHQQQQII", 0x20B, 2, 40, 0x200, 0, 0, 0x1000,
                          0x1000, 0x140000000, 0x1000, 0x200, 6, 0, 0, 0, 6, 0, 0, 0x2000, 0x200,
                          0, 3, 0x160, reserve, commit, MIB, PAGE_SIZE, 0, 16)
    else:
        opt = struct.pack("<HBBIIIIIIIIIHHHHHHIIIIHHIIIIII", 0x10B, 2, 40, 0x200, 0, 0, 0x1000,
                          0x1000, 0x2000, 0x400000, 0x1000, 0x200, 4, 0, 0, 0, 4, 0, 0, 0x2000,
                          0x200, 0, 3, 0x140, reserve, commit, MIB, PAGE_SIZE, 0, 16)
    opt += b"\0" * (16 * 8)
    assert len(opt) == opt_size
    section = struct.pack("<8sIIIIIIHHI", b".text", 0x10, 0x1000, 0x200, 0x200, 0, 0, 0, 0,
                          0x60000020)
    head = bytes(dos) + b"PE\0\0" + coff + opt + section
    data = bytearray(head + b"\0" * (0x200 - len(head)) + b"\xc3" + b"\0" * 0x1FF)
    struct.pack_into("<I", data, 0x80 + 24 + 64, ref_checksum(bytes(data)))
    return bytes(data)


def add_fake_signature(data: bytes, body: bytes = b"\x30\x82fake-pkcs7-blob!") -> bytes:
    """Append a WIN_CERTIFICATE (8-byte aligned, at the end) and point the security dir at it."""
    out = bytearray(data + b"\0" * (-len(data) % 8))
    offset = len(out)
    cert = struct.pack("<IHH", 8 + len(body), 0x0200, 0x0002) + body
    cert += b"\0" * (-len(cert) % 8)
    out += cert
    e_lfanew = struct.unpack_from("<I", out, 0x3C)[0]
    magic = struct.unpack_from("<H", out, e_lfanew + 24)[0]
    dirs = e_lfanew + 24 + (112 if magic == 0x20B else 96)
    struct.pack_into("<II", out, dirs + 8 * 4, offset, len(cert))
    return bytes(out)


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".pk-tmp"))


# ---------------------------------------------------------------- sizes

@pytest.mark.parametrize(("text", "value"), [
    ("268435456", 268435456), ("0x10000000", 268435456), ("0X1000", 4096),
    ("256MiB", 256 * MIB), ("256 MiB", 256 * MIB), ("256mib", 256 * MIB), ("4KiB", 4096),
    ("1GiB", 1 << 30), ("4096B", 4096), (" 8 MiB ", 8 * MIB), (4096, 4096),
])
def test_parse_size_accepts(text: str | int, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize(("text", "needle"), [
    ("256MB", "ambiguous"), ("256M", "ambiguous"), ("1GB", "write 1GiB"), ("4kb", "ambiguous"),
    ("256 parsecs", "unknown unit"), ("", "not a size"), ("1.5GiB", "not a size"),
    ("-4096", "not a size"), ("MiB", "not a size"), ("0xZZ", "unknown unit"),
])
def test_parse_size_refuses(text: str, needle: str) -> None:
    with pytest.raises(PEError, match=needle):
        parse_size(text)


def test_parse_size_refuses_bool_and_negative() -> None:
    with pytest.raises(PEError):
        parse_size(True)  # type: ignore[arg-type]
    with pytest.raises(PEError, match="negative"):
        parse_size(-1)


def test_format_size() -> None:
    assert format_size(256 * MIB) == "256 MiB"
    assert format_size(PAGE_SIZE) == "4 KiB"
    assert format_size(1 << 30) == "1 GiB"
    assert format_size(3 * 512) == "1536 B"


# ---------------------------------------------------------------- reading

@pytest.mark.parametrize("length_delta", [0, 1, 2, 3])
def test_checksum_matches_reference_and_pefile(length_delta: int) -> None:
    data = synth_pe() + b"\x5a\xa5\xff"[:length_delta]
    off = 0x80 + 24 + 64
    pe = pefile.PE(data=data, fast_load=True)
    assert pe_checksum(data, off) == ref_checksum(data) == pe.generate_checksum()


@pytest.mark.parametrize("plus", [True, False])
def test_pe_info_reads_synthetic(tmp_path: Path, plus: bool) -> None:
    info = pe_info(write(tmp_path, "a.exe", synth_pe(plus=plus, reserve=3 * MIB)))
    assert info.format == ("PE32+" if plus else "PE32")
    assert info.machine == ("x86_64" if plus else "i386")
    assert info.subsystem == "console"
    assert (info.stack_reserve, info.stack_commit) == (3 * MIB, PAGE_SIZE)
    assert info.checksum_ok and not info.signed and not info.is_dll
    assert info.to_json()["checksum_ok"] is True


def test_pe_info_sees_dll_and_signature(tmp_path: Path) -> None:
    info = pe_info(write(tmp_path, "s.dll", add_fake_signature(synth_pe(dll=True))))
    assert info.is_dll and info.signed
    assert info.certificate_offset == 0x400 and info.certificate_size == 32


# ---------------------------------------------------------------- editing

@pytest.mark.parametrize("plus", [True, False])
def test_set_stack_reserve_edits_and_checksums(tmp_path: Path, plus: bool) -> None:
    original = synth_pe(plus=plus)
    exe = write(tmp_path, "a.exe", original)
    edit = set_stack_reserve(exe, "256MiB")
    assert edit.changed and not edit.signature_removed
    assert (edit.reserve_before, edit.reserve_after) == (2 * MIB, 256 * MIB)
    assert edit.commit_before == edit.commit_after == PAGE_SIZE
    data = exe.read_bytes()
    assert len(data) == len(original)
    pe = pefile.PE(data=data, fast_load=True)
    assert pe.OPTIONAL_HEADER.SizeOfStackReserve == 256 * MIB
    assert pe.OPTIONAL_HEADER.SizeOfStackCommit == PAGE_SIZE
    assert pe.OPTIONAL_HEADER.CheckSum == edit.checksum_after == ref_checksum(data)
    assert edit.checksum_after != edit.checksum_before
    # only the reserve and checksum bytes changed
    diff = [i for i, (a, b) in enumerate(zip(original, data)) if a != b]
    opt = 0x80 + 24
    assert set(diff) <= set(range(opt + 64, opt + 68)) | set(range(opt + 72, opt + 80))
    assert leftovers(tmp_path) == []
    assert "2 MiB -> 256 MiB" in edit.describe()


def test_second_run_does_not_rewrite(tmp_path: Path) -> None:
    exe = write(tmp_path, "a.exe", synth_pe())
    set_stack_reserve(exe, 256 * MIB)
    before = exe.stat()
    os.utime(exe, ns=(before.st_atime_ns, before.st_mtime_ns - 10**9))
    before = exe.stat()
    again = set_stack_reserve(exe, "0x10000000")
    after = exe.stat()
    assert not again.changed
    assert "already 256 MiB" in again.describe()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


@pytest.mark.skipif(not POSIX, reason="POSIX permission bits")
def test_permissions_kept(tmp_path: Path) -> None:
    exe = write(tmp_path, "a.exe", synth_pe())
    exe.chmod(0o751)
    set_stack_reserve(exe, "256MiB")
    assert exe.stat().st_mode & 0o7777 == 0o751


@pytest.mark.skipif(not POSIX, reason="symlinks")
def test_symlink_target_is_edited(tmp_path: Path) -> None:
    real = write(tmp_path, "real.exe", synth_pe())
    link = tmp_path / "link.exe"
    link.symlink_to(real)
    set_stack_reserve(link, "256MiB")
    assert link.is_symlink()
    assert pe_info(real).stack_reserve == 256 * MIB


def test_commit_is_kept_lowered_or_set(tmp_path: Path) -> None:
    exe = write(tmp_path, "a.exe", synth_pe(reserve=8 * MIB, commit=2 * MIB))
    assert set_stack_reserve(exe, "16MiB").commit_after == 2 * MIB
    assert set_stack_reserve(exe, "1MiB").commit_after == 1 * MIB  # commit stays <= reserve
    edit = set_stack_reserve(exe, "256MiB", "64KiB")
    assert (edit.reserve_after, edit.commit_after) == (256 * MIB, 64 * 1024)
    info = pe_info(exe)
    assert (info.stack_reserve, info.stack_commit, info.checksum_ok) == (256 * MIB, 65536, True)


def test_plan_writes_nothing(tmp_path: Path) -> None:
    exe = write(tmp_path, "a.exe", synth_pe())
    before = exe.stat()
    plan = plan_stack_edit(exe, "256MiB")
    assert plan.new_data is not None and plan.reserve == 256 * MIB
    assert exe.read_bytes() == synth_pe() and exe.stat().st_mtime_ns == before.st_mtime_ns
    assert leftovers(tmp_path) == []
    set_stack_reserve(exe, "256MiB")
    assert plan_stack_edit(exe, "256MiB").new_data is None


def test_pe32_plus_holds_more_than_4gib(tmp_path: Path) -> None:
    exe = write(tmp_path, "a.exe", synth_pe(plus=True))
    assert set_stack_reserve(exe, "8GiB").reserve_after == 8 << 30
    assert pe_info(exe).stack_reserve == 8 << 30


# ---------------------------------------------------------------- refusals

def _assert_refused(path: Path, needle: str, *args: object, **kwargs: object) -> None:
    before = path.read_bytes()
    with pytest.raises(PEError, match=needle) as exc:
        set_stack_reserve(path, *args, **kwargs)  # type: ignore[arg-type]
    assert "\n" not in exc.value.message
    assert path.read_bytes() == before
    assert leftovers(path.parent) == []


def test_refuses_not_pe(tmp_path: Path) -> None:
    _assert_refused(write(tmp_path, "a.txt", b"hello, not a program\n" * 10), "not a PE", "256MiB")
    dos = bytearray(0x100)
    dos[:2] = b"MZ"
    struct.pack_into("<I", dos, 0x3C, 0x40)
    _assert_refused(write(tmp_path, "dos.exe", bytes(dos)), "no PE signature|without a PE",
                    "256MiB")
    _assert_refused(write(tmp_path, "empty.exe", b""), "not a PE", "256MiB")


def test_refuses_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(PEError, match="no such file"):
        set_stack_reserve(tmp_path / "nope.exe", "256MiB")
    with pytest.raises(PEError, match="directory"):
        pe_info(tmp_path)


@pytest.mark.parametrize("cut", [0x90, 0x130, 0x1B0, 0x300])
def test_refuses_truncated(tmp_path: Path, cut: int) -> None:
    _assert_refused(write(tmp_path, "t.exe", synth_pe()[:cut]), "truncated", "256MiB")


def test_refuses_corrupt_magic(tmp_path: Path) -> None:
    data = bytearray(synth_pe())
    struct.pack_into("<H", data, 0x80 + 24, 0x1234)
    _assert_refused(write(tmp_path, "m.exe", bytes(data)), "corrupt", "256MiB")


def test_refuses_dll_unless_allowed(tmp_path: Path) -> None:
    dll = write(tmp_path, "a.dll", synth_pe(dll=True))
    _assert_refused(dll, "is a DLL.*--allow-dll", "256MiB")
    assert set_stack_reserve(dll, "256MiB", allow_dll=True).changed
    assert pe_info(dll).stack_reserve == 256 * MIB


@pytest.mark.parametrize(("reserve", "commit", "needle"), [
    ("1000000", None, "not a multiple of the page size"),
    ("256MiB", "1000", "commit 1000 .* not a multiple"),
    ("0", None, "must be positive"),
    ("256MiB", "512MiB", "commit 512 MiB is larger than the reserve 256 MiB"),
])
def test_refuses_bad_sizes(tmp_path: Path, reserve: str, commit: str | None, needle: str) -> None:
    _assert_refused(write(tmp_path, "a.exe", synth_pe()), needle, reserve, commit)


def test_refuses_too_large_for_pe32(tmp_path: Path) -> None:
    exe = write(tmp_path, "a.exe", synth_pe(plus=False))
    _assert_refused(exe, "does not fit the PE32 32-bit field", "4GiB")
    assert set_stack_reserve(exe, (1 << 32) - PAGE_SIZE).reserve_after == 0xFFFFF000


def test_refuses_too_large_for_pe32_plus(tmp_path: Path) -> None:
    _assert_refused(write(tmp_path, "a.exe", synth_pe()), "PE32\\+ 64-bit field", 1 << 64)


def test_refuses_signed_unless_allowed_then_drops_the_certificate(tmp_path: Path) -> None:
    plain = synth_pe()
    signed = write(tmp_path, "s.exe", add_fake_signature(plain))
    _assert_refused(signed, "Authenticode-signed.*invalidates the signature.*--allow-unsign",
                    "256MiB")
    edit = set_stack_reserve(signed, "256MiB", allow_unsign=True)
    assert edit.changed and edit.signature_removed
    assert "signature removed" in edit.describe()
    data = signed.read_bytes()
    assert len(data) == len(plain)  # the certificate bytes are gone
    info = pe_info(signed)
    assert not info.signed and info.checksum_ok and info.stack_reserve == 256 * MIB
    pe = pefile.PE(data=data, fast_load=True)
    assert pe.OPTIONAL_HEADER.DATA_DIRECTORY[4].VirtualAddress == 0
    assert pe.OPTIONAL_HEADER.DATA_DIRECTORY[4].Size == 0


def test_signed_file_already_at_size_is_left_signed(tmp_path: Path) -> None:
    signed = write(tmp_path, "s.exe", add_fake_signature(synth_pe(reserve=256 * MIB)))
    assert not set_stack_reserve(signed, "256MiB").changed
    assert pe_info(signed).signed


def test_refuses_certificate_not_at_the_end(tmp_path: Path) -> None:
    exe = write(tmp_path, "s.exe", add_fake_signature(synth_pe()) + b"overlay after the cert")
    _assert_refused(exe, "not at the end", "256MiB", allow_unsign=True)


def test_refuses_certificate_past_the_end(tmp_path: Path) -> None:
    data = bytearray(add_fake_signature(synth_pe()))
    struct.pack_into("<I", data, 0x80 + 24 + 112 + 8 * 4 + 4, 4096)
    _assert_refused(write(tmp_path, "s.exe", bytes(data)), "corrupt certificate table", "256MiB")


# ---------------------------------------------------------------- atomicity

def test_failed_rename_leaves_original_and_no_temp(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    exe = write(tmp_path, "a.exe", synth_pe())
    original = exe.read_bytes()

    def boom(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pemod.os, "replace", boom)
    with pytest.raises(PEError, match="No space left.*original is unchanged"):
        set_stack_reserve(exe, "256MiB")
    assert exe.read_bytes() == original
    assert leftovers(tmp_path) == []


def test_crash_mid_write_leaves_original_and_no_temp(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A short write (disk full, crash) is caught by the verification before the rename."""
    exe = write(tmp_path, "a.exe", synth_pe())
    original = exe.read_bytes()
    real_fsync = os.fsync

    def short_write(fd: int) -> None:
        os.ftruncate(fd, 300)  # the temp file now holds only part of the image
        real_fsync(fd)

    monkeypatch.setattr(pemod.os, "fsync", short_write)
    with pytest.raises(PEError, match="verification failed.*original is unchanged"):
        set_stack_reserve(exe, "256MiB")
    assert exe.read_bytes() == original
    assert leftovers(tmp_path) == []


def test_interrupt_mid_write_leaves_original(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    exe = write(tmp_path, "a.exe", synth_pe())
    original = exe.read_bytes()

    def interrupted(*args: object, **kwargs: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(pemod, "_verify", interrupted)
    with pytest.raises(KeyboardInterrupt):
        set_stack_reserve(exe, "256MiB")
    assert exe.read_bytes() == original
    assert leftovers(tmp_path) == []


# ---------------------------------------------------------------- property: header mutations

def check_mutated_edit(data: bytes, folder: Path, allow_dll: bool, allow_unsign: bool) -> None:
    """The editor raises only PEError and leaves the file unchanged or verified-correct."""
    path = folder / "m.exe"
    path.write_bytes(data)
    try:
        edit = set_stack_reserve(path, "256MiB", allow_dll=allow_dll, allow_unsign=allow_unsign)
    except PEError as e:
        assert "\n" not in e.message
        assert path.read_bytes() == data
    else:
        out = path.read_bytes()
        if not edit.changed:
            assert out == data
        info = pe_info(path)
        assert info.stack_reserve == 256 * MIB
        if edit.changed:
            assert info.checksum_ok
            pe = pefile.PE(data=out, fast_load=True)
            assert pe.OPTIONAL_HEADER.SizeOfStackReserve == 256 * MIB
            assert pe.OPTIONAL_HEADER.CheckSum == ref_checksum(out)
    assert leftovers(folder) == []


def _mutations(size: int) -> st.SearchStrategy[list[tuple[int, int]]]:
    return st.lists(st.tuples(st.integers(0, size - 1), st.integers(0, 255)),
                    min_size=1, max_size=8)


def _apply(data: bytes, mutations: list[tuple[int, int]], cut: int | None) -> bytes:
    out = bytearray(data)
    for off, value in mutations:
        out[off] = value
    return bytes(out[:cut] if cut is not None else out)


_SYNTH = synth_pe()


@settings(max_examples=300, deadline=None)
@given(mutations=_mutations(0x200), cut=st.none() | st.integers(0, len(_SYNTH)),
       allow_dll=st.booleans(), allow_unsign=st.booleans())
def test_property_mutated_synthetic_headers(mutations: list[tuple[int, int]], cut: int | None,
                                            allow_dll: bool, allow_unsign: bool) -> None:
    with tempfile.TemporaryDirectory() as d:
        check_mutated_edit(_apply(_SYNTH, mutations, cut), Path(d), allow_dll, allow_unsign)


# ---------------------------------------------------------------- CLI

def run_cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    return result.exit_code, result.stdout, result.stderr


def test_cli_pe_stack_and_pe_info(tmp_path: Path) -> None:
    exe = write(tmp_path, "a.exe", synth_pe())
    code, out, err = run_cli("pe-stack", str(exe), "--reserve", "256MiB")
    assert code == 0, err
    assert "a.exe: stack reserve 2 MiB -> 256 MiB (commit 4 KiB); checksum" in err
    code, out, err = run_cli("pe-stack", str(exe), "--reserve", "256MiB")
    assert code == 0 and "a.exe: already 256 MiB (commit 4 KiB); not rewritten" in err
    code, out, err = run_cli("pe-info", str(exe))
    assert code == 0
    assert re.search(r"PE32\+ x86_64 console exe, stack reserve 256 MiB commit 4 KiB, "
                     r"checksum 0x[0-9a-f]{8} \(valid\), not signed", err)
    code, out, err = run_cli("pe-info", "--json", str(exe))
    assert code == 0
    (info,) = json.loads(out)
    assert info["stack_reserve"] == 256 * MIB and info["checksum_ok"] and not info["signed"]


def test_cli_pe_stack_json(tmp_path: Path) -> None:
    exe = write(tmp_path, "a.exe", synth_pe())
    code, out, _ = run_cli("pe-stack", "--json", str(exe), "--reserve", "0x10000000",
                           "--commit", "64KiB")
    assert code == 0
    (edit,) = json.loads(out)
    assert edit["changed"] and edit["reserve_after"] == 256 * MIB and edit["commit_after"] == 65536


@pytest.mark.parametrize(("data", "args", "needle"), [
    (b"not a PE at all", (), "not a PE file"),
    (synth_pe(dll=True), (), "is a DLL"),
    (add_fake_signature(synth_pe()), (), "Authenticode-signed"),
    (synth_pe(), ("--commit", "512MiB"), "larger than the reserve"),
    (synth_pe()[:0x150], (), "truncated"),
])
def test_cli_refusals_are_one_line_exit_10(tmp_path: Path, data: bytes, args: tuple[str, ...],
                                           needle: str) -> None:
    exe = write(tmp_path, "x.exe", data)
    code, _, err = run_cli("pe-stack", str(exe), "--reserve", "256MiB", *args)
    assert code == PEError.exit_code
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]
    assert exe.read_bytes() == data


def test_cli_bad_size_is_a_usage_error(tmp_path: Path) -> None:
    exe = write(tmp_path, "a.exe", synth_pe())
    code, _, err = run_cli("pe-stack", str(exe), "--reserve", "256MB")
    assert code == 2 and "ambiguous" in err and "256MiB" in err


def test_cli_checks_every_file_before_writing_any(tmp_path: Path) -> None:
    good = write(tmp_path, "good.exe", synth_pe())
    bad = write(tmp_path, "bad.dll", synth_pe(dll=True))
    code, _, err = run_cli("pe-stack", str(good), str(bad), "--reserve", "256MiB")
    assert code == PEError.exit_code and "bad.dll" in err
    assert good.read_bytes() == synth_pe()  # untouched: the plan failed before any write


def test_cli_allow_unsign_warns(tmp_path: Path) -> None:
    exe = write(tmp_path, "s.exe", add_fake_signature(synth_pe()))
    code, _, err = run_cli("pe-stack", str(exe), "--reserve", "256MiB", "--allow-unsign")
    assert code == 0
    assert "removing its Authenticode signature" in err and "signature removed" in err
    assert not pe_info(exe).signed


def test_cli_pe_info_missing_file(tmp_path: Path) -> None:
    code, _, err = run_cli("pe-info", str(tmp_path / "missing.exe"))
    assert code == PEError.exit_code and "no such file" in err


# ---------------------------------------------------------------- real mingw-w64 programs

MINGW_CC = "x86_64-w64-mingw32-gcc-posix"
OBJDUMP = "x86_64-w64-mingw32-objdump"
WINE = "/usr/lib/wine/wine64"


@pytest.fixture(scope="module")
def mingw(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """hello.exe, deep.exe and lib.dll compiled from tests/fixtures/pe_progs (once per module)."""
    if not shutil.which(MINGW_CC):
        pytest.skip(f"{MINGW_CC} not installed (apt install gcc-mingw-w64-x86-64-posix)")
    out = tmp_path_factory.mktemp("mingw")
    builds = {
        "hello.exe": ["-O2", str(PROGS / "hello.c")],
        "deep.exe": ["-O2", "-fno-optimize-sibling-calls", str(PROGS / "deep.c")],
        "lib.dll": ["-O2", "-shared", str(PROGS / "lib.c")],
    }
    for name, args in builds.items():
        subprocess.run([MINGW_CC, *args, "-o", str(out / name)], check=True,
                       capture_output=True, timeout=120)
    return {name: out / name for name in builds}


def objdump_fields(path: Path) -> dict[str, str]:
    if not shutil.which(OBJDUMP):
        pytest.skip(f"{OBJDUMP} not installed (apt install binutils-mingw-w64-x86-64)")
    text = subprocess.run([OBJDUMP, "-p", str(path)], check=True, capture_output=True,
                          text=True, timeout=60).stdout
    fields = {}
    for line in text.splitlines():
        m = re.match(r"^(SizeOfStackReserve|SizeOfStackCommit|CheckSum|Magic)\s+(\S+)", line)
        if m:
            fields[m.group(1)] = m.group(2)
        m = re.match(r"^Entry 4 ([0-9a-f]+) ([0-9a-f]+) Security Directory", line)
        if m:
            fields["Security"] = f"{int(m.group(1), 16):x} {int(m.group(2), 16):x}"
    return fields


def copy(src: Path, folder: Path, name: str | None = None) -> Path:
    dst = folder / (name or src.name)
    shutil.copyfile(src, dst)
    return dst


@pytest.mark.integration
def test_real_exe_edit_checked_by_objdump(mingw: dict[str, Path], tmp_path: Path) -> None:
    exe = copy(mingw["hello.exe"], tmp_path)
    before = objdump_fields(exe)
    assert before["Magic"] == "020b"
    assert before["SizeOfStackReserve"] == "0000000000200000"  # mingw's 2 MiB default
    info = pe_info(exe)
    assert (info.format, info.machine, info.subsystem, info.is_dll) == (
        "PE32+", "x86_64", "console", False)
    edit = set_stack_reserve(exe, "256MiB")
    assert edit.changed and edit.reserve_before == 2 * MIB
    after = objdump_fields(exe)
    assert after["SizeOfStackReserve"] == "0000000010000000"
    assert after["SizeOfStackCommit"] == before["SizeOfStackCommit"]
    data = exe.read_bytes()
    pe = pefile.PE(data=data, fast_load=True)
    assert int(after["CheckSum"], 16) == edit.checksum_after == pe.generate_checksum()
    assert edit.checksum_after == ref_checksum(data)


@pytest.mark.integration
def test_real_exe_idempotent_and_permissions(mingw: dict[str, Path], tmp_path: Path) -> None:
    exe = copy(mingw["hello.exe"], tmp_path)
    if POSIX:
        exe.chmod(0o750)
    set_stack_reserve(exe, "256MiB")
    st1 = exe.stat()
    assert not set_stack_reserve(exe, "256MiB").changed
    st2 = exe.stat()
    assert (st1.st_ino, st1.st_mtime_ns, st1.st_size) == (st2.st_ino, st2.st_mtime_ns, st2.st_size)
    if POSIX:
        assert st2.st_mode & 0o777 == 0o750


@pytest.mark.integration
def test_real_dll_refused_unless_allowed(mingw: dict[str, Path], tmp_path: Path) -> None:
    dll = copy(mingw["lib.dll"], tmp_path)
    assert pe_info(dll).is_dll
    _assert_refused(dll, "is a DLL", "256MiB")
    set_stack_reserve(dll, "256MiB", allow_dll=True)
    assert objdump_fields(dll)["SizeOfStackReserve"] == "0000000010000000"


@pytest.mark.integration
def test_real_exe_refusals(mingw: dict[str, Path], tmp_path: Path) -> None:
    data = mingw["hello.exe"].read_bytes()
    _assert_refused(write(tmp_path, "cut.exe", data[: len(data) // 2]), "truncated", "256MiB")
    exe = copy(mingw["hello.exe"], tmp_path)
    _assert_refused(exe, "not a multiple of the page size", "256MiB", "100")
    _assert_refused(exe, "larger than the reserve", "1MiB", "2MiB")


@pytest.mark.integration
def test_real_signed_exe(mingw: dict[str, Path], tmp_path: Path) -> None:
    plain = mingw["hello.exe"].read_bytes()
    exe = write(tmp_path, "signed.exe", add_fake_signature(plain))
    assert objdump_fields(exe)["Security"] == f"{len(plain) + (-len(plain) % 8):x} 20"
    _assert_refused(exe, "Authenticode-signed", "256MiB")
    edit = set_stack_reserve(exe, "256MiB", allow_unsign=True)
    assert edit.signature_removed
    fields = objdump_fields(exe)
    assert fields["Security"] == "0 0"
    assert fields["SizeOfStackReserve"] == "0000000010000000"
    assert exe.stat().st_size == len(plain + b"\0" * (-len(plain) % 8))
    assert int(fields["CheckSum"], 16) == ref_checksum(exe.read_bytes())


@pytest.mark.integration
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), allow_dll=st.booleans(), allow_unsign=st.booleans())
def test_property_mutated_real_headers(mingw: dict[str, Path], data: st.DataObject,
                                       allow_dll: bool, allow_unsign: bool) -> None:
    exe = mingw["hello.exe"].read_bytes()
    mutations = data.draw(_mutations(0x400), label="mutations")
    cut = data.draw(st.none() | st.integers(0, len(exe)), label="cut")
    with tempfile.TemporaryDirectory() as d:
        check_mutated_edit(_apply(exe, mutations, cut), Path(d), allow_dll, allow_unsign)


def _wine(exe: Path, prefix: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, WINEPREFIX=str(prefix), WINEDEBUG="-all",
               WINEDLLOVERRIDES="mscoree,mshtml=")
    return subprocess.run([WINE, str(exe)], capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.integration
@pytest.mark.skipif(sys.platform != "linux", reason="wine runs on Linux here")
def test_deep_recursion_needs_the_stack_edit(mingw: dict[str, Path], tmp_path: Path) -> None:
    if not os.access(WINE, os.X_OK):
        pytest.skip(f"{WINE} missing (apt install wine64)")
    prefix = tmp_path / "wineprefix"
    prefix.mkdir()
    exe = copy(mingw["deep.exe"], tmp_path)
    crashed = _wine(exe, prefix)
    assert crashed.returncode != 0, crashed.stdout
    assert "deep ok" not in crashed.stdout
    set_stack_reserve(exe, "256MiB")
    ok = _wine(exe, prefix)
    assert ok.returncode == 0, ok.stderr
    assert "deep ok depth=8192" in ok.stdout
