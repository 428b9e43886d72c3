"""The CUDA build plan (builder.cuda.plan): the refusal before configuring, the CMake defines,
the loader path, and the cubin proof, on toolkits described in memory."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from patchkit.builder.cuda.plan import (
    build_env,
    build_info,
    cmake_defines,
    cuda_files,
    parse_cuobjdump_list,
    preflight,
    prepare,
    prove_archs,
    toolkits_for,
)
from patchkit.builder.cuda.toolkit import (
    HostCompiler,
)
from patchkit.builder.problems import CudaArchsUnbuildable, ProgramMissing
from patchkit.core.errors import CudaError, RecipeError, ToolMissing
from patchkit.spec.cuda import CudaArchs
from tests.fixtures.cuda import (
    GXX_12,
    LIST_ELF,
    LIST_PTX,
    NO_CODE,
    NVCC_12_4,
    FakeRun,
    archs_of,
    host,
    make_exe,
    make_toolkit_dir,
    nvcc_answers,
    recipe_from,
    toolkit,
)


def test_toolkits_for_names_the_release_range() -> None:
    assert toolkits_for([60, 61, 75, 86]) == "CUDA 11.1-12.9"
    assert toolkits_for([60, 89]) == "CUDA 11.8-12.9"
    assert toolkits_for([75, 86]) == "CUDA 11.1-13.0+"
    assert toolkits_for([35, 120]) == "no single CUDA release"


def test_cuobjdump_list_parsing() -> None:
    assert parse_cuobjdump_list(LIST_ELF) == ["sm_75", "sm_86"]
    assert parse_cuobjdump_list(LIST_PTX) == ["compute_86"]
    assert parse_cuobjdump_list(LIST_ELF + LIST_PTX + "ELF file    3: x.3.sm_120a.cubin\n") == [
        "sm_75",
        "sm_86",
        "compute_86",
        "sm_120a",
    ]
    assert parse_cuobjdump_list(NO_CODE) == []


# --------------------------------------------------------------------------------------
# preflight: the refusal before configuring


RIG = archs_of("pascal", "turing", 86)


def test_cuda13_with_pascal_is_refused_with_what_to_do() -> None:
    with pytest.raises(CudaError) as e:
        preflight(RIG, toolkit((13, 0, 88)))
    err = e.value
    assert err.exit_code == 13
    assert err.problem == CudaArchsUnbuildable(
        toolkit="CUDA 13.0 (/opt/cuda-13.0)",
        missing="sm_60 (pascal), sm_61 (pascal)",
        why=" (CUDA 13 dropped every sm below 75)",
        wanted="sm_60 (pascal), sm_61 (pascal), sm_75 (turing), sm_86 (ampere)",
        toolkits="CUDA 11.1-12.9",
        host_limits="CUDA 11.8 accepts gcc <= 11; CUDA 12.9 accepts gcc <= 14",
        droppable=("pascal",),
    )


def test_refusal_uses_nvccs_own_list_over_the_table() -> None:
    tk = toolkit((12, 4, 131), gpu_codes=frozenset({75, 86}))
    with pytest.raises(CudaError) as e:
        preflight(RIG, tk)
    assert isinstance(e.value.problem, CudaArchsUnbuildable)
    assert e.value.problem.missing == "sm_60 (pascal), sm_61 (pascal)"


def test_too_new_arch_is_refused() -> None:
    with pytest.raises(CudaError) as e:
        preflight(archs_of("ampere", "ada"), toolkit((11, 1, 105)))
    assert isinstance(e.value.problem, CudaArchsUnbuildable)
    assert (e.value.problem.missing, e.value.problem.why) == (
        "sm_89 (ada)",
        " (they are newer than this toolkit)",
    )
    assert e.value.problem.droppable == ("ada",)


def test_too_new_gcc_is_refused_before_configuring() -> None:
    with pytest.raises(CudaError) as e:
        preflight(RIG, toolkit((11, 8, 89), host_compiler=host(version=(12, 2, 0))))
    assert "accepts gcc <= 11" in e.value.message and "12.2.0" in e.value.message
    assert 'cuda.host_compiler = "g++-11"' in e.value.hint


def test_missing_cublas_is_refused_with_the_wheel_to_install() -> None:
    with pytest.raises(CudaError, match="has no cuBLAS") as e:
        preflight(archs_of("turing", "ampere"), toolkit((13, 0, 88), cublas=None))
    assert "pip install nvidia-cublas" in e.value.hint
    notes = preflight(archs_of("turing"), toolkit((13, 0, 88), cublas=None), need_cublas=False)
    assert any("no cuBLAS" in n for n in notes)


def test_missing_cuobjdump_or_host_compiler_is_a_missing_tool() -> None:
    with pytest.raises(ToolMissing, match="cuobjdump") as e:
        preflight(RIG, toolkit((12, 4, 131), cuobjdump=False))
    assert isinstance(e.value.problem, ProgramMissing) and e.value.problem.program == "cuobjdump"
    gone = HostCompiler(command="g++-11", path=None, source="recipe", explicit=True)
    with pytest.raises(ToolMissing, match="'g\\+\\+-11' \\(recipe\\) is not on PATH"):
        preflight(RIG, toolkit((11, 8, 89), host_compiler=gone))


def test_preflight_notes_for_a_buildable_setup() -> None:
    tk = toolkit((12, 4, 131), cublas="wheel", libcuda=False)
    notes = preflight(RIG, tk)
    assert any("GGML_CUDA_NO_VMM=ON" in n for n in notes)
    assert any("cuBLAS from the pip wheel" in n for n in notes)
    assert preflight(RIG, toolkit((12, 4, 131))) == []


def test_prepare_runs_validate_find_and_preflight(tmp_path: Path) -> None:
    root = make_toolkit_dir(tmp_path / "cuda-12.4", cublas=True, cuobjdump=True)
    make_exe(tmp_path / "bin" / "g++")
    run = FakeRun(nvcc_answers(NVCC_12_4, root) | {("g++", "--version"): (0, GXX_12)})
    r = recipe_from(tmp_path, '[build]\ntargets = ["t"]\n[cuda]\narchs = ["pascal", "turing", 86]\n')
    plan = prepare(r, cuda_root=root, env={"PATH": str(tmp_path / "bin")}, ccache=False, run=run, sites=[])
    assert plan.archs.sms == (60, 61, 75, 86)
    assert plan.toolkit.version == (12, 4, 131)
    assert plan.defines["CUDAToolkit_ROOT"] == root.as_posix()
    assert plan.defines["GGML_CUDA_NO_VMM"] == "ON"
    assert plan.notes == (
        "no libcuda stub in the toolkit and no driver library: building with "
        "GGML_CUDA_NO_VMM=ON (no virtual-memory pools)",
    )
    with pytest.raises(RecipeError, match="has no \\[cuda\\] section"):
        prepare(recipe_from(tmp_path, '[build]\ntargets = ["t"]\n'), run=run, sites=[])


def test_windows_toolkit_needs_msvc() -> None:
    with pytest.raises(CudaError, match="needs MSVC"):
        preflight(RIG, toolkit((12, 4, 131), windows=True))
    assert (
        preflight(RIG, toolkit((12, 4, 131), windows=True, host_compiler=host("msvc", (19, 38, 33130)))) == []
    )


# --------------------------------------------------------------------------------------
# CMake defines


def test_cmake_defines_for_a_wheel_cublas_stubless_toolkit(tmp_path: Path) -> None:
    r = recipe_from(tmp_path, '[build]\ntargets = ["t"]\n[cuda]\narchs = ["turing", 86]\n')
    assert r.cuda is not None
    archs = r.cuda.archs
    tk = toolkit(
        (13, 0, 88),
        cublas="wheel",
        libcuda=False,
        host_compiler=host(explicit=True, source="recipe", path="/usr/bin/g++-12"),
    )
    d = cmake_defines(r, archs, tk, ccache="/usr/bin/ccache")
    assert d == {
        "GGML_CUDA": "ON",
        "GGML_NATIVE": "OFF",
        "CMAKE_CUDA_ARCHITECTURES": "75-real;86-real;86-virtual",
        "CMAKE_CUDA_COMPILER": "/opt/cuda-13.0/bin/nvcc",
        "CUDAToolkit_ROOT": "/opt/cuda-13.0",
        "CMAKE_CUDA_HOST_COMPILER": "/usr/bin/g++-12",
        "GGML_CUDA_FA_ALL_QUANTS": "OFF",
        "GGML_CUDA_NO_VMM": "ON",
        "CUDA_cublas_LIBRARY": "/site/nvidia/cu13/lib/libcublas.so.13",
        "CUDA_cublasLt_LIBRARY": "/site/nvidia/cu13/lib/libcublasLt.so.13",
        "CMAKE_CUDA_STANDARD_INCLUDE_DIRECTORIES": "/site/nvidia/cu13/include",
        "CMAKE_CUDA_COMPILER_LAUNCHER": "/usr/bin/ccache",
    }


def test_build_env_puts_toolkit_and_wheel_libs_on_the_loader_path(tmp_path: Path) -> None:
    root = tmp_path / "cuda"
    (root / "lib64").mkdir(parents=True)
    tk = dataclasses.replace(toolkit((13, 0, 88), cublas="wheel"), root=root)
    assert build_env(tk, {"LD_LIBRARY_PATH": "/x"}) == {
        "LD_LIBRARY_PATH": f"{root / 'lib64'}:/site/nvidia/cu13/lib:/x"
    }
    assert build_env(dataclasses.replace(tk, windows=True), {}) == {}
    bare = dataclasses.replace(toolkit((12, 4, 131)), root=tmp_path / "none")
    assert build_env(bare, {}) == {}


def test_cmake_defines_for_a_complete_toolkit(tmp_path: Path) -> None:
    r = recipe_from(tmp_path, '[build]\ntargets = ["t"]\n[cuda]\narchs = ["pascal"]\nfa_all_quants = true\n')
    assert r.cuda is not None
    d = cmake_defines(r, r.cuda.archs, toolkit((12, 4, 131)), ccache=False)
    assert d["GGML_CUDA_FA_ALL_QUANTS"] == "ON"
    assert d["CMAKE_CUDA_ARCHITECTURES"] == "60-real;61-real;61-virtual"
    for absent in (
        "GGML_CUDA_NO_VMM",
        "CUDA_cublas_LIBRARY",
        "CMAKE_CUDA_HOST_COMPILER",
        "CMAKE_CUDA_COMPILER_LAUNCHER",
    ):
        assert absent not in d


# --------------------------------------------------------------------------------------
# the cubin proof


ARCHS_75_86 = archs_of(75, 86)


def _cuobjdump_run(lib_elf: str = LIST_ELF, lib_ptx: str = LIST_PTX) -> FakeRun:
    class Run(FakeRun):
        def __call__(self, args: Sequence[str]) -> tuple[int, str]:
            self.calls.append(list(args))
            if Path(args[2]).name == "fixmain":
                return 255, NO_CODE
            return 0, lib_elf if args[1] == "--list-elf" else lib_ptx

    return Run({})


def test_prove_archs_lists_cubins_per_file() -> None:
    base = Path("/b")
    run = _cuobjdump_run()
    got = prove_archs(
        [base / "bin/libfixcuda.so", base / "bin/fixmain"],
        ARCHS_75_86,
        Path("/x/cuobjdump"),
        base=base,
        run=run,
    )
    assert got == {"bin/libfixcuda.so": ["sm_75", "sm_86", "compute_86"], "bin/fixmain": []}
    assert run.calls[0] == ["/x/cuobjdump", "--list-elf", "/b/bin/libfixcuda.so"]


def test_build_info_records_archs_toolkit_and_cubins() -> None:
    tk = toolkit((12, 4, 131), cublas="wheel", libcuda=False)
    cubins = {"bin/libggml-cuda.so": ["sm_75", "sm_86", "compute_86"]}
    info = build_info(ARCHS_75_86, tk, cubins, ["n"])
    assert json.loads(json.dumps(info.to_json())) == {
        "archs": [75, 86],
        "ptx": 86,
        "requested": ["75", "86"],
        "cmake_architectures": "75-real;86-real;86-virtual",
        "nvcc": "12.4.131",
        "proven": cubins,
        "toolkit": {
            "version": "12.4.131",
            "root": "/opt/cuda-12.4",
            "nvcc": "/opt/cuda-12.4/bin/nvcc",
            "host_compiler": {"kind": "gcc", "version": "12.2.0", "path": "/usr/bin/g++"},
            "cublas": "wheel",
            "libcuda": None,
            "no_vmm": True,
        },
        "notes": ["n"],
    }


def test_prove_archs_fails_when_a_requested_sm_is_missing() -> None:
    with pytest.raises(CudaError) as e:
        prove_archs(
            [Path("/b/bin/libfixcuda.so")],
            archs_of("pascal", 75, 86),
            Path("cuobjdump"),
            run=_cuobjdump_run(),
        )
    assert e.value.exit_code == 13
    assert "libfixcuda.so lacks sm_60 (pascal), sm_61 (pascal)" in e.value.message
    assert "60-real;61-real;75-real;86-real;86-virtual" in e.value.hint


def test_cuda_files_finds_the_backend_library_and_executables(tmp_path: Path) -> None:
    b = tmp_path / "build"
    (b / "bin").mkdir(parents=True)
    real = b / "bin" / "libggml-cuda.so.0.9.7"
    real.write_bytes(b"x")
    (b / "bin" / "libggml-cuda.so").symlink_to(real.name)
    (b / "bin" / "llama-server").write_bytes(b"x")
    (b / "bin" / "ggml-rpc-server.exe").write_bytes(b"x")
    (b / "ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir").mkdir(parents=True)
    (b / "ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/llama-server").write_bytes(b"x")
    got = cuda_files(b, ["llama-server", "ggml-rpc-server", "llama-bench"])
    assert [p.relative_to(b).as_posix() for p in got] == [
        "bin/libggml-cuda.so.0.9.7",
        "bin/llama-server",
        "bin/ggml-rpc-server.exe",
    ]


def test_prove_archs_fails_without_ptx_or_device_code() -> None:
    with pytest.raises(CudaError, match="PTX of sm_86"):
        prove_archs([Path("/b/lib.so")], ARCHS_75_86, Path("c"), run=_cuobjdump_run(lib_ptx=""))
    with pytest.raises(CudaError, match="no CUDA device code in fixmain"):
        prove_archs([Path("/b/bin/fixmain")], ARCHS_75_86, Path("c"), run=_cuobjdump_run())
    with pytest.raises(ToolMissing, match="cuobjdump"):
        prove_archs([Path("/b/lib.so")], ARCHS_75_86, None, run=_cuobjdump_run())


def test_prove_archs_accepts_arch_specific_variants() -> None:
    elf = "ELF file    1: l.1.sm_86.cubin\nELF file    2: l.2.sm_120a.cubin\n"
    archs = CudaArchs(sms=(86, 120), ptx=120, cmake="86-real;120-real;120-virtual", requested=())
    got = prove_archs(
        [Path("/l.so")],
        archs,
        Path("c"),
        run=_cuobjdump_run(lib_elf=elf, lib_ptx="PTX file    1: l.1.sm_120a.ptx\n"),
    )
    assert got == {"l.so": ["sm_86", "sm_120a", "compute_120a"]}
