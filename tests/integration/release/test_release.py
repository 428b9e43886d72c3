"""Releases checked by standard tools: sha256sum, tar, unzip, actionlint."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.actionlint import actionlint
from tests.fixtures.release import (
    do_release,
    make_build,
    workflow,
)


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs GNU sha256sum")
def test_sha256sum_checks_the_output(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    do_release(make_build(tmp_path / "a"), dist)
    do_release(make_build(tmp_path / "b", name="win", os_name="windows"), dist)
    res = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=dist, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count(": OK") == 6  # archive, manifest copy, provenance statement x 2
    # and it notices a flipped byte
    arc = next(dist.glob("*.zip"))
    data = bytearray(arc.read_bytes())
    data[len(data) // 2] ^= 1
    arc.write_bytes(bytes(data))
    res = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=dist, capture_output=True, text=True)
    assert res.returncode != 0 and f"{arc.name}: FAILED" in res.stdout


@pytest.mark.skipif(shutil.which("tar") is None, reason="needs tar")
def test_standard_tools_unpack_with_modes(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    linux = do_release(make_build(tmp_path / "a"), dist)
    win = do_release(make_build(tmp_path / "b", name="win", os_name="windows"), dist)
    x = tmp_path / "x"
    x.mkdir()
    subprocess.run(["tar", "-xzf", str(linux.archive), "-C", str(x)], check=True)
    cli = x / linux.name / "bin" / "llama-cli"
    assert cli.read_bytes() == (tmp_path / "a/out/cpu-rpc/bin/llama-cli").read_bytes()
    if sys.platform != "win32":
        assert os.access(cli, os.X_OK) and not os.access(x / linux.name / "LICENSE", os.X_OK)
    if shutil.which("unzip"):
        subprocess.run(["unzip", "-q", str(win.archive), "-d", str(x)], check=True)
        exe = x / win.name / "bin" / "llama-cli.exe"
        assert exe.read_bytes() == (tmp_path / "b/out/win/bin/llama-cli.exe").read_bytes()
        if sys.platform != "win32":
            assert os.access(exe, os.X_OK)
    assert json.loads((x / linux.name / "manifest.json").read_text())["name"] == linux.name


def test_ci_template_passes_actionlint(project: Path, tmp_path: Path) -> None:
    exe = actionlint()  # installed with the test extras: no skip
    wf = tmp_path / "repo" / ".github" / "workflows" / "release.yml"
    wf.parent.mkdir(parents=True)
    wf.write_text(workflow(project))
    res = subprocess.run([exe, str(wf)], capture_output=True, text=True, cwd=tmp_path / "repo")
    assert res.returncode == 0, res.stdout + res.stderr
    # and it would have caught a broken one
    wf.write_text(wf.read_text().replace("runs-on: ${{ matrix.runner }}", "runs-on: ${{ matrix.runnr }}"))
    res = subprocess.run([exe, str(wf)], capture_output=True, text=True, cwd=tmp_path / "repo")
    assert res.returncode != 0
