"""CUDA through `patchkit build`: tests/fixtures/cuda_project linked with cuBLAS (the
nvidia-cublas wheel's, a folder outside the toolkit, when that is where cuBLAS is) ships
with RUNPATH exactly $ORIGIN; the build's recorded runtime_env, not a baked-in path, is what
finds cuBLAS. Skipped without nvcc and cuBLAS (CI has neither)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.binary.elf import read_dynamic
from patchkit.builder.cuda.toolkit import find_toolkit
from patchkit.core.errors import ToolMissing
from tests.fixtures.paths import CUDA_PROJECT
from tests.fixtures.project import build
from tests.fixtures.upstream import commit_files, git

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="ELF binaries (Linux)")


def test_cuda_fixture_with_cublas_ships_origin_only(tmp_path: Path) -> None:
    try:
        tk = find_toolkit(None, None, os.environ)
    except ToolMissing as e:
        pytest.skip(f"no CUDA toolkit here: {e.message}")
    if tk.cublas is None:
        pytest.skip(f"{tk.describe()} has no cuBLAS (pip install nvidia-cublas)")
    sm = 75 if 75 in tk.sms else min(tk.sms)
    repo = tmp_path / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    files: dict[str, str | bytes | None] = {
        p.name: p.read_bytes() for p in CUDA_PROJECT.iterdir() if p.is_file()
    }
    files["LICENSE"] = "MIT License\n"
    head = commit_files(repo, files, "cuda fixture", date="2026-01-01T00:00:00+00:00")
    project = tmp_path / "project"
    (project / "recipes").mkdir(parents=True)
    (project / "patches").mkdir()
    (project / "patches" / "series").write_text("")
    (project / "recipes" / "fixcuda.toml").write_text(
        f'name = "fixcuda"\npatches = []\n[upstream]\nurl = "{repo}"\ncommit = "{head}"\n'
        '[build]\ntargets = ["fixmain"]\n[build.defines]\nFIXCUDA_CUBLAS = true\n'
        f"[cuda]\narchs = [{sm}]\n[smoke]\nenabled = false\n"
    )
    out = tmp_path / "out"
    r = build(project, out, recipe="fixcuda")
    assert r.exit_code == 0, r.output
    files_out = sorted((out / "bin").iterdir())
    assert {f.name for f in files_out} == {"fixmain", "libfixcuda.so"}
    for f in files_out:
        dyn = read_dynamic(f)
        assert dyn is not None and dyn.runpath == ("$ORIGIN",) and dyn.rpath == (), (f.name, dyn)
    lib = read_dynamic(out / "bin" / "libfixcuda.so")
    assert lib is not None and any(n.startswith("libcublas.so") for n in lib.needed), lib
    info = json.loads((out / "build-info.json").read_text())
    ld_path = info["runtime_env"]["LD_LIBRARY_PATH"].split(os.pathsep)
    assert str(tk.cublas.library.parent) in ld_path
    # fixmain loads libfixcuda (via $ORIGIN) and cuBLAS (via the recorded runtime_env)
    exe = str(out / "bin" / "fixmain")
    env = {**os.environ, **info["runtime_env"]}
    res = subprocess.run([exe], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    if tk.cublas.source == "wheel" and shutil.which("ldconfig"):
        # nothing baked in: without the runtime_env the wheel's cuBLAS is not found
        bare = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        res = subprocess.run([exe], env=bare, capture_output=True, text=True, timeout=60)
        assert res.returncode != 0 and "libcublas" in res.stderr, res.stderr
