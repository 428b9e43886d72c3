"""`patchkit doctor`'s report (doctor.survey) on fake machines: tools found by PATH,
replayed outputs, and a verdict per recipe."""

from __future__ import annotations

import json
from pathlib import Path

from patchkit.doctor.survey import Tool, build_report, recipe_verdict
from patchkit.model.recipe import load_recipe
from tests.fixtures.cuda import (
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
    proj, series = doctor_project(tmp_path)
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
    proj, series = doctor_project(tmp_path)
    env, run, _ = _doctor_machine(tmp_path, NVCC_12_4)
    rep = build_report(proj, series, cuda_root=None, env=env, run=run, os_name="linux", sites=[])
    v = {x.recipe: x for x in rep.verdicts}
    assert v["cuda-pascal-ampere"].ok, v["cuda-pascal-ampere"]
    assert "CUDA 12.4" in v["cuda-pascal-ampere"].notes[0]
    assert not v["windows-cuda-pascal-ampere"].ok


def test_doctor_on_windows_needs_a_developer_prompt(tmp_path: Path) -> None:
    proj, series = doctor_project(tmp_path)
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
