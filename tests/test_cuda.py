"""CUDA: families -> archs, the toolkit table, nvcc/compiler output parsing, recipe checks,
the refusal before configuring, CMake defines, the cubin proof and `patchkit doctor`.

Unit tests replay real tool outputs through a fake Runner and fake toolkit folders.
The integration tests compile tests/fixtures/cuda_project (one .cu file) for two archs through
the real CMake path and read the cubins back with cuobjdump; they skip without nvcc.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from patchkit.build.cuda.plan import (
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
from patchkit.build.cuda.toolkit import (
    TOOLKIT_LIMITS,
    Cublas,
    CudaToolkit,
    HostCompiler,
    find_cublas,
    find_cuobjdump,
    find_toolkit,
    limits_for,
    parse_gpu_codes,
    parse_host_compiler,
    parse_nvcc_root,
    parse_nvcc_version,
)
from patchkit.cli import main
from patchkit.core.errors import CudaError, RecipeError, ToolMissing
from patchkit.doctor.survey import Tool, build_report, recipe_verdict
from patchkit.model.cuda import FAMILIES, CudaArchs, resolve_archs
from patchkit.model.recipe import CudaSpec, Recipe, load_recipe
from patchkit.model.series import Series, load_series
from tests.fixtures.paths import CUDA_PROJECT, REPO

FIXTURE = CUDA_PROJECT

# Real `nvcc --version` outputs.
NVCC_13_0 = """\
nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""
NVCC_12_4 = """\
nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2024 NVIDIA Corporation
Built on Thu_Mar_28_02:18:24_PDT_2024
Cuda compilation tools, release 12.4, V12.4.131
Build cuda_12.4.r12.4/compiler.34097967_0
"""
NVCC_11_8 = """\
nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2022 NVIDIA Corporation
Built on Wed_Sep_21_10:33:58_PDT_2022
Cuda compilation tools, release 11.8, V11.8.89
Build cuda_11.8.r11.8/compiler.31833905_0
"""
NVCC_10_1 = """\
nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2019 NVIDIA Corporation
Built on Sun_Jul_28_19:07:16_PDT_2019
Cuda compilation tools, release 10.1, V10.1.243
"""
# `nvcc --list-gpu-code` of CUDA 13.0
GPU_CODES_13_0 = "\n".join(
    ["sm_75", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_100", "sm_110",
     "sm_103", "sm_120", "sm_121", "compute_75", "compute_80", "compute_86"]) + "\n"
GXX_12 = "g++ (Debian 12.2.0-14+deb12u1) 12.2.0\nCopyright (C) 2022 Free Software Foundation, Inc.\n"
GXX_11 = ("g++-11 (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0\n"
          "Copyright (C) 2021 Free Software Foundation, Inc.\n")
CLANG_14 = "Debian clang version 14.0.6\nTarget: x86_64-pc-linux-gnu\nThread model: posix\n"
CL_19_38 = ("Microsoft (R) C/C++ Optimizing Compiler Version 19.38.33130 for x64\r\n"
            "Copyright (C) Microsoft Corporation.  All rights reserved.\r\n\r\n"
            "usage: cl [ option... ] filename... [ /link linkoption... ]\r\n")
# cuobjdump 13.5 on the fixture library built for 75-real;86-real;86-virtual
LIST_ELF = "ELF file    1: libfixcuda.1.sm_75.cubin\nELF file    2: libfixcuda.2.sm_86.cubin\n"
LIST_PTX = "PTX file    1: libfixcuda.1.sm_86.ptx\n"
NO_CODE = "cuobjdump info    : File '/b/bin/fixmain' does not contain device code\n"


# --------------------------------------------------------------------------------------
# helpers

def archs_of(*archs: str | int, source: str = "recipe") -> CudaArchs:
    return resolve_archs([str(a) for a in archs], source=source)


def spec(*archs: str | int, **kw: object) -> CudaSpec:
    return CudaSpec(archs=archs_of(*archs), **kw)  # type: ignore[arg-type]


def empty_series(tmp_path: Path) -> Series:
    d = tmp_path / "patches"
    d.mkdir(exist_ok=True)
    (d / "series").write_text("# series\n")
    return load_series(d)


def recipe_from(tmp_path: Path, body: str, name: str = "r") -> Recipe:
    proj = tmp_path / "proj"
    (proj / "recipes").mkdir(parents=True, exist_ok=True)
    path = proj / "recipes" / f"{name}.toml"
    path.write_text(f'name = "{name}"\n[upstream]\nurl = "u"\ncommit = "{"a" * 40}"\n' + body)
    return load_recipe(path, proj, empty_series(tmp_path))


def host(kind: str = "gcc", version: tuple[int, ...] = (12, 2, 0), *, explicit: bool = False,
         source: str = "default", path: str = "/usr/bin/g++") -> HostCompiler:
    return HostCompiler(command=Path(path).name, path=Path(path), kind=kind, version=version,
                        source=source, explicit=explicit)


