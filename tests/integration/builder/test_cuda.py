"""CUDA for real: tests/fixtures/cuda_project (one .cu file) compiled for two archs through
the real CMake path, the cubins read back with cuobjdump; skipped without nvcc."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.builder.cuda.plan import (
    cmake_defines,
    cuda_files,
    preflight,
    prove_archs,
)
from patchkit.builder.cuda.toolkit import (
    CudaToolkit,
    find_toolkit,
)
from patchkit.core.errors import CudaError, ToolMissing
from tests.fixtures.cuda import (
    archs_of,
    recipe_from,
)
from tests.fixtures.paths import CUDA_PROJECT

FIXTURE = CUDA_PROJECT


# --------------------------------------------------------------------------------------
# integration: the real nvcc, CMake and cuobjdump on the fixture


def _real_toolkit() -> CudaToolkit:
    try:
        return find_toolkit(None, None, os.environ)
    except ToolMissing as e:
        pytest.skip(f"no CUDA toolkit here: {e.message}")


def _nice() -> list[str]:
    return ["nice", "-n", "10"] if sys.platform != "win32" and shutil.which("nice") else []


def test_fixture_builds_for_two_archs_and_cuobjdump_proves_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tk = _real_toolkit()
    # the rig's extremes this toolkit can do: sm_60 + sm_86 (CUDA 11.1-12.x), sm_75 + sm_86 (13)
    ok = [s for s in (60, 75, 86) if s in tk.sms]
    if len(ok) < 2:
        pytest.skip(f"{tk.describe()} compiles fewer than two of sm_60/75/86")
    two = [ok[0], ok[-1]]
    r = recipe_from(tmp_path, f'[build]\ntargets = ["fixcuda"]\n[cuda]\narchs = {two}\n')
    assert r.cuda is not None
    archs = r.cuda.archs
    assert archs.sms == tuple(two)
    notes = preflight(archs, tk, need_cublas=False, need_cuobjdump=False)
    assert isinstance(notes, list)
    defines = cmake_defines(r, archs, tk)
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache"))
    build = tmp_path / "build"
    cmd = [
        *_nice(),
        "cmake",
        "-S",
        str(FIXTURE),
        "-B",
        str(build),
        "-G",
        "Ninja",
        "-DCMAKE_BUILD_TYPE=Release",
        *(f"-D{k}={v}" for k, v in defines.items()),
    ]
    cfg = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert cfg.returncode == 0, cfg.stdout[-3000:] + cfg.stderr[-3000:]
    ninja = (build / "build.ninja").read_text()
    for s in two:
        assert f"arch=compute_{s},code=[sm_{s}]" in ninja
    assert f"arch=compute_{two[-1]},code=[compute_{two[-1]}]" in ninja
    b = subprocess.run(
        [*_nice(), "cmake", "--build", str(build), "-j2"], capture_output=True, text=True, check=False
    )
    assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]
    if tk.cuobjdump is None:
        pytest.skip("built, but no cuobjdump to prove the archs: pip install nvidia-cuda-cuobjdump")
    lib, exe = cuda_files(build, ["fixmain"], patterns=["*fixcuda*"])
    assert exe.stem == "fixmain"
    got = prove_archs([lib, exe], archs, tk.cuobjdump, base=build)
    assert got[f"bin/{lib.name}"] == [f"sm_{two[0]}", f"sm_{two[1]}", f"compute_{two[1]}"]
    assert got[f"bin/{exe.name}"] == []
    # asking for an SM that was not compiled fails the proof
    more = archs_of(*two, 90)
    with pytest.raises(CudaError, match=r"lacks sm_90 \(hopper\)"):
        prove_archs([lib, exe], more, tk.cuobjdump, base=build)
