"""pe-stack against sizes the loader cannot honour and batches that fail half-way:
exit 10 naming the limit; a batch is all or nothing."""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from patchkit.binary import pe_stack as pemod
from patchkit.binary.pe_stack import pe_info, plan_stack_edit
from patchkit.cli import main
from patchkit.core import fs as fsmod
from patchkit.core.errors import PEError
from tests.fixtures.pe import MIB, assert_refused, synth_pe, write

TIB = 1 << 40
GIB = 1 << 30


def not_large_address_aware(data: bytes) -> bytes:
    out = bytearray(data)
    coff = struct.unpack_from("<I", out, 0x3C)[0] + 4
    chars = struct.unpack_from("<H", out, coff + 18)[0] & ~0x0020
    struct.pack_into("<H", out, coff + 18, chars)
    return bytes(out)


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    assert "Traceback" not in r.output
    return r.exit_code, r.output


def test_999_tib_is_refused_with_the_limit(tmp_path: Path) -> None:
    exe = write(tmp_path, "a.exe", synth_pe())
    before = exe.read_bytes()
    code, out = run("pe-stack", str(exe), "--reserve", "999TiB")
    assert code == 10
    (line,) = [ln for ln in out.splitlines() if ln.startswith("error: ")]
    assert (
        "stack reserve 999 TiB is more than the Windows loader can honour for a PE32+ exe: "
        "at most 128 TiB (the x64 user address space)" in line
    )
    assert exe.read_bytes() == before


@pytest.mark.parametrize(
    ("plus", "laa", "ok", "too_big", "needle"),
    [
        (True, True, 128 * TIB, 128 * TIB + 4096, "at most 128 TiB"),
        (
            False,
            False,
            2 * GIB,
            2 * GIB + 4096,
            "at most 2 GiB (the user address space of a 32-bit exe without IMAGE_FILE_LARGE_ADDRESS_AWARE)",
        ),
        (False, True, 3 * GIB, 4 * GIB, "does not fit the PE32 32-bit field"),
    ],
)
def test_loader_limits_per_format(
    tmp_path: Path, plus: bool, laa: bool, ok: int, too_big: int, needle: str
) -> None:
    data = synth_pe(plus=plus)
    exe = write(tmp_path, "a.exe", data if laa else not_large_address_aware(data))
    assert pe_info(exe).large_address_aware is laa
    assert_refused(exe, re.escape(needle), too_big)
    assert_refused(exe, re.escape(needle), ok, too_big)  # the commit too
    assert pemod.set_stack_reserve(exe, ok).reserve_after == ok


@pytest.mark.parametrize("size", ["99999999999999999999TiB", "0x1" + "0" * 40, str(1 << 70), "1" * 100])
def test_absurd_sizes_are_one_line(tmp_path: Path, size: str) -> None:
    exe = write(tmp_path, "a.exe", synth_pe())
    code, out = run("pe-stack", str(exe), "--reserve", size)
    assert code == 2 and out.count("error: ") == 1


def test_a_batch_that_fails_half_way_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = [write(tmp_path, f"{n}.exe", synth_pe()) for n in ("a", "b", "c")]
    before = {f: f.read_bytes() for f in files}
    real_replace = os.replace
    calls = []

    def flaky(src: str, dst: str) -> None:
        calls.append(Path(dst).name)
        if Path(dst).name == "c.exe" and str(src).endswith(".tmp"):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(fsmod.os, "replace", flaky)
    code, out = run("pe-stack", *map(str, files), "--reserve", "256MiB")
    assert (
        code == 10
        and "c.exe: cannot write the edited file: No space left on device; no file was changed" in out
    )
    assert {f: f.read_bytes() for f in files} == before  # a and b were put back
    assert sorted(os.listdir(tmp_path)) == ["a.exe", "b.exe", "c.exe"]  # no temp, no backup
    assert calls[:3] == ["a.exe", "b.exe", "c.exe"]


def test_a_batch_with_one_bad_file_writes_nothing(tmp_path: Path) -> None:
    good = write(tmp_path, "good.exe", synth_pe())
    dll = write(tmp_path, "lib.dll", synth_pe(dll=True))
    before = good.read_bytes()
    code, out = run("pe-stack", str(good), str(dll), "--reserve", "256MiB")
    assert code == 10 and "is a DLL" in out
    assert good.read_bytes() == before


def test_an_interrupted_batch_puts_everything_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = [write(tmp_path, f"{n}.exe", synth_pe()) for n in ("a", "b")]
    before = {f: f.read_bytes() for f in files}
    real_replace = os.replace
    done = []

    def interrupted(src: str, dst: str) -> None:
        if done and str(src).endswith(".tmp"):
            raise KeyboardInterrupt
        real_replace(src, dst)
        done.append(dst)

    monkeypatch.setattr(fsmod.os, "replace", interrupted)
    plans = [plan_stack_edit(f, "256MiB") for f in files]
    with pytest.raises(KeyboardInterrupt):
        pemod.apply_stack_edits(plans)
    assert {f: f.read_bytes() for f in files} == before
    assert sorted(os.listdir(tmp_path)) == ["a.exe", "b.exe"]


def test_the_same_file_twice_is_edited_once(tmp_path: Path) -> None:
    exe = write(tmp_path, "a.exe", synth_pe())
    (tmp_path / "link.exe").symlink_to(exe) if os.name == "posix" else None
    names = [str(exe), str(exe)] + ([str(tmp_path / "link.exe")] if os.name == "posix" else [])
    code, out = run("pe-stack", *names, "--reserve", "256MiB")
    assert code == 0, out
    assert out.count("stack reserve 2 MiB -> 256 MiB") == 1
    assert pe_info(exe).stack_reserve == 256 * MIB


def test_plan_refusals_are_pe_errors_never_tracebacks(tmp_path: Path) -> None:
    exe = write(tmp_path, "a.exe", synth_pe())
    with pytest.raises(PEError, match="larger than the reserve"):
        plan_stack_edit(exe, "1MiB", "2MiB")


@pytest.mark.parametrize("special", ["/dev/zero", "/dev/null", "fifo"])
def test_devices_and_fifos_are_refused_not_read(tmp_path: Path, special: str) -> None:
    if os.name != "posix" or (special == "fifo" and not hasattr(os, "mkfifo")):
        pytest.skip("POSIX devices and FIFOs")
    path = special
    if special == "fifo":
        os.mkfifo(tmp_path / "fifo")  # reading it would wait for a writer forever
        path = str(tmp_path / "fifo")
    for cmd in (["pe-info", path], ["pe-stack", path, "--reserve", "256MiB"]):
        code, out = run(*cmd)
        assert code == 10 and "not a regular file" in out, out