def toolkit(version: tuple[int, int, int] = (13, 0, 88), *, cublas: str | None = "toolkit",
            libcuda: bool = True, cuobjdump: bool = True, gpu_codes: frozenset[int] | None = None,
            host_compiler: HostCompiler | None = None, windows: bool = False) -> CudaToolkit:
    root = Path(f"/opt/cuda-{version[0]}.{version[1]}")
    cb = None
    if cublas == "toolkit":
        cb = Cublas(library=root / "lib64/libcublas.so", lt_library=root / "lib64/libcublasLt.so",
                    include_dir=root / "include", source="toolkit")
    elif cublas == "wheel":
        w = Path("/site/nvidia/cu13")
        cb = Cublas(library=w / "lib/libcublas.so.13", lt_library=w / "lib/libcublasLt.so.13",
                    include_dir=w / "include", source="wheel")
    return CudaToolkit(root=root, nvcc=root / "bin/nvcc", version=version, source="test",
                   gpu_codes=gpu_codes, cublas=cb,
                   libcuda=root / "lib64/stubs/libcuda.so" if libcuda else None,
                   libcuda_kind="stub" if libcuda else None,
                   cuobjdump=root / "bin/cuobjdump" if cuobjdump else None,
                   host=host_compiler or host(), windows=windows)


class FakeRun:
    """A Runner that answers from a table of (program name, first arg) -> (rc, output)."""

    def __init__(self, answers: dict[tuple[str, str], tuple[int, str]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, args: Sequence[str]) -> tuple[int, str]:
        self.calls.append(list(args))
        key = (Path(args[0]).name, args[1] if len(args) > 1 else "")
        if key not in self.answers:
            raise AssertionError(f"unexpected command {args}")
        return self.answers[key]


def make_exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def make_toolkit_dir(root: Path, *, cublas: bool = False, stub: bool = False,
                     cuobjdump: bool = False) -> Path:
    make_exe(root / "bin" / "nvcc")
    if cuobjdump:
        make_exe(root / "bin" / "cuobjdump")
    if cublas:
        (root / "include").mkdir(parents=True, exist_ok=True)
        (root / "include" / "cublas_v2.h").write_text("")
        for n in ("libcublas.so", "libcublasLt.so"):
            (root / "lib64").mkdir(parents=True, exist_ok=True)
            (root / "lib64" / n).write_text("")
    if stub:
        (root / "lib64" / "stubs").mkdir(parents=True, exist_ok=True)
        (root / "lib64" / "stubs" / "libcuda.so").write_text("")
    return root


def nvcc_answers(version_text: str, root: Path, codes: str | None = None
                 ) -> dict[tuple[str, str], tuple[int, str]]:
    return {
        ("nvcc", "--version"): (0, version_text),
        ("nvcc", "--dryrun"): (0, f"#$ _NVVM_BRANCH_=nvvm\n#$ _HERE_={root}/bin\n#$ _THERE_={root}/bin\n"),
        ("nvcc", "--list-gpu-code"): (0, codes) if codes is not None else (1, "nvcc fatal"),
    }


# --------------------------------------------------------------------------------------
# families -> archs


def test_families_map_to_the_documented_sms() -> None:
    assert FAMILIES["pascal"] == (60, 61)
    assert FAMILIES["volta"] == (70,)
    assert FAMILIES["turing"] == (75,)
    assert FAMILIES["ampere"] == (80, 86)
    assert FAMILIES["ada"] == (89,)
    assert FAMILIES["hopper"] == (90,)


def test_rig_archs_get_real_sass_each_and_ptx_of_the_highest() -> None:
    a = archs_of("pascal", "turing", 86)
    assert a.sms == (60, 61, 75, 86)
    assert a.ptx == 86
    assert a.cmake == "60-real;61-real;75-real;86-real;86-virtual"
    assert a.names == ["sm_60", "sm_61", "sm_75", "sm_86"]


def test_families_and_numbers_merge_sorted_without_duplicates() -> None:
    a = archs_of("ampere", "sm_86", "Pascal", "compute_60", 89)
    assert a.sms == (60, 61, 80, 86, 89)
    assert a.cmake == "60-real;61-real;80-real;86-real;89-real;89-virtual"
    assert a.requested == ("ampere", "sm_86", "Pascal", "compute_60", "89")


@pytest.mark.parametrize(("word", "expect"), [
    ("pascall", 'did you mean "pascal"'),
    ("amper", 'did you mean "ampere"'),
    ("86-real", "not a GPU family or SM number"),
    ("sm_99", "sm_99 is not a CUDA architecture"),
    ("85", "sm_85 is not a CUDA architecture"),
])
def test_unknown_arch_names_are_recipe_errors(word: str, expect: str) -> None:
    with pytest.raises(RecipeError, match="cuda.archs") as e:
        archs_of("turing", word, source="x.toml")
    assert expect in e.value.message
    assert e.value.message.startswith("x.toml: cuda.archs[1]")
    assert e.value.exit_code == 3


# --------------------------------------------------------------------------------------
# the toolkit table


@pytest.mark.parametrize(("version", "has", "lacks"), [
    ((10, 0), {30, 60, 61, 70, 75}, {80, 86}),
    ((10, 2), {60, 75}, {80, 86}),
    ((11, 0), {35, 60, 80}, {30, 86}),
    ((11, 1), {60, 61, 75, 86}, {89}),
    ((11, 4), {87}, {89, 90}),
    ((11, 8), {60, 61, 75, 86, 89, 90}, {100, 120}),
    ((12, 0), {50, 60, 61, 90}, {35, 37, 100}),
    ((12, 4), {60, 61, 75, 86, 89, 90}, {100, 120}),
    ((12, 8), {60, 100, 120}, {103, 121}),
    ((12, 9), {60, 103, 121}, {110}),
    ((13, 0), {75, 80, 86, 89, 90, 110, 120}, {50, 60, 61, 70, 72}),
])
def test_toolkit_table_knows_what_each_release_compiles(version: tuple[int, int], has: set[int],
                                                        lacks: set[int]) -> None:
    lim = limits_for(version)
    assert lim is not None
    assert has <= lim.sms
    assert not (lacks & lim.sms)


@pytest.mark.parametrize(("version", "gcc"), [
    ((10, 0), 7), ((10, 2), 8), ((11, 0), 9), ((11, 1), 10), ((11, 8), 11), ((12, 0), 12),
    ((12, 4), 13), ((12, 6), 13), ((12, 8), 14), ((13, 0), 15),
])
def test_toolkit_table_knows_the_gcc_limits(version: tuple[int, int], gcc: int) -> None:
    lim = limits_for(version)
    assert lim is not None and lim.gcc_max == gcc


def test_toolkit_table_rows_in_between_and_beyond() -> None:
    assert limits_for((12, 7, 1)).version == (12, 6)  # type: ignore[union-attr]
    assert limits_for((11, 9)).version == (11, 8)  # type: ignore[union-attr]
    assert limits_for((13, 5)).version == (13, 0)  # type: ignore[union-attr]
    assert limits_for((14, 0)).version == (13, 0)  # type: ignore[union-attr]
    assert limits_for((9, 2)) is None
    versions = [r.version for r in TOOLKIT_LIMITS]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)


