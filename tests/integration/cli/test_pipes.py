"""Results on stdout, for real: `patchkit list | grep cuda` and `patchkit doctor > file` in a
shell, with patchkit as a process (no CliRunner between them)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.paths import REPO
from tests.fixtures.project import write_recipe
from tests.fixtures.upstream import FixtureUpstream

posix_only = pytest.mark.skipif(sys.platform == "win32" or not shutil.which("grep"), reason="a POSIX shell")


def _sh(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONIOENCODING": "utf-8"},
        timeout=300,
    )


def _pk(project: Path) -> str:
    return f"{shlex.quote(sys.executable)} -m patchkit --project {shlex.quote(str(project))}"


@posix_only
def test_list_piped_to_grep_finds_the_cuda_recipe(project: Path, upstream: FixtureUpstream) -> None:
    write_recipe(
        project, "gpu", url=str(upstream.path), commit=upstream.head, extra='\n[cuda]\narchs = ["turing"]\n'
    )
    r = _sh(f"{_pk(project)} list | grep CUDA", project)
    assert r.returncode == 0, r.stderr
    (line,) = r.stdout.splitlines()
    assert "gpu" in line and "CUDA sm_75" in line and "fixture-cli, fixture-rpc-server" in line
    assert r.stderr == ""
    r = _sh(f"{_pk(project)} list --json > list.json", project)
    assert r.returncode == 0 and r.stderr == ""
    names = [x["name"] for x in json.loads((project / "list.json").read_text())["recipes"]]
    assert names == ["fixture", "gpu"]


@posix_only
def test_doctor_to_a_file_writes_the_report(project: Path) -> None:
    r = _sh(f"{_pk(project)} doctor > report.txt", project)
    assert r.returncode == 0, r.stderr
    report = (project / "report.txt").read_text().splitlines()
    assert report[0].startswith("patchkit doctor (") and "tools" in report and "recipes" in report
    assert any(ln.startswith("  ✕ fixture: ") or ln.startswith("  ✓ fixture: ") for ln in report)
    assert "\x1b[" not in "".join(report)
    assert "patchkit doctor" not in r.stderr


@posix_only
def test_series_result_and_error_apart(project: Path) -> None:
    r = _sh(f"{_pk(project)} series 2>err.txt | grep -c 'sha256 ok'", project)
    assert r.returncode == 0 and r.stdout == "1\n"
    assert (project / "err.txt").read_text() == ""
    patch = project / "patches" / "0001-zero-nbytes-guard.patch"
    patch.write_text(patch.read_text() + "\n")
    r = _sh(f"{_pk(project)} series > out.txt", project)
    assert r.returncode == 5
    assert (project / "out.txt").read_text() == ""
    assert r.stderr.startswith("error: ") and "sha256 is" in r.stderr
