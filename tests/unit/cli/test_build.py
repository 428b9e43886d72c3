"""`patchkit build` and `patchkit list` refusals that come before any process runs: one
line, the right exit code, nothing half-done."""

from __future__ import annotations

import os
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


@pytest.mark.parametrize("jobs", ["99999999999999999999", "4097", "-1", "two", "1e3", ""])
def test_absurd_jobs_are_one_line_exit_2(project: Path, tmp_path: Path, jobs: str) -> None:
    r = invoke(project, "build", "fixture", "--out", str(tmp_path / "out"), "-j", jobs)
    assert r.exit_code == 2 and r.output.count("error: ") == 1, r.output
    assert "CMake" not in r.output and len(r.output.splitlines()) <= 3
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["99999999999999999999", "0", "-3", "lots", "4097"])
def test_a_bad_parallel_level_in_the_environment_is_exit_2(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    from patchkit.core.paths import cache_dir

    monkeypatch.setenv("CMAKE_BUILD_PARALLEL_LEVEL", value)
    r = invoke(project, "build", "fixture", "--out", str(tmp_path / "out"))
    assert_error(r, 2, f"CMAKE_BUILD_PARALLEL_LEVEL={value!r} is not a job count (1-4096)", "-j N")
    assert not cache_dir().exists() or not any(cache_dir().iterdir())  # nothing started


@pytest.mark.parametrize("where", ["cache", "cache/work/fixture-1/build", "."])
def test_an_out_dir_in_or_around_the_cache_is_refused_before_anything_runs(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    r = invoke(project, "build", "fixture", "--out", str(tmp_path / where))
    assert_error(r, 2, "patchkit's cache")
    assert not (cache / "lock").exists() and not (cache / "repos").exists()


def test_an_out_dir_of_user_files_is_refused_before_anything_runs(project: Path, tmp_path: Path) -> None:
    from patchkit.core.paths import cache_dir

    out = tmp_path / "Documents"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    (out / "build-info.json").write_text("{}")
    r = invoke(project, "build", "fixture", "--out", str(out))
    assert_error(r, 2, f"{out} is not a patchkit output dir", "unknown build-info schema")
    assert sorted(os.listdir(out)) == ["build-info.json", "thesis.tex"]
    assert not (cache_dir() / "repos").exists()  # refused before the clone


# -- the shared compile cache: refused before anything runs (no process may start here) ----

SECRET = "s3cr3t-Pa55"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["--cache-remote", f"redis://:{SECRET}@cache.lan:port"],
            "--cache-remote 'redis://***@cache.lan:port': is not a valid URL",
        ),
        (["--cache-remote", "ftp://cache.lan"], "unknown scheme 'ftp://'"),
        (["--cache-remote", "s3://bucket", "--launcher", "ccache"], "ccache cannot store to s3"),
        (["--cache-remote", "redis://h", "--launcher", "none"], "launcher none"),
    ],
)
def test_bad_cache_remote_is_one_line_exit_2(
    project: Path, tmp_path: Path, args: list[str], needle: str
) -> None:
    r = build(project, tmp_path / "out", *args)
    assert_error(r, 2, needle)
    assert SECRET not in r.output
    assert not (tmp_path / "out").exists()


def test_bad_cache_remote_from_the_environment(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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
    assert_error(
        build(project, tmp_path / "out"),
        3,
        "build.launcher: 'scache' is not one of",
        'did you mean "sccache"',
    )
    with_build("cache_remote = 6379")
    assert_error(build(project, tmp_path / "out"), 3, "build.cache_remote: must be str")
