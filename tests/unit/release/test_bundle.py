"""The CUDA runtime bundle (release.bundle): wheel selection, taking the libraries out of
fake wheels, the runtime archive beside the build, verify, and the refusals."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from patchkit.core.errors import ReleaseError
from patchkit.release.bundle import (
    RuntimeSpec,
    distributions,
    pip_platforms,
    runtime_spec,
    select_wheels,
    wheel_versions,
)
from patchkit.release.verify import verify_dir
from patchkit.spec.buildinfo import BuildInfo
from tests.fixtures.buildinfo import build_info_json
from tests.fixtures.elf import make_elf
from tests.fixtures.release import do_release, make_build
from tests.fixtures.wheels import LICENSE_TEXT, make_wheel, runtime_wheels, set_binary

LINUX = "manylinux2014_x86_64"

CUDA_LIB = "bin/libggml-cuda.so"


def cuda_build(tmp_path: Path, *needed: str) -> Path:
    build = make_build(tmp_path, name="cuda-pascal-ampere", cuda=True)  # nvcc 12.4
    set_binary(
        build,
        CUDA_LIB,
        make_elf(
            needed=needed or ("libcudart.so.12", "libcublas.so.12", "libcuda.so.1", "libc.so.6"),
            runpath="$ORIGIN",
            soname="libggml-cuda.so",
        ),
    )
    return build


def _cuda_info(nvcc: str, tools: dict[str, str | None] | None = None) -> BuildInfo:
    cuda = {"archs": [86], "cmake_architectures": "86-real", "nvcc": nvcc}
    return BuildInfo.from_json(build_info_json(cuda=cuda, tools=tools or {}))


def test_spec_names_and_platforms() -> None:
    info = _cuda_info("13.0")
    spec = runtime_spec(info)
    assert (spec.major, spec.minor, spec.name) == (13, 0, "cudart-llama-linux-x86_64-cuda13.0")
    assert distributions(spec) == ("nvidia-cuda-runtime", "nvidia-cublas")
    assert distributions(RuntimeSpec(os="windows", arch="x86_64", major=12, minor=4)) == (
        "nvidia-cuda-runtime-cu12",
        "nvidia-cublas-cu12",
    )
    plats = pip_platforms(spec)
    assert "manylinux_2_27_x86_64" in plats and "manylinux2014_x86_64" in plats
    assert pip_platforms(RuntimeSpec(os="windows", arch="x86_64", major=12, minor=4)) == ["win_amd64"]
    assert runtime_spec(_cuda_info("", {"nvcc": "V12.4.131"})).version == "12.4"  # from the tools
    with pytest.raises(ReleaseError, match="cannot tell the CUDA version"):
        runtime_spec(_cuda_info(""))


def test_select_wheels_takes_the_toolkits_minor_and_platform(tmp_path: Path) -> None:
    spec = RuntimeSpec(os="linux", arch="x86_64", major=13, minor=0)
    runtime_wheels(tmp_path, major=13, minor=0)
    make_wheel(tmp_path, "nvidia-cuda-runtime", "13.5.37", {})  # another minor: not taken
    make_wheel(tmp_path, "nvidia-cuda-runtime", "13.0.99", {}, plat="win_amd64")  # another OS
    make_wheel(tmp_path, "nvidia-cuda-runtime", "13.0.48", {})  # older patch release
    got = [p.name for p in select_wheels(tmp_path, spec)]
    assert got == [
        "nvidia_cuda_runtime-13.0.96-py3-none-manylinux_2_27_x86_64.whl",
        "nvidia_cublas-13.0.2.14-py3-none-manylinux_2_27_x86_64.whl",
    ]
    with pytest.raises(ReleaseError, match=r"no nvidia-cuda-runtime-cu12 12\.4\.\* wheel"):
        select_wheels(tmp_path, RuntimeSpec(os="linux", arch="x86_64", major=12, minor=4))


def test_release_bundles_the_imported_runtime_beside_the_build(tmp_path: Path) -> None:
    build = cuda_build(tmp_path / "a")
    wheels = tmp_path / "wheels"
    runtime_wheels(wheels, major=12, minor=4)
    dist = tmp_path / "dist"
    r = do_release(build, dist, runtime_wheels=wheels)
    assert r.runtime == dist / "cudart-llama-linux-x86_64-cuda12.4.tar.gz"
    manifest = json.loads(r.manifest.read_text())
    assert manifest["runtime"]["files"] == [
        "LICENSE.nvidia-cublas-cu12.txt",
        "LICENSE.nvidia-cuda-runtime-cu12.txt",
        "bin/libcublas.so.12",
        "bin/libcublasLt.so.12",
        "bin/libcudart.so.12",
    ]
    assert manifest["imports"] == {"driver": ["libcuda.so.1"], "system": ["libc.so.6"]}
    rt = json.loads((dist / "cudart-llama-linux-x86_64-cuda12.4.manifest.json").read_text())
    assert rt["kind"] == "cuda-runtime" and rt["cuda"] == {"version": "12.4", "major": 12}
    assert [w["version"] for w in rt["wheels"]] == ["12.4.96", "12.4.2.14"]
    assert {f["path"]: f["member"] for f in rt["files"]}[
        "bin/libcublasLt.so.12"
    ] == "nvidia/cu12/lib/libcublasLt.so.12"
    assert "libnvblas" not in json.dumps(rt)  # only what the build imports (and it imports)
    sums = (dist / "SHA256SUMS").read_text()
    assert "cudart-llama-linux-x86_64-cuda12.4.tar.gz" in sums
    assert verify_dir(dist).differences == ()
    # a second CUDA recipe of the same toolkit shares the runtime archive
    other = cuda_build(tmp_path / "b")
    set_binary(other, "bin/llama-cli", make_elf(runpath="$ORIGIN") + b" another build")
    info = json.loads((other / "build-info.json").read_text())
    info["recipe"]["name"] = "cuda-turing-ampere"
    info["cuda"]["archs"] = [75, 86]
    (other / "build-info.json").write_text(json.dumps(info))
    r2 = do_release(other, dist, runtime_wheels=wheels)
    assert r2.runtime == r.runtime
    assert verify_dir(dist).differences == ()


def test_verify_catches_a_missing_or_changed_runtime(tmp_path: Path) -> None:
    build = cuda_build(tmp_path)
    wheels = tmp_path / "wheels"
    runtime_wheels(wheels, major=12, minor=4)
    dist = tmp_path / "dist"
    r = do_release(build, dist, runtime_wheels=wheels)
    assert r.runtime is not None
    r.runtime.write_bytes(r.runtime.read_bytes() + b"\0")
    diffs = verify_dir(dist).differences
    assert any(
        "the CUDA runtime archive cudart-llama-linux-x86_64-cuda12.4.tar.gz has sha256" in d for d in diffs
    ), diffs
    r.runtime.unlink()
    diffs = verify_dir(dist).differences
    assert any(
        "the CUDA runtime archive it names, cudart-llama-linux-x86_64-cuda12.4.tar.gz, is missing" in d
        for d in diffs
    ), diffs


def test_no_bundle_runtime_refuses_a_build_that_needs_it(tmp_path: Path) -> None:
    build = cuda_build(tmp_path)
    with pytest.raises(ReleaseError, match=r"bin/libggml-cuda\.so needs libcudart\.so\.12"):
        do_release(build, tmp_path / "dist", bundle_runtime=False)
    assert not (tmp_path / "dist").exists()  # nothing written


def test_a_build_without_runtime_imports_gets_no_bundle(tmp_path: Path) -> None:
    build = cuda_build(tmp_path, "libc.so.6", "libcuda.so.1")  # cudart linked statically
    r = do_release(build, tmp_path / "dist", runtime_wheels=tmp_path)
    assert r.runtime is None and "no runtime bundle" in r.note
    assert json.loads(r.manifest.read_text())["runtime"] is None


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"tamper": "nvidia/cu12/lib/libcudart.so.12"}, "does not match the sha256 in the wheel's RECORD"),
        ({"license_text": None}, "has no licence file"),
        ({"extra_names": ("../evil.so",)}, r"member '\.\./evil\.so'"),
        ({"extra_names": ("/etc/evil",)}, "an absolute name"),
        ({"extra_names": ("a\\b.so",)}, "a backslash in the name"),
    ],
)
def test_hostile_wheels_are_refused(tmp_path: Path, kw: dict[str, object], match: str) -> None:
    build = cuda_build(tmp_path)
    wheels = tmp_path / "wheels"
    runtime_wheels(wheels, major=12, minor=4, **kw)
    with pytest.raises(ReleaseError, match=match):
        do_release(build, tmp_path / "dist", runtime_wheels=wheels)
    assert not (tmp_path / "dist").exists()


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_a_duplicated_wheel_library_is_refused(tmp_path: Path) -> None:
    build = cuda_build(tmp_path)
    wheels = tmp_path / "wheels"
    rt, _ = runtime_wheels(wheels, major=12, minor=4)
    with zipfile.ZipFile(rt, "a") as zf:  # a second copy appended after RECORD was written
        zf.writestr("nvidia/cu12/lib/libcudart.so.12", make_elf())
    with pytest.raises(ReleaseError):
        do_release(build, tmp_path / "dist", runtime_wheels=wheels)


def test_odd_members_elsewhere_in_a_wheel_are_left(tmp_path: Path) -> None:
    build = cuda_build(tmp_path)
    wheels = tmp_path / "wheels"
    runtime_wheels(wheels, major=12, minor=4, extra_names=("top-level-file", "nvidia/x"))
    r = do_release(build, tmp_path / "dist", runtime_wheels=wheels)
    assert r.runtime is not None


def test_the_licence_text_ships(tmp_path: Path) -> None:
    import tarfile

    build = cuda_build(tmp_path)
    wheels = tmp_path / "wheels"
    runtime_wheels(wheels, major=12, minor=4)
    r = do_release(build, tmp_path / "dist", runtime_wheels=wheels)
    with tarfile.open(r.runtime) as tar:
        names = tar.getnames()
        f = tar.extractfile("cudart-llama-linux-x86_64-cuda12.4/LICENSE.nvidia-cublas-cu12.txt")
        assert f is not None and f.read().decode() == LICENSE_TEXT
    assert "cudart-llama-linux-x86_64-cuda12.4/bin/libcudart.so.12" in names


def test_download_runs_pip_for_the_target_platform(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from patchkit.core.proc import RunResult
    from patchkit.release import bundle

    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    calls: list[list[str]] = []

    def fake_run(args: list[str], **kw: object) -> RunResult:
        calls.append([str(a) for a in args])
        dest = Path(args[args.index("-d") + 1])
        runtime_wheels(dest, major=13, minor=0)
        return RunResult(args=tuple(args), returncode=0, stdout="", stderr="", seconds=0.1)

    monkeypatch.setattr(bundle.proc, "run", fake_run)
    spec = RuntimeSpec(os="linux", arch="x86_64", major=13, minor=0)
    got = bundle.download_wheels(spec)
    assert [p.name.split("-")[0] for p in got] == ["nvidia_cuda_runtime", "nvidia_cublas"]
    (args,) = calls
    assert args[1:4] == ["-m", "pip", "download"] and "--no-deps" in args
    assert args[args.index("--only-binary") + 1] == ":all:"
    assert "manylinux_2_27_x86_64" in args and "manylinux2014_x86_64" in args
    assert args[-2:] == ["nvidia-cuda-runtime==13.0.*", "nvidia-cublas==13.0.*"]
    assert got[0].parent == tmp_path / "cache" / "wheels" / "linux-x86_64-cuda13.0"

    def failing(args: list[str], **kw: object) -> RunResult:
        return RunResult(
            args=tuple(args),
            returncode=1,
            stdout="",
            stderr="ERROR: No matching distribution found",
            seconds=0.1,
        )

    monkeypatch.setattr(bundle.proc, "run", failing)
    with pytest.raises(ReleaseError, match="pip could not download") as e:
        bundle.download_wheels(RuntimeSpec(os="windows", arch="x86_64", major=12, minor=9))
    assert "--runtime-wheels" in str(e.value.hint)


def test_cuda_11_takes_cublas_11_11_for_the_11_8_toolkit() -> None:
    """CUDA 11's cuBLAS numbers its minors apart from the toolkit (11.8 ships cuBLAS 11.11):
    `==11.8.*` finds no nvidia-cublas-cu11 on PyPI (11.10.3.66 and 11.11.3.6 only)."""

    def spec(major: int, minor: int) -> RuntimeSpec:
        return RuntimeSpec(os="linux", arch="x86_64", major=major, minor=minor)

    assert wheel_versions(spec(11, 8)) == (
        ("nvidia-cuda-runtime-cu11", "11.8"),
        ("nvidia-cublas-cu11", "11.11"),
    )
    assert wheel_versions(spec(11, 7))[1] == ("nvidia-cublas-cu11", "11.10")
    assert wheel_versions(spec(12, 4)) == (
        ("nvidia-cuda-runtime-cu12", "12.4"),
        ("nvidia-cublas-cu12", "12.4"),
    )
    assert wheel_versions(spec(13, 0))[1] == ("nvidia-cublas", "13.0")
    with pytest.raises(ReleaseError, match="for 11.7 and 11.8 only, not 11.4") as e:
        wheel_versions(spec(11, 4))
    assert "--no-bundle-runtime" in e.value.hint


def _cu11_wheels(folder: Path) -> None:
    """NVIDIA's CUDA 11.8 wheels as they are laid out (nvidia/cuda_runtime/lib/libcudart.so.11.0,
    nvidia/cublas/lib/libcublas.so.11 + libcublasLt.so.11 + libnvblas.so.11)."""
    make_wheel(
        folder,
        "nvidia-cuda-runtime-cu11",
        "11.8.89",
        {
            "nvidia/cuda_runtime/lib/libcudart.so.11.0": make_elf(
                needed=("libc.so.6", "libdl.so.2"), soname="libcudart.so.11.0"
            ),
            "nvidia/cuda_runtime/lib/libOpenCL.so.1": make_elf(soname="libOpenCL.so.1"),
        },
        plat=LINUX,
    )
    make_wheel(
        folder,
        "nvidia-cublas-cu11",
        "11.11.3.6",
        {
            "nvidia/cublas/lib/libcublas.so.11": make_elf(
                needed=("libcublasLt.so.11", "libc.so.6"), runpath="$ORIGIN", soname="libcublas.so.11"
            ),
            "nvidia/cublas/lib/libcublasLt.so.11": make_elf(
                needed=("libc.so.6",), soname="libcublasLt.so.11"
            ),
            "nvidia/cublas/lib/libnvblas.so.11": make_elf(soname="libnvblas.so.11"),
        },
        plat=LINUX,
    )
    make_wheel(folder, "nvidia-cublas-cu11", "11.10.3.66", {}, plat=LINUX)  # CUDA 11.7's


def test_release_bundles_the_cuda_11_8_runtime(tmp_path: Path) -> None:
    build = cuda_build(tmp_path / "a", "libcudart.so.11.0", "libcublas.so.11", "libcuda.so.1", "libc.so.6")
    info = json.loads((build / "build-info.json").read_text())
    info["cuda"]["nvcc"] = "11.8.89"
    (build / "build-info.json").write_text(json.dumps(info))
    wheels = tmp_path / "wheels"
    _cu11_wheels(wheels)
    dist = tmp_path / "dist"
    r = do_release(build, dist, runtime_wheels=wheels)
    assert r.runtime == dist / "cudart-llama-linux-x86_64-cuda11.8.tar.gz"
    manifest = json.loads(r.manifest.read_text())
    assert manifest["runtime"]["files"] == [
        "LICENSE.nvidia-cublas-cu11.txt",
        "LICENSE.nvidia-cuda-runtime-cu11.txt",
        "bin/libcublas.so.11",
        "bin/libcublasLt.so.11",
        "bin/libcudart.so.11.0",
    ]
    rt = json.loads((dist / "cudart-llama-linux-x86_64-cuda11.8.manifest.json").read_text())
    assert [(w["distribution"], w["version"]) for w in rt["wheels"]] == [
        ("nvidia-cuda-runtime-cu11", "11.8.89"),
        ("nvidia-cublas-cu11", "11.11.3.6"),
    ]
    assert verify_dir(dist).differences == ()