def test_toolkits_for_names_the_release_range() -> None:
    assert toolkits_for([60, 61, 75, 86]) == "CUDA 11.1-12.9"
    assert toolkits_for([60, 89]) == "CUDA 11.8-12.9"
    assert toolkits_for([75, 86]) == "CUDA 11.1-13.0+"
    assert toolkits_for([35, 120]) == "no single CUDA release"


# --------------------------------------------------------------------------------------
# parsing real outputs


@pytest.mark.parametrize(("text", "version"), [
    (NVCC_13_0, (13, 0, 88)),
    (NVCC_12_4, (12, 4, 131)),
    (NVCC_11_8, (11, 8, 89)),
    (NVCC_10_1, (10, 1, 243)),
    (NVCC_12_4.replace("\n", "\r\n"), (12, 4, 131)),  # Windows
])
def test_nvcc_version_parsing(text: str, version: tuple[int, int, int]) -> None:
    assert parse_nvcc_version(text) == version


def test_nvcc_version_parsing_rejects_other_text() -> None:
    with pytest.raises(ValueError):
        parse_nvcc_version("bash: nvcc: command not found\n")


def test_nvcc_root_and_gpu_codes_parsing() -> None:
    dry = "#$ _NVVM_BRANCH_=nvvm\n#$ _SPACE_= \n#$ _HERE_=/usr/local/cuda-13.0/bin\n#$ _THERE_=x\n"
    assert parse_nvcc_root(dry) == Path("/usr/local/cuda-13.0")
    assert parse_nvcc_root("nothing") is None
    codes = parse_gpu_codes(GPU_CODES_13_0)
    assert codes is not None and min(codes) == 75 and {86, 120, 121} <= codes
    assert parse_gpu_codes("sm_120a\nsm_90a\n") == frozenset({120, 90})
    assert parse_gpu_codes("") is None


@pytest.mark.parametrize(("text", "kind", "version"), [
    (GXX_12, "gcc", (12, 2, 0)),
    (GXX_11, "gcc", (11, 4, 0)),
    ("x86_64-w64-mingw32-g++-posix (GCC) 12-posix\n", "gcc", None),
    (CLANG_14, "clang", (14, 0, 6)),
    (CL_19_38, "msvc", (19, 38, 33130)),
    ("", "unknown", None),
])
def test_host_compiler_parsing(text: str, kind: str, version: tuple[int, ...] | None) -> None:
    assert parse_host_compiler(text) == (kind, version)


