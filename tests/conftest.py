"""Shared fixtures: a private cache and git identity per test, the synthetic upstreams
(built once per session), and a patchkit project for the fixture upstream."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fixtures.drift import DriftUpstream, make_drift_upstream
from tests.fixtures.project import write_patch, write_recipe
from tests.fixtures.upstream import GIT_ENV, GUARD_PATCH_BODY, FixtureUpstream, make_upstream, with_git_env


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every test gets its own cache and git identity, and no CI or project from outside.

    (Whether a test may spawn processes is decided by its folder: tests/unit/conftest.py.)
    """
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path_factory.mktemp("cache")))
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("PATCHKIT_PROJECT", raising=False)
    monkeypatch.delenv("PATCHKIT_MODEL", raising=False)


@pytest.fixture(scope="session")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> FixtureUpstream:
    """The synthetic upstream repo (built once per session; tests must not modify it)."""
    return with_git_env(make_upstream, tmp_path_factory.mktemp("upstream"))


@pytest.fixture(scope="session")
def drift(tmp_path_factory: pytest.TempPathFactory) -> DriftUpstream:
    """An upstream whose history breaks a patch and later merges it (tests/fixtures/drift.py)."""
    return with_git_env(make_drift_upstream, tmp_path_factory.mktemp("drift"))


@pytest.fixture
def project(tmp_path: Path, upstream: FixtureUpstream) -> Path:
    """A patchkit project (recipes/ + patches/) for the fixture upstream, with one patch."""
    proj = tmp_path / "project"
    (proj / "recipes").mkdir(parents=True)
    (proj / "patches").mkdir()
    (proj / "patches" / "series").write_text("# fixture series\n")
    write_patch(proj / "patches", "0001-zero-nbytes-guard.patch", GUARD_PATCH_BODY)
    write_recipe(proj, "fixture", url=str(upstream.path), commit=upstream.head)
    return proj
