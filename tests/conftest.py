from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from upstream_fixture import GIT_ENV, GUARD_PATCH_BODY, FixtureUpstream, make_upstream

from patchkit.core.fs import sha256_file


class _ForbiddenPopen:
    def __init__(self, *args, **kwargs):
        raise AssertionError(
            f"unit tests must not spawn processes (got {args[:1]!r}); "
            "mark the test @pytest.mark.integration"
        )


@pytest.fixture(autouse=True)
def _hermetic(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
              tmp_path_factory: pytest.TempPathFactory) -> None:
    """Unit tests may not spawn processes; every test gets its own cache and git identity."""
    marked = request.node.get_closest_marker("integration") or request.node.get_closest_marker(
        "realbuild")
    if not marked:
        monkeypatch.setattr(subprocess, "Popen", _ForbiddenPopen)
        monkeypatch.setattr(os, "system", _ForbiddenPopen)
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path_factory.mktemp("cache")))
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("PATCHKIT_PROJECT", raising=False)


def _with_git_env(make, root: Path):
    """Session fixtures run outside the per-test env: give git its identity here."""
    old = os.environ.copy()
    os.environ.update(GIT_ENV)
    os.environ["GIT_CONFIG_GLOBAL"] = os.devnull
    try:
        return make(root)
    finally:
        os.environ.clear()
        os.environ.update(old)


@pytest.fixture(scope="session")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> FixtureUpstream:
    """The synthetic upstream repo (built once per session; tests must not modify it)."""
    return _with_git_env(make_upstream, tmp_path_factory.mktemp("upstream"))


@pytest.fixture(scope="session")
def drift(tmp_path_factory: pytest.TempPathFactory):
    """An upstream whose history breaks a patch and later merges it (tests/drift_fixture.py)."""
    from drift_fixture import make_drift_upstream

    return _with_git_env(make_drift_upstream, tmp_path_factory.mktemp("drift"))


def run_cli(project: Path, *args: str):
    """`patchkit --project PROJECT ARGS...` in-process."""
    from click.testing import CliRunner

    from patchkit.cli import main

    return CliRunner().invoke(main, ["--project", str(project), *args], catch_exceptions=False)


GUARD_HEADER = """\
Subject: rpc: let zero-byte tensors pass the bounds check
Why: zero-element views carry a data pointer past the slice end
Upstream-Status: pending
When: {when}
Default: yes
Experimental: no

"""


def write_patch(patches: Path, filename: str, body: str, *, header: str | None = None,
                when: str = "..", series: bool = True) -> Path:
    """Write a patch file and (by default) append it to the series with its hash."""
    path = patches / filename
    path.write_text((header if header is not None else GUARD_HEADER.format(when=when)) + body)
    if series:
        with (patches / "series").open("a") as f:
            f.write(f"{filename} sha256={sha256_file(path)}\n")
    return path


def write_recipe(project: Path, name: str, *, url: str, commit: str, extra: str = "",
                 targets: str = '["fixture-cli", "fixture-rpc-server"]',
                 patches: str | None = None) -> Path:
    text = f'name = "{name}"\ndescription = "fixture recipe"\n'
    if patches is not None:
        text += f"patches = {patches}\n"
    text += f'\n[upstream]\nurl = "{url}"\ncommit = "{commit}"\n'
    text += f'\n[build]\ntargets = {targets}\n\n[build.defines]\nFIXTURE_RPC = true\n'
    text += extra
    path = project / "recipes" / f"{name}.toml"
    path.write_text(text)
    return path


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
