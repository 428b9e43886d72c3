"""`patchkit ci-template` (release.ci): the workflow's structure and its build matrix."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.release.ci import DEFAULT_CUDA, RUNNERS, MatrixEntry, matrix_from_recipes, render_workflow
from patchkit.spec.recipe import Recipe, load_recipe
from patchkit.spec.series import load_series
from tests.fixtures.paths import REPO
from tests.fixtures.release import (
    workflow,
)


def test_ci_template_structure(project: Path) -> None:
    yaml = pytest.importorskip("yaml")
    text = workflow(project)
    doc = yaml.safe_load(text)
    on = doc.get("on", doc.get(True))  # PyYAML reads the key `on` as True
    assert "push" in on and "workflow_dispatch" in on
    jobs = doc["jobs"]
    assert set(jobs) == {"check", "build", "publish"}
    assert jobs["build"]["needs"] == "check" and jobs["publish"]["needs"] == "build"
    assert "patchkit check" in jobs["check"]["steps"][-1]["run"]
    assert "cuda-pascal-ampere fixture windows-cuda12" in jobs["check"]["steps"][-1]["run"]
    matrix = jobs["build"]["strategy"]["matrix"]["include"]
    assert matrix == [
        {"recipe": "cuda-pascal-ampere", "runner": "ubuntu-22.04", "cuda": "12.4.1", "cross": ""},
        {"recipe": "fixture", "runner": "ubuntu-22.04", "cuda": "", "cross": ""},
        {"recipe": "windows-cuda12", "runner": "windows-2022", "cuda": "12.4.1", "cross": ""},
    ]
    steps = jobs["build"]["steps"]
    uses = [s.get("uses", "").split("@")[0] for s in steps]  # pinned by sha: test_ci_pins.py
    assert "ilammy/msvc-dev-cmd" in uses and "actions/cache" in uses
    cache = next(s for s in steps if s.get("uses", "").startswith("actions/cache@"))
    assert cache["with"]["path"] == ".ccache"
    runs = " ".join(s.get("run", "") for s in steps)
    assert "patchkit build" in runs and "patchkit release" in runs and "patchkit verify" in runs
    publish = " ".join(s.get("run", "") for s in jobs["publish"]["steps"])
    assert "SHA256SUMS" in publish and "gh release upload" in publish
    assert jobs["publish"]["permissions"] == {"contents": "write"}
    assert "@@" not in text


def test_render_workflow_needs_entries() -> None:
    with pytest.raises(ValueError):
        render_workflow([])
    text = render_workflow([MatrixEntry(recipe="cpu-rpc", runner="ubuntu-22.04", cuda="")])
    assert '- recipe: "cpu-rpc"' in text


def test_ci_template_cross_builds_windows_on_linux() -> None:
    from patchkit.release.ci import matrix_from_recipes

    root = REPO
    series = load_series(root / "patches")
    recipes = [
        load_recipe(root / "recipes" / f"{n}.toml", root, series)
        for n in ("windows-cpu-rpc", "windows-cuda-pascal-ampere")
    ]
    by_name = {e.recipe: e for e in matrix_from_recipes(recipes)}
    assert by_name["windows-cpu-rpc"].runner.startswith("ubuntu")
    assert by_name["windows-cpu-rpc"].cross == "mingw"
    assert by_name["windows-cuda-pascal-ampere"].runner.startswith("windows")
    assert by_name["windows-cuda-pascal-ampere"].cross == ""


def _shipped(*names: str) -> list[Recipe]:
    series = load_series(REPO / "patches")
    return [load_recipe(REPO / "recipes" / f"{n}.toml", REPO, series) for n in names]


def test_matrix_is_sorted_with_runner_cuda_and_cross_per_recipe() -> None:
    recipes = _shipped("windows-cpu-rpc", "cuda-pascal-ampere", "cpu-rpc")
    assert matrix_from_recipes(recipes) == [
        MatrixEntry(recipe="cpu-rpc", runner=RUNNERS["linux"], cuda=""),
        MatrixEntry(recipe="cuda-pascal-ampere", runner=RUNNERS["linux"], cuda=DEFAULT_CUDA),
        MatrixEntry(recipe="windows-cpu-rpc", runner=RUNNERS["linux"], cuda="", cross="mingw"),
    ]
    assert [e.cuda for e in matrix_from_recipes(recipes, cuda="12.6.3")] == ["", "12.6.3", ""]


def test_render_workflow_fills_both_slots_and_quotes_values() -> None:
    text = render_workflow(
        [
            MatrixEntry(recipe="a", runner="ubuntu-22.04", cuda="12.4.1"),
            MatrixEntry(recipe='we"ird', runner="windows-2022", cuda="", cross=""),
        ]
    )
    assert "@@" not in text
    assert '- recipe: "a"\n' in text and 'runner: "ubuntu-22.04"' in text and 'cuda: "12.4.1"' in text
    assert '- recipe: "we\\"ird"' in text  # YAML never retypes or breaks on a value
    assert 'a we"ird' in text  # @@RECIPES@@: the names `patchkit check` runs over


def test_ci_cache_gha_and_secret_blocks() -> None:
    yaml = pytest.importorskip("yaml")
    from patchkit.release.ci import CiCache, parse_ci_cache

    entries = [MatrixEntry(recipe="cpu-rpc", runner="ubuntu-22.04", cuda="")]
    plain = render_workflow(entries)
    assert "PATCHKIT_CACHE_REMOTE" not in plain and "@@" not in plain

    def build_steps(text: str) -> list[dict]:
        return yaml.safe_load(text)["jobs"]["build"]["steps"]

    gha = render_workflow(entries, cache=parse_ci_cache("gha"))
    steps = build_steps(gha)
    names = [s.get("name") for s in steps]
    i = names.index("Build")
    assert steps[i]["env"] == {"PATCHKIT_LAUNCHER": "sccache", "PATCHKIT_CACHE_REMOTE": "gha"}
    assert names.index("Install sccache (shared compile cache)") < i
    script = next(s for s in steps if s.get("uses", "").startswith("actions/github-script@"))["with"][
        "script"
    ]
    assert "ACTIONS_RESULTS_URL" in script and "ACTIONS_RUNTIME_TOKEN" in script
    assert len(steps) == len(build_steps(plain)) + 2

    secret = render_workflow(entries, cache=parse_ci_cache("secret:CACHE_URL"))
    steps = build_steps(secret)
    build = next(s for s in steps if s.get("name") == "Build")
    assert build["env"] == {
        "PATCHKIT_LAUNCHER": "ccache",
        "PATCHKIT_CACHE_REMOTE": "${{ secrets.CACHE_URL }}",
    }
    assert len(steps) == len(build_steps(plain))  # only the Build step changes
    assert parse_ci_cache("secret:X", "sccache") == CiCache(backend="secret", secret="X", launcher="sccache")
    for bad in ("secret:", "secret:GITHUB_TOKEN", "secret:a-b", "redis://h", "GHA"):
        with pytest.raises(ValueError):
            parse_ci_cache(bad)
    with pytest.raises(ValueError, match="sccache's"):
        parse_ci_cache("gha", "ccache")
