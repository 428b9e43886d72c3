"""`patchkit doctor`'s C library floors: the host's glibc and each build root (prepared,
or what preparing it needs), and the verdict of a recipe that builds in a root."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from patchkit.doctor import survey
from patchkit.doctor.survey import Tool, floors, recipe_verdict
from tests.fixtures.sysroot import fake_root
from tests.unit.doctor.test_survey import _shipped, _tools


def _no_toolkit(spec: object) -> object:
    raise AssertionError("a CPU recipe needs no CUDA toolkit")


def test_floors_list_the_host_and_every_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(survey, "host_glibc", lambda: "2.36")
    fake_root(tmp_path)
    got = {f.where: f for f in floors(_tools("bwrap", "debootstrap"), tmp_path, os_name="linux")}
    assert list(got) == ["host", "debian11", "debian12"]
    assert (got["host"].glibc, got["host"].ready) == ("2.36", True)
    assert (
        got["debian11"].ready and got["debian11"].glibc == "2.31" and "debian11@abab" in got["debian11"].how
    )
    assert not got["debian12"].ready
    assert got["debian12"].how.startswith("not prepared: `patchkit root prepare debian12`")
    assert got["debian12"].to_json()["glibcxx"] == "3.4.30"


def test_floors_say_what_to_install(tmp_path: Path) -> None:
    fake_root(tmp_path)
    got = {f.where: f for f in floors(_tools(), tmp_path, os_name="linux")}
    assert not got["debian11"].ready and "apt install bubblewrap" in got["debian11"].how
    assert got["debian12"].how == "not prepared; needs apt install debootstrap bubblewrap"
    assert floors(_tools(), tmp_path, os_name="windows") == ()


def test_a_root_recipe_needs_its_root_prepared(tmp_path: Path) -> None:
    r = _shipped("cpu-rpc-portable")
    tools = _tools("cmake", "ninja", "c++", "bwrap")

    def verdict(cache: Path | None, tools: dict[str, Tool] = tools) -> survey.Verdict:
        return recipe_verdict(r, os_name="linux", tools=tools, toolkit_for=_no_toolkit, cache=cache)  # type: ignore[arg-type]

    v = verdict(tmp_path)
    assert (v.ok, v.why) == (False, "its build root debian11 is not prepared")
    assert v.todo.startswith("patchkit root prepare debian11")
    fake_root(tmp_path)
    v = verdict(tmp_path)
    assert v.ok and v.notes == ("builds in the root debian11 (Debian bullseye: floor GLIBC_2.31)",)
    v = verdict(tmp_path, _tools("cmake", "ninja", "c++"))
    assert (v.ok, v.todo) == (False, "apt install bubblewrap")
    odd = dataclasses.replace(r, build=dataclasses.replace(r.build, root="debian9"))
    assert (
        "not a root patchkit knows"
        in recipe_verdict(
            odd,
            os_name="linux",
            tools=tools,
            toolkit_for=_no_toolkit,
            cache=tmp_path,  # type: ignore[arg-type]
        ).why
    )


def test_a_floor_without_a_root_is_noted_when_the_host_is_newer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(survey, "host_glibc", lambda: "2.36")
    r = _shipped("cpu-rpc-portable")
    plain = dataclasses.replace(r, build=dataclasses.replace(r.build, root=None))
    v = recipe_verdict(plain, os_name="linux", tools=_tools("cmake", "ninja", "c++"), toolkit_for=_no_toolkit)  # type: ignore[arg-type]
    assert v.ok and v.notes[0].startswith("its floor is GLIBC_2.31 and this machine's glibc is 2.36")


def test_host_glibc_reads_this_machine() -> None:
    got = survey.host_glibc()
    assert got is None or survey.version_key(got) >= (2, 17)
