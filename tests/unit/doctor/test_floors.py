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
    assert (got["host"].state, got["host"].how) == ("host", "")  # the CLI words it
    d11 = got["debian11"]
    assert (d11.ready, d11.glibc, d11.state) == (True, "2.31", "prepared")
    assert d11.root is not None and d11.root.label.startswith("debian11@abab")
    assert (got["debian12"].ready, got["debian12"].state) == (False, "not-prepared")
    assert got["debian12"].to_json()["glibcxx"] == "3.4.30"


def test_floors_say_what_to_install(tmp_path: Path) -> None:
    fake_root(tmp_path)
    got = {f.where: f for f in floors(_tools(), tmp_path, os_name="linux")}
    assert (got["debian11"].ready, got["debian11"].state) == (False, "needs-bwrap")
    assert (got["debian12"].state, got["debian12"].packages) == (
        "needs-packages",
        ("debootstrap", "bubblewrap"),
    )
    assert got["debian12"].to_json()["packages"] == ["debootstrap", "bubblewrap"]
    assert floors(_tools(), tmp_path, os_name="windows") == ()


def test_a_root_recipe_needs_its_root_prepared(tmp_path: Path) -> None:
    r = _shipped("cpu-rpc-portable")
    tools = _tools("cmake", "ninja", "c++", "bwrap")

    def verdict(cache: Path | None, tools: dict[str, Tool] = tools) -> survey.Verdict:
        return recipe_verdict(r, os_name="linux", tools=tools, toolkit_for=_no_toolkit, cache=cache)  # type: ignore[arg-type]

    v = verdict(tmp_path)
    assert (v.ok, v.why) == (False, "its build root debian11 is not prepared")
    assert v.fix == survey.Fix(kind="prepare-root", root="debian11")
    fake_root(tmp_path)
    v = verdict(tmp_path)
    assert v.ok and v.facts == (survey.Fact(kind="in-root", root="debian11", suite="bullseye", floor="2.31"),)
    v = verdict(tmp_path, _tools("cmake", "ninja", "c++"))
    assert (v.ok, v.fix) == (False, survey.Fix(kind="install", packages=("bubblewrap",)))
    odd = dataclasses.replace(r, build=dataclasses.replace(r.build, root="debian9"))
    unknown = recipe_verdict(
        odd,
        os_name="linux",
        tools=tools,
        toolkit_for=_no_toolkit,  # type: ignore[arg-type]
        cache=tmp_path,
    )
    assert "not a root patchkit knows" in unknown.why
    assert unknown.fix == survey.Fix(kind="choose-root", choices=("debian11", "debian12"))


def test_a_floor_without_a_root_is_noted_when_the_host_is_newer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(survey, "host_glibc", lambda: "2.36")
    r = _shipped("cpu-rpc-portable")
    plain = dataclasses.replace(r, build=dataclasses.replace(r.build, root=None))
    v = recipe_verdict(plain, os_name="linux", tools=_tools("cmake", "ninja", "c++"), toolkit_for=_no_toolkit)  # type: ignore[arg-type]
    assert v.ok and v.facts[0] == survey.Fact(kind="host-newer", floor="2.31", glibc="2.36")


def test_host_glibc_reads_this_machine() -> None:
    got = survey.host_glibc()
    assert got is None or survey.version_key(got) >= (2, 17)