def test_cuobjdump_list_parsing() -> None:
    assert parse_cuobjdump_list(LIST_ELF) == ["sm_75", "sm_86"]
    assert parse_cuobjdump_list(LIST_PTX) == ["compute_86"]
    assert parse_cuobjdump_list(LIST_ELF + LIST_PTX + "ELF file    3: x.3.sm_120a.cubin\n") == [
        "sm_75", "sm_86", "compute_86", "sm_120a"]
    assert parse_cuobjdump_list(NO_CODE) == []


# --------------------------------------------------------------------------------------
# recipes


def test_shipped_cuda_recipes_validate(tmp_path: Path) -> None:
    series = empty_series(tmp_path)
    for name in ("cuda-pascal-ampere", "windows-cuda-pascal-ampere"):
        r = load_recipe(REPO / "recipes" / f"{name}.toml", REPO, series)
        assert r.cuda is not None
        a = r.cuda.archs
        assert a.cmake == "60-real;61-real;75-real;86-real;86-virtual"
        assert set(r.build.targets) == {"llama-server", "llama-cli", "llama-bench",
                                         "ggml-rpc-server"}
        assert r.build.defines_dict["GGML_RPC"] == "ON"
        assert r.cuda is not None and not r.cuda.fa_all_quants
    win = load_recipe(REPO / "recipes" / "windows-cuda-pascal-ampere.toml", REPO, series)
    assert win.os == "windows" and win.build.generator == "Ninja" and win.build.toolchain is None


@pytest.mark.parametrize(("body", "expect"), [
    ('[build]\ntargets = ["t"]\n[build.defines]\nCMAKE_CUDA_ARCHITECTURES = "86"\n'
     '[cuda]\narchs = ["ampere"]\n', "set cuda.archs instead"),
    ('[build]\ntargets = ["t"]\n[build.defines]\nGGML_NATIVE = true\n[cuda]\narchs = ["ampere"]\n',
     "GGML_NATIVE = ON"),
    ('[build]\ntargets = ["t"]\n[build.defines]\nGGML_CUDA = false\n[cuda]\narchs = ["ampere"]\n',
     "contradicts"),
    ('[build]\ntargets = ["t"]\n[build.defines]\nGGML_CUDA = true\n', "no [cuda] section"),
    ('[build]\ntargets = ["t"]\n[cuda]\narchs = ["turing", "ampre"]\n', 'did you mean "ampere"'),
    ('[build]\ntargets = ["t"]\ntoolchain = "tc.cmake"\n[platform]\nos = "windows"\n'
     '[cuda]\narchs = ["turing"]\n', "needs MSVC"),
])
def test_recipe_validation_errors(tmp_path: Path, body: str, expect: str) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "tc.cmake").write_text("")
    with pytest.raises(RecipeError) as e:
        recipe_from(tmp_path, body)  # checked once, when the recipe loads
    assert expect in e.value.message
    assert e.value.message.startswith("recipes/r.toml: ")


def test_recipe_without_cuda_has_no_cuda_spec(tmp_path: Path) -> None:
    assert recipe_from(tmp_path, '[build]\ntargets = ["t"]\n').cuda is None


# --------------------------------------------------------------------------------------
# preflight: the refusal before configuring


RIG = archs_of("pascal", "turing", 86)


def test_cuda13_with_pascal_is_refused_with_what_to_do() -> None:
    with pytest.raises(CudaError) as e:
        preflight(RIG, toolkit((13, 0, 88)))
    err = e.value
    assert err.exit_code == 13
    assert "CUDA 13.0 (/opt/cuda-13.0) cannot compile sm_60 (pascal), sm_61 (pascal)" in err.message
    assert "CUDA 13 dropped every sm below 75" in err.message
    assert "sm_75" not in err.message and "sm_86" not in err.message
    assert "CUDA 11.1-12.9" in err.hint
    assert "CUDA 11.8 accepts gcc <= 11" in err.hint
    assert "CMAKE_CUDA_HOST_COMPILER" in err.hint
    assert "--cuda-root" in err.hint and "drop pascal" in err.hint


def test_refusal_uses_nvccs_own_list_over_the_table() -> None:
    tk = toolkit((12, 4, 131), gpu_codes=frozenset({75, 86}))
    with pytest.raises(CudaError, match="cannot compile sm_60"):
        preflight(RIG, tk)


def test_too_new_arch_is_refused() -> None:
    with pytest.raises(CudaError, match=r"cannot compile sm_89 \(ada\).*newer than this toolkit"):
        preflight(archs_of("ampere", "ada"), toolkit((11, 1, 105)))


def test_too_new_gcc_is_refused_before_configuring() -> None:
    with pytest.raises(CudaError) as e:
        preflight(RIG, toolkit((11, 8, 89), host_compiler=host(version=(12, 2, 0))))
    assert "accepts gcc <= 11" in e.value.message and "12.2.0" in e.value.message
    assert 'cuda.host_compiler = "g++-11"' in e.value.hint


