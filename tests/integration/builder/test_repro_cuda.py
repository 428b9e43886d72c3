"""Reproducible CUDA objects: tests/fixtures/cuda_project (with __FILE__ in host and device
code) built at two absolute paths, one through ccache and one without a launcher, with the
environment builder.repro gives, yields the same library and executable; skipped without nvcc."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from patchkit.builder.cuda.plan import cmake_defines
from patchkit.builder.cuda.toolkit import CudaToolkit, find_toolkit
from patchkit.builder.repro import build_env
from patchkit.core.errors import ToolMissing
from tests.fixtures.cuda import recipe_from
from tests.fixtures.paths import CUDA_PROJECT

# where: __FILE__ on the host; the device assert carries __FILE__ into the cubin
WHERE = """
#include <cassert>
__global__ void fix_check(int n) { assert(n >= 0); }
extern "C" const char *fix_where(void) { return __FILE__; }
"""


def _toolkit() -> CudaToolkit:
    try:
        return find_toolkit(None, None, os.environ)
    except ToolMissing as e:
        pytest.skip(f"no CUDA toolkit here: {e.message}")


def _build(root: Path, defines: dict[str, str], env: dict[str, str]) -> dict[str, str]:
    src, build = root / "src", root / "build"
    shutil.copytree(CUDA_PROJECT, src)
    with (src / "kernel.cu").open("a") as f:
        f.write(WHERE)
    cfg = subprocess.run(
        [
            "cmake",
            "-S",
            str(src),
            "-B",
            str(build),
            "-G",
            "Ninja",
            "-DCMAKE_BUILD_TYPE=Release",
            *(f"-D{k}={v}" for k, v in defines.items()),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert cfg.returncode == 0, cfg.stdout[-3000:] + cfg.stderr[-3000:]
    b = subprocess.run(
        ["cmake", "--build", str(build), "-j2"], capture_output=True, text=True, env=env, check=False
    )
    assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((build / "bin").iterdir())
        if p.is_file()
    }


def test_cuda_fixture_same_bytes_from_two_paths_with_and_without_ccache(tmp_path: Path) -> None:
    tk = _toolkit()
    sm = next((s for s in (75, 86, 60) if s in tk.sms), None)
    if sm is None or shutil.which("ccache") is None:
        pytest.skip("needs a toolkit that compiles sm_75/86/60, and ccache")
    r = recipe_from(tmp_path, f'[build]\ntargets = ["fixcuda"]\n[cuda]\narchs = [{sm}]\n')
    assert r.cuda is not None
    # as the pipeline configures llama.cpp: $ORIGIN, not the build dir, in the build RPATH
    defines = {**cmake_defines(r, r.cuda.archs, tk, ccache=False), "CMAKE_BUILD_RPATH_USE_ORIGIN": "ON"}
    date = "2026-08-07T12:34:56+00:00"

    a_root = tmp_path / "a"
    env_a = dict(
        os.environ,
        **build_env(
            os.environ,
            work_root=a_root,
            build_dir=a_root / "build",
            commit_date=date,
            launcher=None,
            nvcc=tk.version,
        ),
    )
    a = _build(a_root, defines, env_a)

    b_root = tmp_path / "somewhere" / "else" / "b"
    env_b = dict(
        os.environ,
        CCACHE_DIR=str(tmp_path / "ccache"),
        CCACHE_BASEDIR=str(b_root),
        CCACHE_NOHASHDIR="true",
        **build_env(
            os.environ,
            work_root=b_root,
            build_dir=b_root / "build",
            commit_date=date,
            launcher="ccache",
            nvcc=tk.version,
        ),
    )
    b = _build(
        b_root,
        {
            **cmake_defines(r, r.cuda.archs, tk, ccache="ccache"),
            "CMAKE_BUILD_RPATH_USE_ORIGIN": "ON",
            "CMAKE_CXX_COMPILER_LAUNCHER": "ccache",
        },
        env_b,
    )
    assert set(a) >= {"fixmain"} and any("fixcuda" in n for n in a)
    assert a == b
    lib = next((b_root / "build" / "bin").glob("*fixcuda*")).read_bytes()
    assert str(tmp_path).encode() not in lib
