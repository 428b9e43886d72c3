"""`patchkit doctor`'s report (doctor.survey) on fake machines: tools found by PATH,
replayed outputs, and a verdict per recipe."""

from __future__ import annotations

import json
import platform
from pathlib import Path

from patchkit.builder.problems import CudaArchsUnbuildable
from patchkit.cli.doctor import _worded
from patchkit.doctor.survey import MINGW_CXX, Fact, Fix, Tool, Verdict, build_report, recipe_verdict, survey
from patchkit.spec.recipe import Recipe, load_recipe
from patchkit.spec.series import load_series
from tests.fixtures.cuda import (
    CL_19_38,
    GXX_11,
    GXX_12,
    NVCC_12_4,
    NVCC_13_0,
    FakeRun,
    doctor_project,
    host,
    make_exe,
    make_toolkit_dir,
    nvcc_answers,
    toolkit,
)
from tests.fixtures.paths import REPO


def _doctor_machine(tmp_path: Path, nvcc_text: str) -> tuple[dict[str, str], FakeRun, Path]:
    bin_ = tmp_path / "bin"
    for tool in ("cmake", "ninja", "g++", "gcc", "ccache"):
        make_exe(bin_ / tool)
    root = make_toolkit_dir(tmp_path / "cuda", cublas=True, stub=True, cuobjdump=True)
    run = FakeRun(
        nvcc_answers(nvcc_text, root)
        | {
            ("cmake", "--version"): (0, "cmake version 3.31.6\n"),
            ("ninja", "--version"): (0, "1.12.1\n"),
            ("ccache", "--version"): (0, "ccache version 4.8.2\n"),
            ("gcc", "--version"): (0, GXX_12.replace("g++", "gcc")),
            ("g++", "--version"): (0, GXX_12),
            ("wine64", "--version"): (0, "wine-8.0\n"),
        }
    )
    return {"PATH": str(bin_), "CUDA_PATH": str(root)}, run, root


def test_doctor_with_cuda13_refuses_pascal_and_the_windows_twin(tmp_path: Path) -> None:
    proj, series = doctor_project(tmp_path)
    env, run, root = _doctor_machine(tmp_path, NVCC_13_0)
    rep = build_report(proj, series, cuda_root=None, env=env, run=run, os_name="linux", sites=[])
    v = {x.recipe: x for x in rep.verdicts}
    assert set(v) == {"cuda-pascal-ampere", "windows-cuda-pascal-ampere", "broken"}
    assert not v["cuda-pascal-ampere"].ok
    refused = v["cuda-pascal-ampere"].problem
    assert isinstance(refused, CudaArchsUnbuildable)
    assert (refused.missing, refused.toolkits) == ("sm_60 (pascal), sm_61 (pascal)", "CUDA 11.1-12.9")
    # the CLI words it (cli/doctor.py), in text and --json alike
    worded = {x.recipe: x for x in _worded(rep).verdicts}["cuda-pascal-ampere"]
    assert "cannot compile sm_60 (pascal), sm_61 (pascal)" in worded.why
    assert "CUDA 11.1-12.9" in worded.todo
    win = v["windows-cuda-pascal-ampere"]
    assert not win.ok
    assert win.why == "windows recipe: needs MSVC on Windows; cannot build on Linux"
    assert (win.fix, win.todo) == (
        Fix(
            kind="build-on",
            os="windows",
            toolkits="CUDA 11.1-12.9",
            archs="sm_60 (pascal), sm_61 (pascal), sm_75 (turing), sm_86 (ampere)",
        ),
        "",  # the CLI words it
    )
    assert not v["broken"].ok and "upstream" in v["broken"].why
    assert rep.toolkit is not None and rep.toolkit.root == root
    assert rep.tools["cmake"].version == "3.31.6" and not rep.tools["mingw"].found
    data = rep.to_json()
    assert data["cuda"]["version"] == "13.0.88"  # type: ignore[index]
    # what the text shows beside the survey: the machine, and the host gcc the toolkit takes
    assert data["machine"] == rep.machine == platform.machine()
    assert data["cuda"]["host_gcc_max"] == rep.host_gcc_max == 15  # type: ignore[index]
    json.dumps(data)  # serialisable