def test_missing_cublas_is_refused_with_the_wheel_to_install() -> None:
    with pytest.raises(CudaError, match="has no cuBLAS") as e:
        preflight(archs_of("turing", "ampere"), toolkit((13, 0, 88), cublas=None))
    assert "pip install nvidia-cublas" in e.value.hint
    notes = preflight(archs_of("turing"), toolkit((13, 0, 88), cublas=None),
                      need_cublas=False)
    assert any("no cuBLAS" in n for n in notes)


def test_missing_cuobjdump_or_host_compiler_is_a_missing_tool() -> None:
    with pytest.raises(ToolMissing, match="cuobjdump") as e:
        preflight(RIG, toolkit((12, 4, 131), cuobjdump=False))
    assert "nvidia-cuda-cuobjdump" in e.value.hint
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
    plan = prepare(r, cuda_root=root, env={"PATH": str(tmp_path / "bin")}, ccache=False,
                   run=run, sites=[])
    assert plan.archs.sms == (60, 61, 75, 86)
    assert plan.toolkit.version == (12, 4, 131)
    assert plan.defines["CUDAToolkit_ROOT"] == root.as_posix()
    assert plan.defines["GGML_CUDA_NO_VMM"] == "ON"
    assert plan.notes == ("no libcuda stub in the toolkit and no driver library: building with "
                          "GGML_CUDA_NO_VMM=ON (no virtual-memory pools)",)
    with pytest.raises(RecipeError, match="has no \\[cuda\\] section"):
        prepare(recipe_from(tmp_path, '[build]\ntargets = ["t"]\n'), run=run, sites=[])


def test_windows_toolkit_needs_msvc() -> None:
    with pytest.raises(CudaError, match="needs MSVC"):
        preflight(RIG, toolkit((12, 4, 131), windows=True))
    assert preflight(RIG, toolkit((12, 4, 131), windows=True,
                                  host_compiler=host("msvc", (19, 38, 33130)))) == []


# --------------------------------------------------------------------------------------
# finding the toolkit (fake folders, replayed outputs)


def test_find_toolkit_on_path_resolves_the_real_root(tmp_path: Path) -> None:
    root = make_toolkit_dir(tmp_path / "cuda-13.0", stub=False)
    wrapper = make_exe(tmp_path / "bin" / "nvcc")  # a wrapper script, like /usr/local/bin/nvcc
    gxx = make_exe(tmp_path / "bin" / "g++")
    site = tmp_path / "site"
    make_exe(site / "nvidia" / "cu13" / "bin" / "cuobjdump")
    for n in ("libcublas.so.13", "libcublasLt.so.13"):
        (site / "nvidia/cu13/lib").mkdir(parents=True, exist_ok=True)
        (site / "nvidia/cu13/lib" / n).write_text("")
    (site / "nvidia/cu13/include").mkdir(parents=True)
    (site / "nvidia/cu13/include/cublas_v2.h").write_text("")
    run = FakeRun(nvcc_answers(NVCC_13_0, root, GPU_CODES_13_0) | {("g++", "--version"): (0, GXX_12)})
    tk = find_toolkit(None, None, {"PATH": str(tmp_path / "bin")}, run=run, sites=[site],
                      windows=False)
    assert tk.nvcc == wrapper and tk.source == "PATH"
    assert tk.root == root
    assert tk.version == (13, 0, 88) and tk.version_str == "13.0"
    assert min(tk.sms) == 75
    assert tk.cublas is not None and tk.cublas.source == "wheel"
    assert tk.cublas.library == site / "nvidia/cu13/lib/libcublas.so.13"
    assert tk.libcuda is None and not tk.has_libcuda_stub
    assert tk.cuobjdump == site / "nvidia/cu13/bin/cuobjdump"
    assert tk.host.path == gxx and tk.host.version == (12, 2, 0) and not tk.host.explicit


