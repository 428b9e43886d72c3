"""`patchkit pe-stack` / `pe-info` on synthetic PE images."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from patchkit.binary.pe_stack import (
    pe_info,
)
from patchkit.cli import main
from patchkit.core.errors import PEError
from tests.fixtures.pe import (
    MIB,
    add_fake_signature,
    synth_pe,
    write,
)

# ---------------------------------------------------------------- CLI


def run_cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    return result.exit_code, result.stdout, result.stderr


def test_cli_pe_stack_and_pe_info(tmp_path: Path) -> None:
    exe = write(tmp_path, "a.exe", synth_pe())
    code, out, err = run_cli("pe-stack", str(exe), "--reserve", "256MiB")
    assert code == 0 and err == ""  # the edit is the result: on stdout, one line per file
    assert re.fullmatch(
        r"a\.exe: stack reserve 2 MiB -> 256 MiB \(commit 4 KiB\); checksum 0x[0-9a-f]{8} -> 0x[0-9a-f]{8}\n",
        out,
    )
    code, out, err = run_cli("pe-stack", str(exe), "--reserve", "256MiB")
    assert code == 0 and err == ""
    assert out == "a.exe: already 256 MiB (commit 4 KiB); not rewritten\n"
    code, out, err = run_cli("pe-info", str(exe))
    assert code == 0 and err == ""  # the result on stdout, one line per file
    assert re.fullmatch(
        rf"{re.escape(str(exe))}: PE32\+ x86_64 console exe, stack reserve 256 MiB commit 4 KiB, "
        r"checksum 0x[0-9a-f]{8} \(valid\), not signed\n",
        out,
    )
    code, out, err = run_cli("pe-info", "--json", str(exe))
    assert code == 0 and err == ""
    data = json.loads(out)
    assert set(data) == {"schema", "files"} and data["schema"] == 1
    (info,) = data["files"]
    assert info["stack_reserve"] == 256 * MIB and info["checksum_ok"] and not info["signed"]
    assert set(info) == {
        "path",
        "machine",
        "format",
        "subsystem",
        "is_dll",
        "large_address_aware",
        "stack_reserve",
        "stack_commit",
        "checksum",
        "checksum_computed",
        "checksum_ok",
        "signed",
        "certificate_offset",
        "certificate_size",
        "size",
    }


def test_cli_pe_info_several_files_in_order(tmp_path: Path) -> None:
    a = write(tmp_path, "a.exe", synth_pe())
    b = write(tmp_path, "b.dll", synth_pe(dll=True))
    code, out, err = run_cli("pe-info", str(a), str(b))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"{a}: ") and lines[1].startswith(f"{b}: ")
    assert " console DLL, " in lines[1]
    code, out, _ = run_cli("pe-info", "--json", str(a), str(b))
    assert [(f["path"], f["is_dll"]) for f in json.loads(out)["files"]] == [(str(a), False), (str(b), True)]


def test_cli_pe_stack_json(tmp_path: Path) -> None:
    exe = write(tmp_path, "a.exe", synth_pe())
    other = write(tmp_path, "b.exe", synth_pe(reserve=256 * MIB, commit=65536))  # already so
    code, out, err = run_cli(
        "pe-stack", "--json", str(exe), str(other), "--reserve", "0x10000000", "--commit", "64KiB"
    )
    assert code == 0
    data = json.loads(out)  # stdout holds the JSON alone: the lines went to stderr
    assert set(data) == {"schema", "edits"} and data["schema"] == 1
    edit, same = data["edits"]  # in argument order
    assert edit["file"] == str(exe) and same["file"] == str(other)
    assert edit["changed"] and edit["reserve_after"] == 256 * MIB and edit["commit_after"] == 65536
    assert not same["changed"]
    assert set(edit) == {
        "file",
        "reserve_before",
        "reserve_after",
        "commit_before",
        "commit_after",
        "checksum_before",
        "checksum_after",
        "changed",
        "signature_removed",
    }
    assert "a.exe: stack reserve 2 MiB -> 256 MiB, commit 4 KiB -> 64 KiB" in err
    assert "b.exe: already 256 MiB (commit 64 KiB); not rewritten" in err


@pytest.mark.parametrize(
    ("data", "args", "needle"),
    [
        (b"not a PE at all", (), "not a PE file"),
        (synth_pe(dll=True), (), "is a DLL"),
        (add_fake_signature(synth_pe()), (), "Authenticode-signed"),
        (synth_pe(), ("--commit", "512MiB"), "larger than the reserve"),
        (synth_pe()[:0x150], (), "truncated"),
    ],
)
def test_cli_refusals_are_one_line_exit_10(
    tmp_path: Path, data: bytes, args: tuple[str, ...], needle: str
) -> None:
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
    code, out, err = run_cli("pe-stack", str(exe), "--reserve", "256MiB", "--allow-unsign")
    assert code == 0
    assert "removing its Authenticode signature" in err  # the warning: stderr
    assert out.endswith("; Authenticode signature removed\n")  # the edit: stdout
    assert not pe_info(exe).signed


def test_cli_pe_info_missing_file(tmp_path: Path) -> None:
    code, out, err = run_cli("pe-info", str(tmp_path / "missing.exe"))
    assert code == PEError.exit_code and "no such file" in err and out == ""
