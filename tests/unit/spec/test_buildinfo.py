"""spec.buildinfo: the build-info.json schema round-trips exactly, and anything wrong in
it is one line naming the dotted key."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from patchkit.core.errors import ConfigError, ReleaseError
from patchkit.spec.buildinfo import (
    ApplyResult,
    BuildInfo,
    CheckStatus,
    SmokeStatus,
    read_build_info,
    write_build_info,
)
from patchkit.spec.problems import BuildInfoUnusable, NoFinishedBuild
from tests.fixtures.buildinfo import build_info_json, patch_json

FULL = build_info_json(
    patches=[patch_json("guard"), patch_json("meta-ot", "already-present", experimental=True)],
    cuda={
        "archs": [60, 86],
        "ptx": 86,
        "requested": ["pascal", "86"],
        "cmake_architectures": "60-real;61-real;86-real;86-virtual",
        "nvcc": "12.4.131",
        "proven": {"bin/libggml-cuda.so": ["sm_60", "sm_86", "compute_86"]},
        "toolkit": {"no_vmm": True, "cublas": "wheel"},
        "notes": ["no libcuda stub"],
    },
    pe_edits=[
        {
            "file": "bin/llama-cli.exe",
            "before": {"stack_reserve": 2 << 20, "stack_commit": 4096},
            "after": {"stack_reserve": 256 << 20, "stack_commit": 4096},
        }
    ],
    smoke={
        "status": "failed",
        "checks": [
            {"name": "version", "status": "pass", "why": "answered", "seconds": 0.5},
            {"name": "generate", "status": "fail", "why": "tokens differ", "seconds": 2.25},
        ],
    },
    runtime_env={"LD_LIBRARY_PATH": "/opt/cuda/lib64"},
    timings={"source": 1, "build": 10.5},
    artifacts=[
        {
            "target": "llama-cli",
            "type": "EXECUTABLE",
            "path": "bin/llama-cli",
            "sha256": "ab" * 32,
            "size": 123,
        }
    ],
)


@pytest.mark.parametrize("data", [build_info_json(), FULL], ids=["minimal", "full"])
def test_round_trip_is_exact(data: dict[str, Any]) -> None:
    info = BuildInfo.from_json(data)
    assert info.to_json() == data
    assert json.loads(json.dumps(info.to_json())) == data  # plain JSON types only
    assert BuildInfo.from_json(info.to_json()) == info


def test_typed_fields() -> None:
    info = BuildInfo.from_json(FULL)
    assert [p.result for p in info.patches] == [ApplyResult.APPLIED, ApplyResult.ALREADY_PRESENT]
    assert info.in_build == {"guard", "meta-ot"}
    assert info.smoke is not None and info.smoke.status is SmokeStatus.FAILED
    assert info.smoke.failed == ("generate",)
    assert info.smoke.checks[0].status is CheckStatus.PASS
    assert info.cuda is not None and info.cuda.no_vmm and info.cuda.archs == (60, 86)
    assert info.pe_edits[0].after.stack_reserve == 256 << 20
    assert not info.windows
    assert BuildInfo.from_json(build_info_json(platform={"os": "windows", "arch": "x86_64"})).windows
    with pytest.raises(AttributeError):
        info.recipe = None  # type: ignore[misc]  # frozen


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(d: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for p in parents:
            d = d[int(p)] if p.isdigit() else d[p]  # type: ignore[index]
        if value is _DELETE:
            del d[last]
        else:
            d[last] = value

    return edit


_DELETE = object()

BAD = [
    ("upstream.commit", _DELETE, "upstream.commit is missing or not the expected type"),
    ("upstream.commit", "abc123", "upstream.commit 'abc123' is not a 40-hex sha"),
    ("recipe.sha256", 5, "recipe.sha256 is missing or not the expected type"),
    ("patches.0.result", "maybe", "patches[0].result is missing or not the expected type"),
    ("patches.0.experimental", "no", "patches[0].experimental is missing or not the expected type"),
    ("experimental", 1, "experimental is missing or not the expected type"),
    ("series_hash", "not-hex", "series_hash 'not-hex' is not hex"),
    ("platform.os", "../etc", "platform.os '../etc' cannot be part of a file name"),
    ("recipe.name", "a b", "recipe.name 'a b' cannot be part of a file name"),
    ("tools", {"cmake": 4}, "tools.cmake is missing or not the expected type"),
    ("cmake.defines", {"GGML_RPC": True}, "cmake.defines.GGML_RPC is missing or not the expected type"),
    (
        "artifacts",
        [{"target": "a", "type": "EXECUTABLE", "path": "bin/a", "sha256": "0", "size": True}],
        "artifacts[0].size is missing or not the expected type",
    ),
    (
        "smoke",
        {"status": "passed", "checks": [{"name": "v", "status": "ok", "why": ""}]},
        "smoke.checks[0].status is missing or not the expected type",
    ),
    (
        "cuda",
        {"archs": [60, "86"], "cmake_architectures": "x", "nvcc": "12"},
        "cuda.archs is missing or not the expected type",
    ),
    (
        "pe_edits",
        [{"file": "bin/a.exe", "before": {"stack_reserve": 1, "stack_commit": 1}, "after": None}],
        "pe_edits[0].after is missing or not the expected type",
    ),
    ("timings", {"build": "10s"}, "timings.build is missing or not the expected type"),
    ("schema", 2, "unknown build-info schema 2 (this patchkit reads schema 1)"),
]


@pytest.mark.parametrize(("key", "value", "message"), BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_a_bad_field_is_one_line_naming_the_key(key: str, value: Any, message: str) -> None:
    data = copy.deepcopy(FULL)
    _set(key, value)(data)
    with pytest.raises(ConfigError) as e:
        BuildInfo.from_json(data, where="out/x/build-info.json")
    assert str(e.value) == f"out/x/build-info.json: {message}"
    assert "\n" not in str(e.value) and e.value.exit_code == 2


def test_not_an_object_and_the_error_class() -> None:
    with pytest.raises(ConfigError, match=r"^build-info.json is not a JSON object$") as e:
        BuildInfo.from_json([1, 2])
    assert e.value.problem == BuildInfoUnusable(found="build-info.json is not a JSON object")
    data = build_info_json()
    del data["upstream"]
    with pytest.raises(ReleaseError, match=r"^b.json: upstream is missing") as r:
        BuildInfo.from_json(data, where="b.json", error=ReleaseError)
    assert r.value.exit_code == 12


def test_read_and_write(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=r"no finished build: .*out does not exist") as e:
        read_build_info(out)
    assert e.value.problem == NoFinishedBuild(out_dir=out, exists=False)
    out.mkdir()
    with pytest.raises(ReleaseError, match="holds no build-info.json"):
        read_build_info(out, error=ReleaseError)
    (out / "build-info.json").write_text("{ broken")
    with pytest.raises(ConfigError, match=r"build-info.json is not valid JSON \("):
        read_build_info(out)
    info = BuildInfo.from_json(FULL)
    write_build_info(out, info)
    assert read_build_info(out) == info
    assert os.listdir(out) == ["build-info.json"]  # atomic: no temp left


def test_compile_cache_record_round_trips_and_is_optional() -> None:
    from patchkit.spec.buildinfo import CompileCacheRecord

    record = {
        "launcher": "ccache",
        "version": "4.7.5",
        "remote": "redis://***@cache.lan:6379",
        "compiles": 40,
        "local_hits": 1,
        "remote_hits": 38,
        "misses": 1,
        "remote_errors": 0,
        "miss_seconds": 2.5,
        "seconds_saved": 97.5,
        "fallback": "",
        "distributed": 0,
        "dist_scheduler": None,
    }
    data = build_info_json(compile_cache=record)
    info = BuildInfo.from_json(data)
    assert info.compile_cache == CompileCacheRecord(**record)
    assert info.to_json() == data
    # an older build-info has no such key; a build without a launcher writes none
    assert BuildInfo.from_json(build_info_json()).compile_cache is None
    assert "compile_cache" not in BuildInfo.from_json(build_info_json()).to_json()
    # a launcher that said nothing: only the launcher is required
    assert BuildInfo.from_json(
        build_info_json(compile_cache={"launcher": "sccache"})
    ).compile_cache == CompileCacheRecord(launcher="sccache")
    with pytest.raises(ConfigError, match="compile_cache.remote_hits is missing or not the expected type"):
        BuildInfo.from_json(build_info_json(compile_cache={**record, "remote_hits": "38"}))