def test_find_toolkit_search_order_and_broken_roots(tmp_path: Path) -> None:
    a = make_toolkit_dir(tmp_path / "a", cublas=True, stub=True, cuobjdump=True)
    b = make_toolkit_dir(tmp_path / "b")
    c = make_toolkit_dir(tmp_path / "c")
    make_exe(tmp_path / "bin" / "g++")
    env = {"PATH": str(tmp_path / "bin"), "CUDA_PATH": str(c)}

    def find(root: Path | None, spec_root: Path | None) -> CudaToolkit:
        run = FakeRun(nvcc_answers(NVCC_12_4, root or spec_root or c)
                      | {("g++", "--version"): (0, GXX_12)})
        return find_toolkit(spec("turing", toolkit_root=str(spec_root) if spec_root else None),
                            root, env, run=run, sites=[], windows=False)

    assert find(a, b).source == "--cuda-root" and find(a, b).nvcc == a / "bin/nvcc"
    assert find(None, b).source == "cuda.toolkit_root"
    assert find(None, None).source == "CUDA_PATH"
    tk = find(a, None)
    assert tk.cublas is not None and tk.cublas.source == "toolkit"
    assert tk.libcuda == a / "lib64/stubs/libcuda.so" and tk.libcuda_kind == "stub"
    assert tk.cuobjdump == a / "bin/cuobjdump"
    assert tk.gpu_codes is None and 60 in tk.sms  # no --list-gpu-code: the table answers
    with pytest.raises(ToolMissing, match="cuda.toolkit_root points at .*nope, which has no bin/nvcc"):
        find(None, tmp_path / "nope")
    with pytest.raises(ToolMissing, match="no CUDA toolkit found"):
        find_toolkit(None, None, {"PATH": str(tmp_path / "empty")}, run=FakeRun({}),
                     sites=[], windows=False, default_roots=[tmp_path / "none"])
    dflt = find_toolkit(None, None, {"PATH": ""}, sites=[], windows=False, default_roots=[b],
                        run=FakeRun(nvcc_answers(NVCC_12_4, b) | {}))
    assert dflt.source == "default location" and dflt.host.path is None


def test_find_toolkit_picks_an_older_gcc_when_the_default_is_too_new(tmp_path: Path) -> None:
    root = make_toolkit_dir(tmp_path / "cuda-11.8", cublas=True)
    make_exe(tmp_path / "bin" / "g++")
    g11 = make_exe(tmp_path / "bin" / "g++-11")
    run = FakeRun(nvcc_answers(NVCC_11_8, root) | {("g++", "--version"): (0, GXX_12),
                                                   ("g++-11", "--version"): (0, GXX_11)})
    tk = find_toolkit(None, root, {"PATH": str(tmp_path / "bin")}, run=run, sites=[], windows=False)
    assert tk.host.path == g11 and tk.host.explicit and tk.host.source == "auto"
    notes = preflight(RIG, tk, need_cuobjdump=False)
    assert any("default g++ is too new" in n for n in notes)
    # the recipe's choice is kept as given, even when it is too new: preflight says so
    run2 = FakeRun(nvcc_answers(NVCC_11_8, root) | {("g++-12", "--version"): (0, GXX_12)})
    make_exe(tmp_path / "bin" / "g++-12")
    tk2 = find_toolkit(spec("pascal", host_compiler="g++-12"), root,
                       {"PATH": str(tmp_path / "bin")}, run=run2, sites=[], windows=False)
    assert tk2.host.source == "recipe" and tk2.host.explicit
    with pytest.raises(CudaError, match="accepts gcc <= 11"):
        preflight(RIG, tk2, need_cuobjdump=False)


def test_unparseable_nvcc_is_a_missing_tool(tmp_path: Path) -> None:
    root = make_toolkit_dir(tmp_path / "x")
    run = FakeRun({("nvcc", "--version"): (127, "nvcc: error while loading shared libraries")})
    with pytest.raises(ToolMissing, match="printed no CUDA release") as e:
        find_toolkit(None, root, {"PATH": ""}, run=run, sites=[], windows=False)
    assert "shared libraries" in e.value.detail


def test_windows_layouts(tmp_path: Path) -> None:
    root = tmp_path / "v12.4"
    (root / "lib" / "x64").mkdir(parents=True)
    (root / "include").mkdir()
    for n in ("cublas.lib", "cublasLt.lib"):
        (root / "lib" / "x64" / n).write_text("")
    (root / "include" / "cublas_v2.h").write_text("")
    assert find_cublas(root, 12, [], windows=True).source == "toolkit"  # type: ignore[union-attr]
    make_exe(root / "bin" / "cuobjdump.exe")
    assert find_cuobjdump(root, {"PATH": ""}, [], windows=True) == root / "bin" / "cuobjdump.exe"


# --------------------------------------------------------------------------------------
# CMake defines


def test_cmake_defines_for_a_wheel_cublas_stubless_toolkit(tmp_path: Path) -> None:
    r = recipe_from(tmp_path, '[build]\ntargets = ["t"]\n[cuda]\narchs = ["turing", 86]\n')
    assert r.cuda is not None
    archs = r.cuda.archs
    tk = toolkit((13, 0, 88), cublas="wheel", libcuda=False,
                 host_compiler=host(explicit=True, source="recipe", path="/usr/bin/g++-12"))
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
        "LD_LIBRARY_PATH": f"{root / 'lib64'}:/site/nvidia/cu13/lib:/x"}
    assert build_env(dataclasses.replace(tk, windows=True), {}) == {}
    bare = dataclasses.replace(toolkit((12, 4, 131)), root=tmp_path / "none")
    assert build_env(bare, {}) == {}


