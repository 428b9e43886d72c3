"""patchkit.binary.pe_stack on real programs: tests/fixtures/pe_progs/*.c compiled with mingw-w64,
the edit checked with objdump (an independent reader), a deep recursion run under wine."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pefile
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchkit.binary.pe_stack import (
    pe_info,
    set_stack_reserve,
)
from tests.fixtures.paths import PE_PROGS
from tests.fixtures.pe import (
    MIB,
    POSIX,
    add_fake_signature,
    apply_mutations,
    assert_refused,
    check_mutated_edit,
    mutation_lists,
    ref_checksum,
    write,
)

PROGS = PE_PROGS


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
        subprocess.run([MINGW_CC, *args, "-o", str(out / name)], check=True, capture_output=True, timeout=120)
    return {name: out / name for name in builds}


def objdump_fields(path: Path) -> dict[str, str]:
    if not shutil.which(OBJDUMP):
        pytest.skip(f"{OBJDUMP} not installed (apt install binutils-mingw-w64-x86-64)")
    text = subprocess.run(
        [OBJDUMP, "-p", str(path)], check=True, capture_output=True, text=True, timeout=60
    ).stdout
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


def test_real_exe_edit_checked_by_objdump(mingw: dict[str, Path], tmp_path: Path) -> None:
    exe = copy(mingw["hello.exe"], tmp_path)
    before = objdump_fields(exe)
    assert before["Magic"] == "020b"
    assert before["SizeOfStackReserve"] == "0000000000200000"  # mingw's 2 MiB default
    info = pe_info(exe)
    assert (info.format, info.machine, info.subsystem, info.is_dll) == ("PE32+", "x86_64", "console", False)
    edit = set_stack_reserve(exe, "256MiB")
    assert edit.changed and edit.reserve_before == 2 * MIB
    after = objdump_fields(exe)
    assert after["SizeOfStackReserve"] == "0000000010000000"
    assert after["SizeOfStackCommit"] == before["SizeOfStackCommit"]
    data = exe.read_bytes()
    pe = pefile.PE(data=data, fast_load=True)
    assert int(after["CheckSum"], 16) == edit.checksum_after == pe.generate_checksum()
    assert edit.checksum_after == ref_checksum(data)


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


def test_real_dll_refused_unless_allowed(mingw: dict[str, Path], tmp_path: Path) -> None:
    dll = copy(mingw["lib.dll"], tmp_path)
    assert pe_info(dll).is_dll
    assert_refused(dll, "is a DLL", "256MiB")
    set_stack_reserve(dll, "256MiB", allow_dll=True)
    assert objdump_fields(dll)["SizeOfStackReserve"] == "0000000010000000"


def test_real_exe_refusals(mingw: dict[str, Path], tmp_path: Path) -> None:
    data = mingw["hello.exe"].read_bytes()
    assert_refused(write(tmp_path, "cut.exe", data[: len(data) // 2]), "truncated", "256MiB")
    exe = copy(mingw["hello.exe"], tmp_path)
    assert_refused(exe, "not a multiple of the page size", "256MiB", "100")
    assert_refused(exe, "larger than the reserve", "1MiB", "2MiB")


def test_real_signed_exe(mingw: dict[str, Path], tmp_path: Path) -> None:
    plain = mingw["hello.exe"].read_bytes()
    exe = write(tmp_path, "signed.exe", add_fake_signature(plain))
    assert objdump_fields(exe)["Security"] == f"{len(plain) + (-len(plain) % 8):x} 20"
    assert_refused(exe, "Authenticode-signed", "256MiB")
    edit = set_stack_reserve(exe, "256MiB", allow_unsign=True)
    assert edit.signature_removed
    fields = objdump_fields(exe)
    assert fields["Security"] == "0 0"
    assert fields["SizeOfStackReserve"] == "0000000010000000"
    assert exe.stat().st_size == len(plain + b"\0" * (-len(plain) % 8))
    assert int(fields["CheckSum"], 16) == ref_checksum(exe.read_bytes())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), allow_dll=st.booleans(), allow_unsign=st.booleans())
def test_property_mutated_real_headers(
    mingw: dict[str, Path], data: st.DataObject, allow_dll: bool, allow_unsign: bool
) -> None:
    exe = mingw["hello.exe"].read_bytes()
    mutations = data.draw(mutation_lists(0x400), label="mutations")
    cut = data.draw(st.none() | st.integers(0, len(exe)), label="cut")
    with tempfile.TemporaryDirectory() as d:
        check_mutated_edit(apply_mutations(exe, mutations, cut), Path(d), allow_dll, allow_unsign)


def _wine(exe: Path, prefix: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, WINEPREFIX=str(prefix), WINEDEBUG="-all", WINEDLLOVERRIDES="mscoree,mshtml=")
    return subprocess.run([WINE, str(exe)], capture_output=True, text=True, timeout=300, env=env)


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
