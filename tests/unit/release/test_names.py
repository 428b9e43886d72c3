"""Release names from a build-info's or a manifest's fields (release.names)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from patchkit.core.errors import ConfigError, ReleaseError
from patchkit.release.names import archive_name, variant_name
from patchkit.spec.buildinfo import BuildInfo, read_build_info
from tests.fixtures.buildinfo import build_info_json
from tests.fixtures.release import (
    make_build,
)

# ---------------------------------------------------------------- naming


def test_names_cpu_cuda_windows(tmp_path: Path) -> None:
    cpu = read_build_info(make_build(tmp_path / "a"))
    assert archive_name(cpu) == ("llama-82bb485-pk5f3c2a1b-linux-x86_64-cpu-rpc", ".tar.gz")
    cu = read_build_info(make_build(tmp_path / "b", name="cuda-pascal-ampere", cuda=True))
    assert variant_name(cu) == "cuda12-sm60-61-75-86"  # sorted, from the build's archs
    assert archive_name(cu)[0] == "llama-82bb485-pk5f3c2a1b-linux-x86_64-cuda12-sm60-61-75-86"
    win = read_build_info(make_build(tmp_path / "c", name="win-cuda", os_name="windows", cuda=True))
    assert archive_name(win) == ("llama-82bb485-pk5f3c2a1b-windows-x86_64-cuda12-sm60-61-75-86", ".zip")


def _cuda(archs: list[Any], nvcc: str) -> dict[str, Any]:
    return {"archs": archs, "cmake_architectures": "x", "nvcc": nvcc}


def _info(**over: Any) -> BuildInfo:
    data: dict[str, Any] = build_info_json(platform={"os": "linux", "arch": "aarch64"}, tools={"nvcc": None})
    data.update(over)
    return BuildInfo.from_json(data)


def test_variant_takes_nvcc_from_the_tools_when_cuda_does_not_say() -> None:
    info = _info(
        recipe={"name": "x", "sha256": "0"},
        tools={"nvcc": "Cuda compilation tools, release 13.0"},
        cuda=_cuda([86, 75, 120], ""),
    )
    assert variant_name(info) == "cuda13-sm75-86-120"


def test_archs_are_sm_numbers_and_anything_else_is_refused_when_read() -> None:
    """A build-info's archs are whole SM numbers (spec.cuda resolved the recipe's
    spellings); a spelling in the file is refused when it is read, naming the key."""
    with pytest.raises(ConfigError, match=r"cuda\.archs is missing or not the expected type"):
        _info(cuda=_cuda(["86-real", "sm_75"], "12.4"))


def test_cpu_names_use_the_recipe_and_the_platform() -> None:
    assert variant_name(_info()) == "cpu-rpc"
    assert archive_name(_info()) == ("llama-82bb485-pk5f3c2a1b-linux-aarch64-cpu-rpc", ".tar.gz")
    win = _info(
        platform={"os": "windows", "arch": "x86_64"}, recipe={"name": "windows-cpu-rpc", "sha256": "0"}
    )
    assert archive_name(win) == ("llama-82bb485-pk5f3c2a1b-windows-x86_64-windows-cpu-rpc", ".zip")


@pytest.mark.parametrize(
    ("cuda", "tools", "want"),
    [
        (_cuda([86, 61, 61, 86], "12.4"), {}, "cuda12-sm61-86"),  # deduplicated
        (_cuda([86], ""), {"nvcc": "V11.8.89"}, "cuda11-sm86"),  # from tools.nvcc
        (_cuda([86], "13"), {}, "cuda13-sm86"),  # a bare major version
        (_cuda([120, 90, 120], "12.8.61"), {}, "cuda12-sm90-120"),  # numeric order
    ],
)
def test_cuda_variants(cuda: dict[str, object], tools: dict[str, object], want: str) -> None:
    assert variant_name(_info(cuda=cuda, tools=tools)) == want


@pytest.mark.parametrize(
    ("cuda", "message"),
    [
        (_cuda([], "12.4"), "build-info.json: cuda.archs is empty"),
        (_cuda([86], "weird"), "build-info.json: cannot tell the CUDA version from nvcc 'weird'"),
    ],
)
def test_cuda_variant_refusals_are_one_line(cuda: dict[str, object], message: str) -> None:
    with pytest.raises(ReleaseError) as e:
        variant_name(_info(cuda=cuda))
    assert e.value.message == message and e.value.exit_code == 12


# ---------------------------------------------------------------- build numbers


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("version: 10309 (82bb48500)\nbuilt with GNU 12.2.0 for Linux x86_64\n", (10309, "82bb48500")),
        ("0.2.0-dev (build 10566, commit bb4caa754)\n", (10566, "bb4caa754")),
        ("load_backend: loaded RPC backend\nversion: 7 (abcd)\n", (7, "abcd")),
        ("llama-cli 0.2.0\n", None),
        ("version: 12345678901 (abcdef0)\n", None),  # more digits than any build number
        ("", None),
    ],
)
def test_parse_build_number_reads_both_upstream_formats(text: str, want: tuple[int, str] | None) -> None:
    from patchkit.release.names import parse_build_number

    assert parse_build_number(text) == want


def _upstream(**kw: object) -> dict[str, object]:
    return {
        "url": "u",
        "commit": "82bb48500a9a6b3374da2cf5811695369278e4d3",
        "commit_date": "2026-08-07T12:34:56+00:00",
        **kw,
    }


def test_names_carry_the_build_number_when_recorded() -> None:
    info = _info(upstream=_upstream(build_number=10309))
    assert archive_name(info) == ("llama-b10309-82bb485-pk5f3c2a1b-linux-aarch64-cpu-rpc", ".tar.gz")
    # an older build-info without it keeps the old name (old manifests still verify)
    assert archive_name(_info())[0] == "llama-82bb485-pk5f3c2a1b-linux-aarch64-cpu-rpc"


@pytest.mark.parametrize("bad", [0, -3, True, "10309", 1.5, 10**12])
def test_a_bad_build_number_is_refused(bad: object) -> None:
    """Refused when the build-info is read (not a positive whole number) or when the
    name is made (more digits than any build number), naming the key either way."""
    with pytest.raises(ReleaseError, match="build_number"):
        info = BuildInfo.from_json(build_info_json(upstream=_upstream(build_number=bad)), error=ReleaseError)
        archive_name(info)


def test_build_info_keeps_the_build_number(tmp_path: Path) -> None:
    from patchkit.core.errors import ReleaseError as Err
    from patchkit.spec.buildinfo import read_build_info

    out = make_build(tmp_path)
    data = json.loads((out / "build-info.json").read_text())
    assert "build_number" not in read_build_info(out, error=Err).to_json()["upstream"]
    data["upstream"]["build_number"] = 10309
    (out / "build-info.json").write_text(json.dumps(data))
    assert read_build_info(out, error=Err).upstream.build_number == 10309
    assert read_build_info(out, error=Err).to_json()["upstream"]["build_number"] == 10309
    data["upstream"]["build_number"] = 0
    (out / "build-info.json").write_text(json.dumps(data))
    with pytest.raises(Err, match="build_number"):
        read_build_info(out, error=Err)


def test_release_and_verify_use_the_build_number(tmp_path: Path) -> None:
    from patchkit.release.verify import verify_dir
    from tests.fixtures.release import do_release, rewrite_info

    build = make_build(tmp_path)
    rewrite_info(build, lambda info: info["upstream"].__setitem__("build_number", 10309))
    r = do_release(build, tmp_path / "dist")
    assert r.archive.name == "llama-b10309-82bb485-pk5f3c2a1b-linux-x86_64-cpu-rpc.tar.gz"
    assert json.loads(r.manifest.read_text())["upstream"]["build_number"] == 10309
    assert verify_dir(tmp_path / "dist").differences == ()
    # a manifest whose build number was changed no longer gives its archive's name
    side = r.manifest
    side.write_text(side.read_text().replace('"build_number": 10309', '"build_number": 10310'))
    diffs = verify_dir(tmp_path / "dist").differences
    assert any("build_number" in d for d in diffs), diffs
