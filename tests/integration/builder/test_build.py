"""The whole `patchkit build` pipeline, for real, on the synthetic upstream."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from patchkit.cli import main
from patchkit.core.lock import cache_lock
from patchkit.core.paths import cache_dir
from tests.fixtures.project import assert_error, build, write_patch, write_recipe
from tests.fixtures.upstream import GUARD_PATCH_BODY, FixtureUpstream, commit_files, git

EXE = ".exe" if sys.platform == "win32" else ""


def info(out: Path) -> dict:
    return json.loads((out / "build-info.json").read_text())


def worktree(project: Path) -> Path:
    work = cache_dir() / "work"
    (wt,) = [p / "src" for p in work.iterdir() if p.name.startswith("fixture-")]
    return wt


def test_build_end_to_end(project: Path, upstream: FixtureUpstream, tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = build(project, out)
    assert r.exit_code == 0, r.output
    data = info(out)
    assert data["upstream"]["commit"] == upstream.head
    assert data["upstream"]["commit_date"].startswith("2026-01-03")
    assert data["upstream"]["build_number"] == 3  # c1..c3, as `git rev-list --count` says
    assert [p["result"] for p in data["patches"]] == ["applied"]
    assert data["patches"][0]["name"] == "zero-nbytes-guard"
    assert len(data["series_hash"]) == 64 and len(data["identity"]) == 64
    assert data["cmake"]["defines"]["FIXTURE_RPC"] == "ON"
    assert data["cmake"]["defines"]["GGML_NATIVE"] == "OFF"
    assert data["targets"] == ["fixture-cli", "fixture-rpc-server"]
    assert {"cmake", "ninja", "c_compiler"} <= set(data["tools"])
    assert set(data["timings"]) >= {"source", "patch", "configure", "build"}
    paths = {a["path"]: a for a in data["artifacts"]}
    # executables from the File API, plus the shared library they link (not fixture-bench)
    assert f"bin/fixture-cli{EXE}" in paths and f"bin/fixture-rpc-server{EXE}" in paths
    assert not any("fixture-bench" in p for p in paths)
    libs = [a for a in data["artifacts"] if a["type"] == "SHARED_LIBRARY"]
    assert not any((out / "bin" / p).is_symlink() for p in os.listdir(out / "bin"))
    assert libs and libs[0]["target"] == "fixture-core"
    for a in data["artifacts"]:
        assert (out / a["path"]).stat().st_size == a["size"]
    assert (out / "LICENSE").read_text().startswith("MIT License")
    # the copied binary runs from the out dir (rpath $ORIGIN) and carries the patch
    res = subprocess.run([str(out / "bin" / f"fixture-cli{EXE}")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "bounds(zero past end) = 1" in res.stdout
    # sparse checkout left the model blob out
    wt = worktree(project)
    assert (wt / "src" / "rpc.c").is_file()
    assert not (wt / "models" / "tiny.gguf").exists()


def test_second_build_reuses_everything(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert build(project, out).exit_code == 0
    cache_file = next((cache_dir() / "work").glob("fixture-*/build/CMakeCache.txt"))
    mtime = cache_file.stat().st_mtime_ns
    r = build(project, out)
    assert r.exit_code == 0, r.output
    assert "up to date" in r.output
    assert "configure inputs unchanged" in r.output
    assert "cloning" not in r.output
    assert cache_file.stat().st_mtime_ns == mtime  # no re-configure
    assert [p["result"] for p in info(out)["patches"]] == ["applied"]
    # never double-applied: the worktree's rpc.c holds the guard once
    assert (worktree(project) / "src" / "rpc.c").read_text().count("nbytes == 0") == 1


def test_changed_define_reconfigures_and_clean_starts_fresh(
    project: Path, tmp_path: Path, upstream: FixtureUpstream
) -> None:
    out = tmp_path / "out"
    assert build(project, out).exit_code == 0
    write_recipe(
        project,
        "fixture",
        url=str(upstream.path),
        commit=upstream.head,
        extra="FIXTURE_BUILD_TESTS = true\n",
        targets='["fixture-cli", "fixture-rpc-server", "fixture-test"]',
    )
    r = build(project, out)
    assert r.exit_code == 0, r.output
    assert "configure inputs unchanged" not in r.output
    assert any(a["path"].startswith("bin/fixture-test") for a in info(out)["artifacts"])
    r = build(project, out, "--clean")
    assert r.exit_code == 0, r.output
    assert "--clean" in r.output


def test_patch_already_upstream_is_not_applied_twice(
    project: Path, tmp_path: Path, upstream: FixtureUpstream
) -> None:
    # a clone of the upstream where the guard has been merged
    fork = tmp_path / "fork"
    git(tmp_path, "clone", "-q", str(upstream.path), str(fork))
    text = (
        (fork / "src" / "rpc.c")
        .read_text()
        .replace(
            "    /* reject",
            "    if (nbytes == 0) {\n        return 1; /* zero-byte views carry no data */\n    }\n    /* reject",
        )
    )
    merged = commit_files(fork, {"src/rpc.c": text}, "rpc: merge the guard")
    write_recipe(project, "fixture", url=str(fork), commit=merged)
    out = tmp_path / "out"
    r = build(project, out)
    assert r.exit_code == 0, r.output
    assert "already present upstream" in r.output
    assert [p["result"] for p in info(out)["patches"]] == ["already-present"]


def test_commit_not_in_upstream(project: Path, upstream: FixtureUpstream, tmp_path: Path) -> None:
    write_recipe(project, "fixture", url=str(upstream.path), commit="b" * 40)
    r = build(project, tmp_path / "out")
    assert_error(r, 4, f"commit {'b' * 40} is not in")
    assert not (tmp_path / "out").exists()


def test_ref_resolving_elsewhere(project: Path, upstream: FixtureUpstream, tmp_path: Path) -> None:
    write_recipe(project, "fixture", url=str(upstream.path), commit=upstream.head)
    recipe = project / "recipes" / "fixture.toml"
    recipe.write_text(
        recipe.read_text()
        .replace("[build]", 'ref = "v2"\n\n[build]', 1)
        .replace(f'commit = "{upstream.head}"\nref', f'commit = "{upstream.head}"\nref')
    )
    r = build(project, tmp_path / "out")
    assert_error(r, 4, "upstream.ref 'v2' resolves to", upstream.commits["c2"][:12])
    # the same tag with the right commit builds
    recipe.write_text(recipe.read_text().replace(upstream.head, upstream.commits["c2"]))
    assert build(project, tmp_path / "out").exit_code == 0


def test_upstream_not_a_repo(project: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    r = build(project, tmp_path / "out", "--upstream", str(tmp_path / "empty"))
    assert_error(r, 4, "is not a git repository")
    assert not list((cache_dir() / "repos").glob("*")) if (cache_dir() / "repos").exists() else True


def test_patch_hash_mismatch(project: Path, tmp_path: Path) -> None:
    patch = project / "patches" / "0001-zero-nbytes-guard.patch"
    patch.write_text(patch.read_text() + "\n")
    r = build(project, tmp_path / "out")
    assert_error(r, 5, "sha256 is", "the series records")
    assert not (tmp_path / "out").exists()


def test_patch_conflict_names_file_and_hunk_and_resets(project: Path, tmp_path: Path) -> None:
    bad = GUARD_PATCH_BODY.replace("/* reject anything", "/* refuse anything")
    (project / "patches" / "series").write_text("")
    write_patch(project / "patches", "0001-zero-nbytes-guard.patch", GUARD_PATCH_BODY)
    write_patch(
        project / "patches",
        "0002-broken.patch",
        bad.replace("+    if (nbytes == 0) {", "+    if (nbytes == 1) {"),
    )
    r = build(project, tmp_path / "out")
    assert_error(
        r, 5, "patch 0002-broken.patch does not apply", "src/rpc.c hunk #1 (@@ -1,6 +1,9 @@)", "git -C"
    )
    wt = worktree(project)
    assert git(wt, "status", "--porcelain") == ""  # reset to the pinned commit: patch 1 undone too
    assert "nbytes == 0" not in (wt / "src" / "rpc.c").read_text()
    assert not (tmp_path / "out").exists()


def test_missing_target_fails_before_building(
    project: Path, upstream: FixtureUpstream, tmp_path: Path
) -> None:
    write_recipe(
        project,
        "fixture",
        url=str(upstream.path),
        commit=upstream.head,
        targets='["fixture-cli", "fixture-rpc-srever"]',
    )
    r = build(project, tmp_path / "out")
    assert_error(r, 6, "defines no target 'fixture-rpc-srever'", 'did you mean "fixture-rpc-server"')
    assert "ninja" not in r.output.split("configure")[-1].split("error")[0] or True
    assert not (tmp_path / "out").exists()


def test_compile_error_shows_log_tail(project: Path, tmp_path: Path) -> None:
    (project / "patches" / "series").write_text("")
    write_patch(
        project / "patches",
        "0001-zero-nbytes-guard.patch",
        GUARD_PATCH_BODY.replace("return 1; /* zero-byte", "return 1 /* zero-byte"),
    )
    r = build(project, tmp_path / "out")
    assert_error(r, 6, "the build failed", "full log:", "build.log")
    assert "error" in r.output.split("the build failed")[1]  # compiler's message in the tail
    assert not (tmp_path / "out").exists()


def test_lock_busy_says_who(project: Path, tmp_path: Path) -> None:
    with cache_lock(cache_dir(), "patchkit build other"):
        r = build(project, tmp_path / "out")
    assert_error(r, 9, "is in use by pid", "patchkit build other")


def test_out_dir_not_ours_is_left_alone(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "precious.txt").write_text("keep")
    r = build(project, out)
    assert_error(r, 2, "is not a patchkit output dir")
    assert (out / "precious.txt").read_text() == "keep"
    assert sorted(os.listdir(out)) == ["precious.txt"]


def test_user_edits_in_worktree_are_not_discarded(project: Path, tmp_path: Path) -> None:
    assert build(project, tmp_path / "out").exit_code == 0
    wt = worktree(project)
    (wt / "src" / "core.c").write_text((wt / "src" / "core.c").read_text() + "/* mine */\n")
    r = build(project, tmp_path / "out")
    assert_error(r, 4, "has changes patchkit did not make", "--clean")
    assert "/* mine */" in (wt / "src" / "core.c").read_text()


@pytest.mark.parametrize("stage", ["apply_series", "configure", "build", "write_output"])
def test_ctrl_c_in_any_stage_leaves_the_cache_usable(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage: str
) -> None:
    import patchkit.builder.pipeline as pl
    import patchkit.builder.source as source

    target = {
        "apply_series": (source, "apply_series"),
        "configure": (pl.cm, "configure"),
        "build": (pl.cm, "build"),
        "write_output": (pl, "write_output"),
    }[stage]
    real = getattr(*target)

    def interrupted(*args, **kwargs):
        real(*args, **kwargs)  # the stage did (part of) its work, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(*target, interrupted)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["--project", str(project), "build", "fixture", "--out", str(out)])
    assert r.exit_code == 130, r.output
    assert "error: interrupted" in r.output
    monkeypatch.setattr(*target, real)
    r = build(project, out)
    assert r.exit_code == 0, r.output
    assert [p["result"] for p in info(out)["patches"]] == ["applied"]
    assert (worktree(project) / "src" / "rpc.c").read_text().count("nbytes == 0") == 1
    assert not list(out.parent.glob(".out.tmp-*"))  # no half-written output left behind


def test_user_commit_in_worktree_is_not_discarded(project: Path, tmp_path: Path) -> None:
    assert build(project, tmp_path / "out").exit_code == 0
    wt = worktree(project)
    (wt / "src" / "core.c").write_text((wt / "src" / "core.c").read_text() + "/* mine */\n")
    git(wt, "commit", "-qam", "wip: my fix")
    r = build(project, tmp_path / "out")
    assert_error(r, 4, "has commits patchkit did not make", "wip: my fix", "--clean")
    assert git(wt, "log", "-1", "--format=%s") == "wip: my fix"


def test_edited_patch_is_caught_on_the_fast_path(project: Path, tmp_path: Path) -> None:
    assert build(project, tmp_path / "out").exit_code == 0
    patch = project / "patches" / "0001-zero-nbytes-guard.patch"
    patch.write_text(patch.read_text().replace("zero-byte views", "zero byte views"))
    r = build(project, tmp_path / "out")
    assert_error(r, 5, "sha256 is", "the series records")


def test_changed_sparse_exclude_reaches_the_worktree(
    project: Path, upstream: FixtureUpstream, tmp_path: Path
) -> None:
    assert build(project, tmp_path / "out").exit_code == 0
    assert (worktree(project) / "README.md").exists()
    recipe = project / "recipes" / "fixture.toml"
    recipe.write_text(
        recipe.read_text().replace("[build]\n", '[build]\nsparse_exclude = ["/README.md"]\n', 1)
    )
    assert build(project, tmp_path / "out").exit_code == 0
    assert not (worktree(project) / "README.md").exists()
    assert (worktree(project) / "src" / "rpc.c").exists()
