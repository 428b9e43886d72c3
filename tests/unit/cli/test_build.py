"""`patchkit build` and `patchkit list` refusals that come before any process runs: one
line, the right exit code, nothing half-done."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from patchkit.cli import main
from tests.fixtures.project import assert_error, build, invoke, write_recipe
from tests.fixtures.upstream import FixtureUpstream


def test_unknown_recipe(project: Path, tmp_path: Path) -> None:
    r = build(project, tmp_path / "out", recipe="fixtur")
    assert_error(r, 3, "no recipe named 'fixtur'", 'did you mean "fixture"')
    assert not (tmp_path / "out").exists()


def test_bad_series_and_missing_series(project: Path, tmp_path: Path) -> None:
    (project / "patches" / "series").write_text("0001-zero-nbytes-guard.patch deadbeef\n")
    assert_error(build(project, tmp_path / "out"), 5, "patches/series:1: expected")
    (project / "patches" / "series").unlink()
    assert_error(build(project, tmp_path / "out"), 5, "series is missing")


def test_bad_recipe_via_cli(project: Path, tmp_path: Path) -> None:
    (project / "recipes" / "fixture.toml").write_text("name = [\n")
    assert_error(build(project, tmp_path / "out"), 3, "recipes/fixture.toml: not valid TOML")


def test_bad_jobs_is_a_usage_error(project: Path, tmp_path: Path) -> None:
    r = invoke(project, "build", "fixture", "-j", "0")
    assert r.exit_code == 2
    assert "Invalid value" in r.output


def test_no_project_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = CliRunner().invoke(main, ["--project", str(tmp_path), "list"])
    assert r.exit_code == 2
    assert "is not a patchkit project" in r.output


def test_list_shows_recipes_and_patches(project: Path) -> None:
    r = invoke(project, "list")
    assert r.exit_code == 0, r.output
    assert "zero-nbytes-guard" in r.output and "fixture" in r.output and "pending" in r.output


def test_list_shows_gpu_archs_and_flags_a_bad_family(project: Path, upstream: FixtureUpstream) -> None:
    write_recipe(project, "gpu", url=str(upstream.path), commit=upstream.head,
                 extra='\n[cuda]\narchs = ["pascal", "turing", 86]\n')
    write_recipe(project, "typo", url=str(upstream.path), commit=upstream.head,
                 extra='\n[cuda]\narchs = ["pascall"]\n')
    r = invoke(project, "list")
    assert r.exit_code == 3, r.output
    assert "CUDA sm_60,61,75,86" in r.output
    assert "invalid" in r.output and "pascall" in r.output
