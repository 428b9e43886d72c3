"""`patchkit doctor` on a fake machine (doctor.survey with replayed tool outputs): the
report on stdout, ``--json`` with everything the text shows."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from patchkit.cli import doctor as doctor_cli
from patchkit.cli import main
from patchkit.doctor import survey
from tests.fixtures.cuda import (
    GXX_12,
    NVCC_12_4,
    FakeRun,
    doctor_project,
    make_exe,
    make_toolkit_dir,
    nvcc_answers,
)


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """CUDA 12.4 with cuBLAS, a stub and cuobjdump; gcc 12, cmake, ninja; no ccache."""
    bin_ = tmp_path / "bin"
    for tool in ("cmake", "ninja", "g++", "gcc"):
        make_exe(bin_ / tool)
    root = make_toolkit_dir(tmp_path / "cuda", cublas=True, stub=True, cuobjdump=True)
    run = FakeRun(
        nvcc_answers(NVCC_12_4, root)
        | {
            ("cmake", "--version"): (0, "cmake version 3.31.6\n"),
            ("ninja", "--version"): (0, "1.12.1\n"),
            ("gcc", "--version"): (0, GXX_12.replace("g++", "gcc")),
            ("g++", "--version"): (0, GXX_12),
            ("wine64", "--version"): (0, "wine-8.0\n"),  # asked only where /usr/lib/wine/wine64 is
        }
    )
    real = survey.build_report

    def fake(project: Any, series: Any, **kw: Any) -> survey.Report:
        env = {"PATH": str(bin_), "CUDA_PATH": str(root)}
        return real(
            project,
            series,
            cuda_root=kw["cuda_root"],
            env=env,
            run=run,
            os_name="linux",
            sites=[],
            project_error=kw["project_error"],
        )

    monkeypatch.setattr(doctor_cli, "build_report", fake)
    return root


def _doctor(tmp_path: Path, *args: str) -> Result:
    proj = tmp_path / "dproj"
    if not proj.exists():
        doctor_project(tmp_path)
    r = CliRunner().invoke(main, ["--project", str(proj), "doctor", *args])
    assert r.exit_code == 0, r.output  # doctor reports: always 0
    return r


def test_doctor_report_on_stdout(machine: Path, tmp_path: Path) -> None:
    r = _doctor(tmp_path)
    assert r.stderr == ""  # `patchkit doctor > report.txt` gets it all
    lines = r.stdout.splitlines()
    assert lines[0] == f"patchkit doctor (linux {platform.machine()})"
    assert lines[1] == "tools" and "CUDA" in lines and "recipes" in lines
    assert any(ln.startswith("  cmake        3.31.6") for ln in lines)
    assert any(ln.startswith("  ccache       not found") for ln in lines)
    assert any(ln.startswith("  host cxx") and ln.endswith("; accepts gcc <= 13") for ln in lines)
    assert f"  root         {machine}" in lines
    assert "  ✓ cuda-pascal-ampere: can build here" in lines
    assert any(ln.startswith("  ✕ windows-cuda-pascal-ampere: cannot: windows recipe") for ln in lines)


def test_doctor_json_holds_what_the_text_shows(machine: Path, tmp_path: Path) -> None:
    r = _doctor(tmp_path, "--json")
    assert r.stderr == ""
    data = json.loads(r.stdout)
    assert set(data) == {
        "schema",
        "host_os",
        "machine",
        "tools",
        "cuda",
        "recipes",
        "project_error",
        "floors",
    }
    assert data["schema"] == 1 and data["host_os"] == "linux" and data["machine"] == platform.machine()
    assert data["tools"]["cmake"] == {
        "path": str(machine.parent / "bin" / "cmake"),
        "version": "3.31.6",
        "note": "",
    }
    assert data["tools"]["ccache"]["path"] is None
    cuda = data["cuda"]
    assert cuda["version"].startswith("12.4") and cuda["root"] == str(machine)
    assert cuda["host_gcc_max"] == 13 and cuda["error"] is None  # the "accepts gcc <= 13" of the text
    assert {
        "nvcc",
        "source",
        "sms",
        "cublas",
        "cublas_source",
        "libcuda",
        "libcuda_kind",
        "cuobjdump",
    } <= set(cuda)
    v = {x["recipe"]: x for x in data["recipes"]}
    assert v["cuda-pascal-ampere"]["ok"] and not v["windows-cuda-pascal-ampere"]["ok"]
    # the words (todo, notes) and the same as data (fix, facts)
    assert set(v["broken"]) == {"recipe", "ok", "why", "todo", "notes", "fix", "facts"}
    assert (v["broken"]["todo"], v["broken"]["fix"]["kind"]) == ("fix the recipe", "fix-recipe")
    win = v["windows-cuda-pascal-ampere"]
    assert win["todo"].startswith("build it on Windows from a Visual Studio developer prompt")
    assert (win["fix"]["kind"], win["fix"]["os"], win["fix"]["toolkits"]) == (
        "build-on",
        "windows",
        "CUDA 11.1-12.9",
    )
    ok = v["cuda-pascal-ampere"]
    assert ok["notes"][-1] == "no ccache: every CUDA build compiles from scratch (apt install ccache)"
    assert (ok["facts"][0]["kind"], ok["facts"][-1]["kind"]) == ("toolkit", "no-ccache")
    assert data["project_error"] is None


def test_doctor_json_without_a_toolkit(
    machine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = doctor_cli.build_report

    def no_cuda(project: Any, series: Any, **kw: Any) -> survey.Report:
        rep = real(project, series, **kw)
        return survey.Report(
            host_os=rep.host_os,
            machine=rep.machine,
            tools=rep.tools,
            toolkit=None,
            toolkit_error="no nvcc",
            verdicts=rep.verdicts,
        )

    monkeypatch.setattr(doctor_cli, "build_report", no_cuda)
    cuda = json.loads(_doctor(tmp_path, "--json").stdout)["cuda"]
    assert cuda == {"error": "no nvcc", "host_gcc_max": None}
    assert "  nvcc         not found: no nvcc" in _doctor(tmp_path).stdout.splitlines()