def test_doctor_with_cuda12_can_build_the_linux_recipe(tmp_path: Path) -> None:
    proj, series = doctor_project(tmp_path)
    env, run, _ = _doctor_machine(tmp_path, NVCC_12_4)
    rep = build_report(proj, series, cuda_root=None, env=env, run=run, os_name="linux", sites=[])
    v = {x.recipe: x for x in rep.verdicts}
    assert v["cuda-pascal-ampere"].ok, v["cuda-pascal-ampere"]
    first = v["cuda-pascal-ampere"].facts[0]
    assert first.kind == "toolkit" and first.text.startswith("CUDA 12.4")
    assert not v["windows-cuda-pascal-ampere"].ok


def test_doctor_on_windows_needs_a_developer_prompt(tmp_path: Path) -> None:
    proj, series = doctor_project(tmp_path)
    r = load_recipe(proj / "recipes" / "windows-cuda-pascal-ampere.toml", proj, series)
    tools = {n: Tool(name=n, path=Path(f"C:/t/{n}.exe")) for n in ("cmake", "ninja", "ccache")}
    no_cl = recipe_verdict(
        r,
        os_name="windows",
        tools=tools | {"msvc": Tool(name="msvc", path=None)},
        toolkit_for=lambda s: toolkit((12, 4, 131), windows=True),
    )
    assert not no_cl.ok and "cl (a VS developer prompt)" in no_cl.why
    ok = recipe_verdict(
        r,
        os_name="windows",
        tools=tools | {"msvc": Tool(name="msvc", path=Path("C:/cl.exe"))},
        toolkit_for=lambda s: toolkit((12, 4, 131), windows=True, host_compiler=host("msvc", (19, 38, 0))),
    )
    assert ok.ok, ok
    linux = load_recipe(proj / "recipes" / "cuda-pascal-ampere.toml", proj, series)
    assert (
        recipe_verdict(linux, os_name="windows", tools=tools, toolkit_for=lambda s: toolkit()).why
        == "linux recipe: cannot build on Windows"
    )


def _shipped(name: str) -> Recipe:
    return load_recipe(REPO / "recipes" / f"{name}.toml", REPO, load_series(REPO / "patches"))


def _tools(*found: str) -> dict[str, Tool]:
    names = ("cmake", "ninja", "ccache", "cc", "c++", "mingw", "wine", "msvc", "bwrap", "debootstrap")
    return {n: Tool(name=n, path=Path(f"/usr/bin/{n}") if n in found else None) for n in names}


def test_survey_finds_tools_on_path_with_their_versions(tmp_path: Path) -> None:
    bin_ = tmp_path / "bin"
    for tool in ("cmake", "ninja", "gcc", "g++", "g++-11", MINGW_CXX):
        make_exe(bin_ / tool)
    run = FakeRun(
        {
            ("cmake", "--version"): (0, "cmake version 3.31.6\n"),
            ("ninja", "--version"): (0, "1.12.1\n"),
            ("gcc", "--version"): (0, GXX_12.replace("g++", "gcc")),
            ("g++", "--version"): (0, GXX_12),
            ("g++-11", "--version"): (0, GXX_11),
            (MINGW_CXX, "--version"): (0, "x86_64-w64-mingw32-g++-posix (GCC) 12-posix\n"),
            ("wine64", "--version"): (0, "wine-8.0\n"),
        }
    )
    tools = survey({"PATH": str(bin_)}, run, os_name="linux")
    assert (tools["cmake"].path, tools["cmake"].version) == (bin_ / "cmake", "3.31.6")
    assert tools["ninja"].version == "1.12.1" and tools["c++"].version == "12.2.0"
    assert tools["g++-11"].found and tools["g++-11"].version == "11.4.0"
    assert "g++-12" not in tools  # only the older g++ that exist are listed
    assert tools["mingw"].found and tools["mingw"].version == "12"
    assert not tools["ccache"].found and tools["ccache"].to_json() == {
        "path": None,
        "version": None,
        "note": "",
    }
    assert tools["msvc"].note == "Windows only" and not tools["msvc"].found


