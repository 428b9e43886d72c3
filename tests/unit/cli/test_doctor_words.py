"""Golden words of `patchkit doctor`: what to do, the notes and each floor's line, as the
CLI writes them from the report's fields (cli/doctor.py). The engine's tests
(tests/unit/doctor/) assert on the fields; these pin the rendered text."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from patchkit.cli.doctor import _worded
from patchkit.doctor import survey
from patchkit.doctor.survey import MINGW_CXX, Floor, Report, Tool, Verdict, floors, recipe_verdict
from tests.fixtures.cuda import NVCC_12_4, doctor_project, toolkit
from tests.fixtures.sysroot import fake_root
from tests.unit.doctor.test_survey import _doctor_machine, _shipped, _tools


def _no_toolkit(spec: object) -> object:
    raise AssertionError("a CPU recipe needs no CUDA toolkit")


def _said(*verdicts: Verdict, floors: tuple[Floor, ...] = ()) -> Report:
    bare = Report(
        host_os="linux",
        machine="x86_64",
        tools={},
        toolkit=None,
        toolkit_error="",
        verdicts=verdicts,
        floors=floors,
    )
    return _worded(bare)


def _verdict(recipe: object, *found: str, os_name: str = "linux", cache: Path | None = None) -> Verdict:
    v = recipe_verdict(
        recipe,  # type: ignore[arg-type]
        os_name=os_name,
        tools=_tools(*found),
        toolkit_for=_no_toolkit,  # type: ignore[arg-type]
        cache=cache,
    )
    return _said(v).verdicts[0]


def test_what_to_do_about_missing_tools() -> None:
    bare = _verdict(_shipped("cpu-rpc"))
    assert (bare.why, bare.todo) == (
        "missing cmake, ninja, g++",
        "pip install cmake ninja; install the compilers (apt install g++ g++-mingw-w64-x86-64)",
    )
    cross = _verdict(_shipped("windows-cpu-rpc"), "cmake", "ninja", "c++")
    assert (cross.why, cross.todo) == (f"missing {MINGW_CXX}", bare.todo)
    no_wine = _verdict(_shipped("windows-cpu-rpc"), "cmake", "ninja", "mingw")
    assert no_wine.notes == ("no wine64: the Windows smoke tests cannot run here (apt install wine64)",)


def test_what_to_do_on_another_os() -> None:
    assert (
        _verdict(_shipped("cpu-rpc"), "cmake", "ninja", "msvc", os_name="windows").todo == "build it on Linux"
    )


def test_what_to_do_about_a_build_root(tmp_path: Path) -> None:
    r = _shipped("cpu-rpc-portable")
    tools = ("cmake", "ninja", "c++", "bwrap")
    v = _verdict(r, *tools, cache=tmp_path)
    assert v.todo == "patchkit root prepare debian11 (as root; debootstrap from Debian's archive)"
    assert _verdict(r, "cmake", "ninja", "c++", cache=tmp_path).todo == "apt install bubblewrap"
    odd = dataclasses.replace(r, build=dataclasses.replace(r.build, root="debian9"))
    v = _verdict(odd, *tools, cache=tmp_path)
    assert (v.why, v.todo) == (
        "build.root 'debian9' is not a root patchkit knows",
        "use one of debian11, debian12",
    )
    fake_root(tmp_path)
    assert _verdict(r, *tools, cache=tmp_path).notes == (
        "builds in the root debian11 (Debian bullseye: floor GLIBC_2.31)",
    )


def test_the_note_of_a_floor_older_than_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(survey, "host_glibc", lambda: "2.36")
    r = _shipped("cpu-rpc-portable")
    plain = dataclasses.replace(r, build=dataclasses.replace(r.build, root=None))
    assert _verdict(plain, "cmake", "ninja", "c++").notes == (
        "its floor is GLIBC_2.31 and this machine's glibc is 2.36: "
        "`release` refuses what needs more; set [build] root",
    )


def test_the_notes_and_todo_of_cuda_recipes(tmp_path: Path) -> None:
    proj, series = doctor_project(tmp_path)
    from patchkit.spec.recipe import load_recipe

    win = load_recipe(proj / "recipes" / "windows-cuda-pascal-ampere.toml", proj, series)
    v = _verdict(win, "cmake", "ninja", "c++")
    assert (v.why, v.todo) == (
        "windows recipe: needs MSVC on Windows; cannot build on Linux",
        "build it on Windows from a Visual Studio developer prompt (cl + Ninja) with a CUDA toolkit; "
        "needs CUDA 11.1-12.9 for sm_60 (pascal), sm_61 (pascal), sm_75 (turing), sm_86 (ampere)",
    )
    ok = recipe_verdict(
        _shipped("cuda-turing-ampere"),
        os_name="linux",
        tools=_tools("cmake", "ninja", "c++"),
        toolkit_for=lambda s: toolkit((12, 4, 131)),
    )
    notes = _said(ok).verdicts[0].notes
    assert notes[0] == "CUDA 12.4 (/opt/cuda-12.4), host compiler gcc 12.2.0 (/usr/bin/g++)"
    assert notes[-1] == "no ccache: every CUDA build compiles from scratch (apt install ccache)"


def test_what_to_do_about_a_broken_recipe(tmp_path: Path) -> None:
    proj, series = doctor_project(tmp_path)
    env, run, _ = _doctor_machine(tmp_path, NVCC_12_4)
    rep = survey.build_report(proj, series, cuda_root=None, env=env, run=run, os_name="linux", sites=[])
    broken = {v.recipe: v for v in _worded(rep).verdicts}["broken"]
    assert (broken.ok, broken.todo) == (False, "fix the recipe")


def test_the_floor_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(survey, "host_glibc", lambda: "2.36")
    fake_root(tmp_path)

    def how(*found: str) -> dict[str, str]:
        got = _said(floors=floors(_tools(*found), tmp_path, os_name="linux")).floors
        return {f.where: f.how for f in got}

    assert how("bwrap", "debootstrap") == {
        "host": "a plain build links against this machine's glibc and libstdc++",
        "debian11": "root debian11@abababababab (bullseye, GCC 10.2.1, prepared 2026-12-02T16:00:00+00:00)",
        "debian12": "not prepared: `patchkit root prepare debian12` (as root, network, ~5 min)",
    }
    assert how("debootstrap") == {
        "host": "a plain build links against this machine's glibc and libstdc++",
        "debian11": "prepared, but bwrap is missing to build in it (apt install bubblewrap)",
        "debian12": "not prepared; needs apt install bubblewrap",
    }
    assert how()["debian12"] == "not prepared; needs apt install debootstrap bubblewrap"


def test_the_tools_a_fake_survey_lists_are_named() -> None:
    assert set(_tools()) >= {"bwrap", "debootstrap"} and Tool(name="x", path=None).found is False
