"""The CUDA toolkit (builder.cuda.toolkit): the release table, parsing real tool outputs, and
finding a toolkit in fake folders with replayed outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.builder.cuda.plan import (
    preflight,
)
from patchkit.builder.cuda.toolkit import (
    TOOLKIT_LIMITS,
    CudaToolkit,
    find_cublas,
    find_cuobjdump,
    find_toolkit,
    limits_for,
    parse_gpu_codes,
    parse_host_compiler,
    parse_nvcc_root,
    parse_nvcc_version,
)
from patchkit.core.errors import CudaError, ToolMissing
from tests.fixtures.cuda import (
    CL_19_38,
    CLANG_14,
    GPU_CODES_13_0,
    GXX_11,
    GXX_12,
    NVCC_10_1,
    NVCC_11_8,
    NVCC_12_4,
    NVCC_13_0,
    FakeRun,
    archs_of,
    make_exe,
    make_toolkit_dir,
    nvcc_answers,
    spec,
)

RIG = archs_of("pascal", "turing", 86)


# --------------------------------------------------------------------------------------
# the toolkit table


@pytest.mark.parametrize(
    ("version", "has", "lacks"),
    [
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
    ],
)
def test_toolkit_table_knows_what_each_release_compiles(
    version: tuple[int, int], has: set[int], lacks: set[int]
) -> None:
    lim = limits_for(version)
    assert lim is not None
    assert has <= lim.sms
    assert not (lacks & lim.sms)


@pytest.mark.parametrize(
    ("version", "gcc"),
    [
        ((10, 0), 7),
        ((10, 2), 8),
        ((11, 0), 9),
        ((11, 1), 10),
        ((11, 8), 11),
        ((12, 0), 12),
        ((12, 4), 13),
        ((12, 6), 13),
        ((12, 8), 14),
        ((13, 0), 15),
    ],
)
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


# --------------------------------------------------------------------------------------
# parsing real outputs


@pytest.mark.parametrize(
    ("text", "version"),
    [
        (NVCC_13_0, (13, 0, 88)),
        (NVCC_12_4, (12, 4, 131)),
        (NVCC_11_8, (11, 8, 89)),
        (NVCC_10_1, (10, 1, 243)),
        (NVCC_12_4.replace("\n", "\r\n"), (12, 4, 131)),  # Windows
    ],
)
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


@pytest.mark.parametrize(
    ("text", "kind", "version"),
    [
        (GXX_12, "gcc", (12, 2, 0)),
        (GXX_11, "gcc", (11, 4, 0)),
        ("x86_64-w64-mingw32-g++-posix (GCC) 12-posix\n", "gcc", None),
        (CLANG_14, "clang", (14, 0, 6)),
        (CL_19_38, "msvc", (19, 38, 33130)),
        ("", "unknown", None),
    ],
)
def test_host_compiler_parsing(text: str, kind: str, version: tuple[int, ...] | None) -> None:
    assert parse_host_compiler(text) == (kind, version)


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
    tk = find_toolkit(None, None, {"PATH": str(tmp_path / "bin")}, run=run, sites=[site], windows=False)
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
        run = FakeRun(nvcc_answers(NVCC_12_4, root or spec_root or c) | {("g++", "--version"): (0, GXX_12)})
        return find_toolkit(
            spec("turing", toolkit_root=str(spec_root) if spec_root else None),
            root,
            env,
            run=run,
            sites=[],
            windows=False,
        )

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
    with pytest.raises(ToolMissing, match="NoCudaToolkit"):
        find_toolkit(
            None,
            None,
            {"PATH": str(tmp_path / "empty")},
            run=FakeRun({}),
            sites=[],
            windows=False,
            default_roots=[tmp_path / "none"],
        )
    dflt = find_toolkit(
        None,
        None,
        {"PATH": ""},
        sites=[],
        windows=False,
        default_roots=[b],
        run=FakeRun(nvcc_answers(NVCC_12_4, b) | {}),
    )
    assert dflt.source == "default location" and dflt.host.path is None


def test_find_toolkit_picks_an_older_gcc_when_the_default_is_too_new(tmp_path: Path) -> None:
    root = make_toolkit_dir(tmp_path / "cuda-11.8", cublas=True)
    make_exe(tmp_path / "bin" / "g++")
    g11 = make_exe(tmp_path / "bin" / "g++-11")
    run = FakeRun(
        nvcc_answers(NVCC_11_8, root)
        | {("g++", "--version"): (0, GXX_12), ("g++-11", "--version"): (0, GXX_11)}
    )
    tk = find_toolkit(None, root, {"PATH": str(tmp_path / "bin")}, run=run, sites=[], windows=False)
    assert tk.host.path == g11 and tk.host.explicit and tk.host.source == "auto"
    notes = preflight(RIG, tk, need_cuobjdump=False)
    assert any("default g++ is too new" in n for n in notes)
    # the recipe's choice is kept as given, even when it is too new: preflight says so
    run2 = FakeRun(nvcc_answers(NVCC_11_8, root) | {("g++-12", "--version"): (0, GXX_12)})
    make_exe(tmp_path / "bin" / "g++-12")
    tk2 = find_toolkit(
        spec("pascal", host_compiler="g++-12"),
        root,
        {"PATH": str(tmp_path / "bin")},
        run=run2,
        sites=[],
        windows=False,
    )
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
