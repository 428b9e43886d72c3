"""patchkit.binary.pe_stack on PE images built byte by byte here (no process, no binary in the
repo); tests/integration/builder/test_pe.py does the same on mingw-w64 programs."""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path

import pefile
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from patchkit.binary import pe_stack as pemod
from patchkit.binary.pe_stack import (
    pe_checksum,
    pe_info,
    plan_stack_edit,
    set_stack_reserve,
)
from patchkit.core import fs as fsmod
from patchkit.core.errors import PEError
from patchkit.core.units import PAGE_SIZE
from tests.fixtures.pe import (
    MIB,
    POSIX,
    add_fake_signature,
    apply_mutations,
    assert_refused,
    check_mutated_edit,
    leftovers,
    mutation_lists,
    ref_checksum,
    synth_pe,
    write,
)

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


def test_refuses_not_pe(tmp_path: Path) -> None:
    assert_refused(write(tmp_path, "a.txt", b"hello, not a program\n" * 10), "not a PE", "256MiB")
    dos = bytearray(0x100)
    dos[:2] = b"MZ"
    struct.pack_into("<I", dos, 0x3C, 0x40)
    assert_refused(write(tmp_path, "dos.exe", bytes(dos)), "no PE signature|without a PE", "256MiB")
    assert_refused(write(tmp_path, "empty.exe", b""), "not a PE", "256MiB")


def test_refuses_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(PEError, match="no such file"):
        set_stack_reserve(tmp_path / "nope.exe", "256MiB")
    with pytest.raises(PEError, match="directory"):
        pe_info(tmp_path)


@pytest.mark.parametrize("cut", [0x90, 0x130, 0x1B0, 0x300])
def test_refuses_truncated(tmp_path: Path, cut: int) -> None:
    assert_refused(write(tmp_path, "t.exe", synth_pe()[:cut]), "truncated", "256MiB")


def test_refuses_corrupt_magic(tmp_path: Path) -> None:
    data = bytearray(synth_pe())
    struct.pack_into("<H", data, 0x80 + 24, 0x1234)
    assert_refused(write(tmp_path, "m.exe", bytes(data)), "corrupt", "256MiB")


def test_refuses_dll_unless_allowed(tmp_path: Path) -> None:
    dll = write(tmp_path, "a.dll", synth_pe(dll=True))
    assert_refused(dll, "is a DLL.*--allow-dll", "256MiB")
    assert set_stack_reserve(dll, "256MiB", allow_dll=True).changed
    assert pe_info(dll).stack_reserve == 256 * MIB


@pytest.mark.parametrize(
    ("reserve", "commit", "needle"),
    [
        ("1000000", None, "not a multiple of the page size"),
        ("256MiB", "1000", "commit 1000 .* not a multiple"),
        ("0", None, "must be positive"),
        ("256MiB", "512MiB", "commit 512 MiB is larger than the reserve 256 MiB"),
    ],
)
def test_refuses_bad_sizes(tmp_path: Path, reserve: str, commit: str | None, needle: str) -> None:
    assert_refused(write(tmp_path, "a.exe", synth_pe()), needle, reserve, commit)


def test_refuses_too_large_for_pe32(tmp_path: Path) -> None:
    exe = write(tmp_path, "a.exe", synth_pe(plus=False))
    assert_refused(exe, "does not fit the PE32 32-bit field", "4GiB")
    assert set_stack_reserve(exe, (1 << 32) - PAGE_SIZE).reserve_after == 0xFFFFF000


def test_refuses_too_large_for_pe32_plus(tmp_path: Path) -> None:
    assert_refused(write(tmp_path, "a.exe", synth_pe()), "PE32\\+ 64-bit field", 1 << 64)


def test_refuses_signed_unless_allowed_then_drops_the_certificate(tmp_path: Path) -> None:
    plain = synth_pe()
    signed = write(tmp_path, "s.exe", add_fake_signature(plain))
    assert_refused(signed, "Authenticode-signed.*invalidates the signature.*--allow-unsign", "256MiB")
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
    assert_refused(exe, "not at the end", "256MiB", allow_unsign=True)


def test_refuses_certificate_past_the_end(tmp_path: Path) -> None:
    data = bytearray(add_fake_signature(synth_pe()))
    struct.pack_into("<I", data, 0x80 + 24 + 112 + 8 * 4 + 4, 4096)
    assert_refused(write(tmp_path, "s.exe", bytes(data)), "corrupt certificate table", "256MiB")


# ---------------------------------------------------------------- atomicity


def test_failed_rename_leaves_original_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = write(tmp_path, "a.exe", synth_pe())
    original = exe.read_bytes()

    def boom(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fsmod.os, "replace", boom)
    with pytest.raises(PEError, match="No space left.*original is unchanged"):
        set_stack_reserve(exe, "256MiB")
    assert exe.read_bytes() == original
    assert leftovers(tmp_path) == []


def test_crash_mid_write_leaves_original_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A short write (disk full, crash) is caught by the verification before the rename."""
    exe = write(tmp_path, "a.exe", synth_pe())
    original = exe.read_bytes()
    real_fsync = os.fsync

    def short_write(fd: int) -> None:
        os.ftruncate(fd, 300)  # the temp file now holds only part of the image
        real_fsync(fd)

    monkeypatch.setattr(fsmod.os, "fsync", short_write)
    with pytest.raises(PEError, match="verification failed.*original is unchanged"):
        set_stack_reserve(exe, "256MiB")
    assert exe.read_bytes() == original
    assert leftovers(tmp_path) == []


def test_interrupt_mid_write_leaves_original(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = write(tmp_path, "a.exe", synth_pe())
    original = exe.read_bytes()

    def interrupted(*args: object, **kwargs: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(pemod, "_verify", interrupted)
    with pytest.raises(KeyboardInterrupt):
        set_stack_reserve(exe, "256MiB")
    assert exe.read_bytes() == original
    assert leftovers(tmp_path) == []


_SYNTH = synth_pe()


@settings(max_examples=300, deadline=None)
@given(
    mutations=mutation_lists(0x200),
    cut=st.none() | st.integers(0, len(_SYNTH)),
    allow_dll=st.booleans(),
    allow_unsign=st.booleans(),
)
def test_property_mutated_synthetic_headers(
    mutations: list[tuple[int, int]], cut: int | None, allow_dll: bool, allow_unsign: bool
) -> None:
    with tempfile.TemporaryDirectory() as d:
        check_mutated_edit(apply_mutations(_SYNTH, mutations, cut), Path(d), allow_dll, allow_unsign)