def test_survey_on_windows_asks_for_cl(tmp_path: Path) -> None:
    make_exe(tmp_path / "cl")
    tools = survey({"PATH": str(tmp_path)}, FakeRun({("cl", ""): (0, CL_19_38)}), os_name="windows")
    assert set(tools) == {"cmake", "ninja", "ccache", "msvc"}
    assert tools["msvc"].found and tools["msvc"].version == "19.38.33130"


def test_a_tool_that_cannot_run_is_found_with_a_note(tmp_path: Path) -> None:
    make_exe(tmp_path / "cmake")

    def broken(args: object) -> tuple[int, str]:
        raise OSError(8, "Exec format error")

    cmake = survey({"PATH": str(tmp_path)}, broken, os_name="windows")["cmake"]
    assert cmake.found and cmake.version is None and cmake.note.startswith("cannot run: ")
    assert "Exec format error" in cmake.note


def test_verdicts_name_what_is_missing() -> None:
    cpu, win = _shipped("cpu-rpc"), _shipped("windows-cpu-rpc")

    def no_toolkit(spec: object) -> object:
        raise AssertionError("a CPU recipe needs no CUDA toolkit")

    def verdict(recipe: Recipe, *found: str) -> Verdict:
        return recipe_verdict(recipe, os_name="linux", tools=_tools(*found), toolkit_for=no_toolkit)  # type: ignore[arg-type]

    bare = verdict(cpu)
    assert (bare.ok, bare.why) == (False, "missing cmake, ninja, g++")
    assert bare.fix == Fix(kind="build-tools")
    assert verdict(cpu, "cmake", "ninja", "c++") == Verdict(recipe="cpu-rpc", ok=True)
    cross = verdict(win, "cmake", "ninja", "c++")
    assert (cross.ok, cross.why) == (False, f"missing {MINGW_CXX}")  # the cross compiler, not g++
    no_wine = verdict(win, "cmake", "ninja", "mingw")
    assert no_wine.ok and no_wine.facts == (Fact(kind="no-wine"),)
    assert verdict(win, "cmake", "ninja", "mingw", "wine").facts == ()
    data = bare.to_json()
    assert data["fix"]["kind"] == "build-tools"  # type: ignore[index]
    assert {k: v for k, v in data.items() if k != "fix"} == {
        "recipe": "cpu-rpc",
        "ok": False,
        "why": bare.why,
        "todo": "",
        "notes": [],
        "facts": [],
    }


def test_a_cuda_verdict_notes_the_missing_ccache() -> None:
    r = _shipped("cuda-turing-ampere")
    ok = recipe_verdict(
        r, os_name="linux", tools=_tools("cmake", "ninja", "c++"), toolkit_for=lambda s: toolkit((12, 4, 131))
    )
    assert ok.ok, ok
    assert ok.facts[0].kind == "toolkit" and ok.facts[0].text.startswith("CUDA 12.4") and ok.facts[0].host
    assert ok.facts[-1] == Fact(kind="no-ccache")


def test_doctor_without_a_toolkit_says_why_for_every_cuda_recipe(tmp_path: Path) -> None:
    proj, series = doctor_project(tmp_path)
    env, run, _ = _doctor_machine(tmp_path, NVCC_12_4)
    nowhere = tmp_path / "nowhere"
    env["CUDA_PATH"] = str(nowhere)
    rep = build_report(proj, series, cuda_root=None, env=env, run=run, os_name="linux", sites=[])
    why = f"CUDA_PATH points at {nowhere}, which has no bin/nvcc"
    assert rep.toolkit is None and rep.toolkit_error == why
    lin = {x.recipe: x for x in rep.verdicts}["cuda-pascal-ampere"]
    assert (lin.ok, lin.why) == (False, why)
    assert lin.fix == Fix(kind="error", hint="point it at a CUDA toolkit folder (the one holding bin/nvcc)")
    worded = {x.recipe: x for x in _worded(rep).verdicts}["cuda-pascal-ampere"]
    assert worded.todo == lin.fix.hint  # the CLI says the error's own advice