def test_cmake_defines_for_a_complete_toolkit(tmp_path: Path) -> None:
    r = recipe_from(tmp_path, '[build]\ntargets = ["t"]\n[cuda]\narchs = ["pascal"]\n'
                              'fa_all_quants = true\n')
    assert r.cuda is not None
    d = cmake_defines(r, r.cuda.archs, toolkit((12, 4, 131)), ccache=False)
    assert d["GGML_CUDA_FA_ALL_QUANTS"] == "ON"
    assert d["CMAKE_CUDA_ARCHITECTURES"] == "60-real;61-real;61-virtual"
    for absent in ("GGML_CUDA_NO_VMM", "CUDA_cublas_LIBRARY", "CMAKE_CUDA_HOST_COMPILER",
                   "CMAKE_CUDA_COMPILER_LAUNCHER"):
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
    got = prove_archs([base / "bin/libfixcuda.so", base / "bin/fixmain"], ARCHS_75_86,
                      Path("/x/cuobjdump"), base=base, run=run)
    assert got == {"bin/libfixcuda.so": ["sm_75", "sm_86", "compute_86"], "bin/fixmain": []}
    assert run.calls[0] == ["/x/cuobjdump", "--list-elf", "/b/bin/libfixcuda.so"]


def test_build_info_records_archs_toolkit_and_cubins() -> None:
    tk = toolkit((12, 4, 131), cublas="wheel", libcuda=False)
    cubins = {"bin/libggml-cuda.so": ["sm_75", "sm_86", "compute_86"]}
    info = build_info(ARCHS_75_86, tk, cubins, ["n"])
    assert json.loads(json.dumps(info.to_json())) == {
        "archs": [75, 86], "ptx": 86, "requested": ["75", "86"],
        "cmake_architectures": "75-real;86-real;86-virtual", "nvcc": "12.4.131",
        "proven": cubins,
        "toolkit": {"version": "12.4.131", "root": "/opt/cuda-12.4",
                    "nvcc": "/opt/cuda-12.4/bin/nvcc",
                    "host_compiler": {"kind": "gcc", "version": "12.2.0", "path": "/usr/bin/g++"},
                    "cublas": "wheel", "libcuda": None, "no_vmm": True},
        "notes": ["n"],
    }


def test_prove_archs_fails_when_a_requested_sm_is_missing() -> None:
    with pytest.raises(CudaError) as e:
        prove_archs([Path("/b/bin/libfixcuda.so")], archs_of("pascal", 75, 86),
                    Path("cuobjdump"), run=_cuobjdump_run())
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
        "bin/libggml-cuda.so.0.9.7", "bin/llama-server", "bin/ggml-rpc-server.exe"]


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
    got = prove_archs([Path("/l.so")], archs, Path("c"),
                      run=_cuobjdump_run(lib_elf=elf, lib_ptx="PTX file    1: l.1.sm_120a.ptx\n"))
    assert got == {"l.so": ["sm_86", "sm_120a", "compute_120a"]}


# --------------------------------------------------------------------------------------
# doctor


def _doctor_project(tmp_path: Path) -> tuple[Path, Series]:
    proj = tmp_path / "dproj"
    (proj / "recipes").mkdir(parents=True)
    for f in [REPO / "recipes" / f"{n}.toml" for n in ("cuda-pascal-ampere", "windows-cuda-pascal-ampere")]:
        shutil.copy(f, proj / "recipes" / f.name)
    (proj / "recipes" / "broken.toml").write_text('name = "broken"\n')
    (proj / "patches").mkdir()
    (proj / "patches" / "series").write_text("# series\n")
    return proj, load_series(proj / "patches")


def _doctor_machine(tmp_path: Path, nvcc_text: str) -> tuple[dict[str, str], FakeRun, Path]:
    bin_ = tmp_path / "bin"
    for tool in ("cmake", "ninja", "g++", "gcc", "ccache"):
        make_exe(bin_ / tool)
    root = make_toolkit_dir(tmp_path / "cuda", cublas=True, stub=True, cuobjdump=True)
    run = FakeRun(nvcc_answers(nvcc_text, root) | {
        ("cmake", "--version"): (0, "cmake version 3.31.6\n"),
        ("ninja", "--version"): (0, "1.12.1\n"),
        ("ccache", "--version"): (0, "ccache version 4.8.2\n"),
        ("gcc", "--version"): (0, GXX_12.replace("g++", "gcc")),
        ("g++", "--version"): (0, GXX_12),
        ("wine64", "--version"): (0, "wine-8.0\n"),
    })
    return {"PATH": str(bin_), "CUDA_PATH": str(root)}, run, root


