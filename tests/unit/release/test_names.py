"""Release names from a build-info's fields (release.names)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkit.core.errors import ReleaseError
from patchkit.release.names import archive_name, variant_name
from tests.fixtures.release import (
    make_build,
)

# ---------------------------------------------------------------- naming


def test_names_cpu_cuda_windows(tmp_path: Path) -> None:
    cpu = json.loads((make_build(tmp_path / "a") / "build-info.json").read_text())
    assert archive_name(cpu) == ("llama-82bb485-pk5f3c2a1b-linux-x86_64-cpu-rpc", ".tar.gz")
    cu = json.loads(
        (make_build(tmp_path / "b", name="cuda-pascal-ampere", cuda=True) / "build-info.json").read_text()
    )
    assert variant_name(cu) == "cuda12-sm60-61-75-86"  # sorted, from the build's archs
    assert archive_name(cu)[0] == "llama-82bb485-pk5f3c2a1b-linux-x86_64-cuda12-sm60-61-75-86"
    win = json.loads(
        (
            make_build(tmp_path / "c", name="win-cuda", os_name="windows", cuda=True) / "build-info.json"
        ).read_text()
    )
    assert archive_name(win) == ("llama-82bb485-pk5f3c2a1b-windows-x86_64-cuda12-sm60-61-75-86", ".zip")


def test_variant_reads_arch_spellings() -> None:
    info = {
        "recipe": {"name": "x"},
        "tools": {"nvcc": "Cuda compilation tools, release 13.0"},
        "cuda": {"archs": ["86-real", "sm_75", "120a-real", "75-virtual"], "nvcc": None},
    }
    assert variant_name(info) == "cuda13-sm75-86-120a"


def _info(**over: object) -> dict[str, object]:
    info: dict[str, object] = {
        "recipe": {"name": "cpu-rpc"},
        "tools": {"nvcc": None},
        "cuda": None,
        "upstream": {"commit": "82bb48500a9a6b3374da2cf5811695369278e4d3"},
        "series_hash": "5f3c2a1b" + "0" * 56,
        "platform": {"os": "linux", "arch": "aarch64"},
    }
    info.update(over)
    return info


def test_cpu_names_use_the_recipe_and_the_platform() -> None:
    assert variant_name(_info()) == "cpu-rpc"
    assert archive_name(_info()) == ("llama-82bb485-pk5f3c2a1b-linux-aarch64-cpu-rpc", ".tar.gz")
    win = _info(platform={"os": "windows", "arch": "x86_64"}, recipe={"name": "windows-cpu-rpc"})
    assert archive_name(win) == ("llama-82bb485-pk5f3c2a1b-windows-x86_64-windows-cpu-rpc", ".zip")


@pytest.mark.parametrize(
    ("cuda", "tools", "want"),
    [
        ({"archs": [86, 61, "sm_61", "compute_86"], "nvcc": "12.4"}, {}, "cuda12-sm61-86"),  # deduplicated
        ({"archs": [86], "nvcc": None}, {"nvcc": "V11.8.89"}, "cuda11-sm86"),  # from tools.nvcc
        ({"archs": [86], "nvcc": "13"}, {}, "cuda13-sm86"),  # a bare major version
        ({"archs": ["120a-real", "120-real", "90"], "nvcc": "12.8.61"}, {}, "cuda12-sm90-120-120a"),
    ],
)
def test_cuda_variants(cuda: dict[str, object], tools: dict[str, object], want: str) -> None:
    assert variant_name(_info(cuda=cuda, tools=tools)) == want


@pytest.mark.parametrize(
    ("cuda", "message"),
    [
        ({"archs": [], "nvcc": "12.4"}, "build-info.json: cuda.archs is empty"),
        ({"archs": ["x86"], "nvcc": "12.4"}, "build-info.json: cuda.archs entry 'x86' is not a CUDA arch"),
        ({"archs": [86], "nvcc": "weird"}, "build-info.json: cannot tell the CUDA version from nvcc 'weird'"),
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


def test_names_carry_the_build_number_when_recorded() -> None:
    info = _info(upstream={"commit": "82bb48500a9a6b3374da2cf5811695369278e4d3", "build_number": 10309})
    assert archive_name(info) == ("llama-b10309-82bb485-pk5f3c2a1b-linux-aarch64-cpu-rpc", ".tar.gz")
    # an older build-info without it keeps the old name (old manifests still verify)
    assert archive_name(_info())[0] == "llama-82bb485-pk5f3c2a1b-linux-aarch64-cpu-rpc"


@pytest.mark.parametrize("bad", [0, -3, True, "10309", 1.5, 10**12])
def test_a_bad_build_number_is_refused(bad: object) -> None:
    info = _info(upstream={"commit": "82bb48500a9a6b3374da2cf5811695369278e4d3", "build_number": bad})
    with pytest.raises(ReleaseError, match="build_number"):
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
