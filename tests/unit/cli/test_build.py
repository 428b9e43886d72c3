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


# -- the shared compile cache: refused before anything runs (no process may start here) ----

SECRET = "s3cr3t-Pa55"


@pytest.mark.parametrize(("args", "needle"), [
    (["--cache-remote", f"redis://:{SECRET}@cache.lan:port"], "--cache-remote 'redis://***@cache.lan:port': is not a valid URL"),
    (["--cache-remote", "ftp://cache.lan"], "unknown scheme 'ftp://'"),
    (["--cache-remote", "s3://bucket", "--launcher", "ccache"], "ccache cannot store to s3"),
    (["--cache-remote", "redis://h", "--launcher", "none"], "launcher none"),
])
def test_bad_cache_remote_is_one_line_exit_2(project: Path, tmp_path: Path, args: list[str],
                                             needle: str) -> None:
    r = build(project, tmp_path / "out", *args)
    assert_error(r, 2, needle)
    assert SECRET not in r.output
    assert not (tmp_path / "out").exists()


def test_bad_cache_remote_from_the_environment(project: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATCHKIT_CACHE_REMOTE", f"redis//:{SECRET}@h")
    r = build(project, tmp_path / "out")
    assert_error(r, 2, "PATCHKIT_CACHE_REMOTE", "is not a URL")
    assert SECRET not in r.output
    monkeypatch.setenv("PATCHKIT_LAUNCHER", "distcc")
    monkeypatch.delenv("PATCHKIT_CACHE_REMOTE")
    assert_error(build(project, tmp_path / "out"), 2, "PATCHKIT_LAUNCHER: 'distcc' is not one of")


def test_recipe_cache_keys(project: Path, upstream: FixtureUpstream, tmp_path: Path) -> None:
    recipe = write_recipe(project, "fixture", url=str(upstream.path), commit=upstream.head)
    base = recipe.read_text()

    def with_build(line: str) -> None:
        recipe.write_text(base.replace("[build]\n", f"[build]\n{line}\n", 1))

    with_build(f'cache_remote = "redis://:{SECRET}@cache.lan"')
    r = build(project, tmp_path / "out")
    assert_error(r, 3, "recipes/fixture.toml: build.cache_remote", "has credentials")
    assert SECRET not in r.output
    with_build('cache_remote = "redis:/cache.lan"')
    assert_error(build(project, tmp_path / "out"), 3, "build.cache_remote", "is not a URL")
    with_build('launcher = "scache"')
    assert_error(build(project, tmp_path / "out"), 3, "build.launcher: 'scache' is not one of",
                 'did you mean "sccache"')
    with_build("cache_remote = 6379")
    assert_error(build(project, tmp_path / "out"), 3, "build.cache_remote: must be str")