def test_doctor_with_cuda13_refuses_pascal_and_the_windows_twin(tmp_path: Path) -> None:
    proj, series = _doctor_project(tmp_path)
    env, run, root = _doctor_machine(tmp_path, NVCC_13_0)
    rep = build_report(proj, series, cuda_root=None, env=env, run=run, os_name="linux", sites=[])
    v = {x.recipe: x for x in rep.verdicts}
    assert set(v) == {"cuda-pascal-ampere", "windows-cuda-pascal-ampere", "broken"}
    assert not v["cuda-pascal-ampere"].ok
    assert "cannot compile sm_60 (pascal), sm_61 (pascal)" in v["cuda-pascal-ampere"].why
    assert "CUDA 11.1-12.9" in v["cuda-pascal-ampere"].todo
    win = v["windows-cuda-pascal-ampere"]
    assert not win.ok
    assert win.why == "windows recipe: needs MSVC on Windows; cannot build on Linux"
    assert "CUDA 11.1-12.9" in win.todo
    assert not v["broken"].ok and "upstream" in v["broken"].why
    assert rep.toolkit is not None and rep.toolkit.root == root
    assert rep.tools["cmake"].version == "3.31.6" and not rep.tools["mingw"].found
    data = rep.to_json()
    assert data["cuda"]["version"] == "13.0.88"  # type: ignore[index]
    json.dumps(data)  # serialisable


def test_doctor_with_cuda12_can_build_the_linux_recipe(tmp_path: Path) -> None:
    proj, series = _doctor_project(tmp_path)
    env, run, _ = _doctor_machine(tmp_path, NVCC_12_4)
    rep = build_report(proj, series, cuda_root=None, env=env, run=run, os_name="linux", sites=[])
    v = {x.recipe: x for x in rep.verdicts}
    assert v["cuda-pascal-ampere"].ok, v["cuda-pascal-ampere"]
    assert "CUDA 12.4" in v["cuda-pascal-ampere"].notes[0]
    assert not v["windows-cuda-pascal-ampere"].ok


def test_doctor_on_windows_needs_a_developer_prompt(tmp_path: Path) -> None:
    proj, series = _doctor_project(tmp_path)
    r = load_recipe(proj / "recipes" / "windows-cuda-pascal-ampere.toml", proj, series)
    tools = {n: Tool(name=n, path=Path(f"C:/t/{n}.exe")) for n in ("cmake", "ninja", "ccache")}
    no_cl = recipe_verdict(r, os_name="windows", tools=tools | {"msvc": Tool(name="msvc", path=None)},
                           toolkit_for=lambda s: toolkit((12, 4, 131), windows=True))
    assert not no_cl.ok and "cl (a VS developer prompt)" in no_cl.why
    ok = recipe_verdict(r, os_name="windows",
                        tools=tools | {"msvc": Tool(name="msvc", path=Path("C:/cl.exe"))},
                        toolkit_for=lambda s: toolkit((12, 4, 131), windows=True,
                                                      host_compiler=host("msvc", (19, 38, 0))))
    assert ok.ok, ok
    linux = load_recipe(proj / "recipes" / "cuda-pascal-ampere.toml", proj, series)
    assert recipe_verdict(linux, os_name="windows", tools=tools,
                          toolkit_for=lambda s: toolkit()).why == \
        "linux recipe: cannot build on Windows"


# --------------------------------------------------------------------------------------
# integration: the real nvcc, CMake and cuobjdump on the fixture


def _real_toolkit() -> CudaToolkit:
    try:
        return find_toolkit(None, None, os.environ)
    except ToolMissing as e:
        pytest.skip(f"no CUDA toolkit here: {e.message}")


def _nice() -> list[str]:
    return ["nice", "-n", "10"] if sys.platform != "win32" and shutil.which("nice") else []


@pytest.mark.integration
def test_fixture_builds_for_two_archs_and_cuobjdump_proves_them(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch
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
    cmd = [*_nice(), "cmake", "-S", str(FIXTURE), "-B", str(build), "-G", "Ninja",
           "-DCMAKE_BUILD_TYPE=Release", *(f"-D{k}={v}" for k, v in defines.items())]
    cfg = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert cfg.returncode == 0, cfg.stdout[-3000:] + cfg.stderr[-3000:]
    ninja = (build / "build.ninja").read_text()
    for s in two:
        assert f"arch=compute_{s},code=[sm_{s}]" in ninja
    assert f"arch=compute_{two[-1]},code=[compute_{two[-1]}]" in ninja
    b = subprocess.run([*_nice(), "cmake", "--build", str(build), "-j2"], capture_output=True,
                       text=True, check=False)
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


@pytest.mark.integration
def test_doctor_command_on_this_machine(tmp_path: Path) -> None:
    proj, _ = _doctor_project(tmp_path)
    res = CliRunner().invoke(main, ["--project", str(proj), "doctor", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    v = {x["recipe"]: x for x in data["recipes"]}
    win = v["windows-cuda-pascal-ampere"]
    if sys.platform != "win32":
        assert not win["ok"]
        assert win["why"] == "windows recipe: needs MSVC on Windows; cannot build on Linux"
    lin = v["cuda-pascal-ampere"]
    version = data["cuda"]["version"]
    if version and int(version.split(".")[0]) >= 13:
        assert not lin["ok"] and "CUDA 13 dropped every sm below 75" in lin["why"]
    elif version is None:
        assert not lin["ok"] and "no CUDA toolkit found" in lin["why"]
