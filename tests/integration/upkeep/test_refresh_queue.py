"""`patchkit refresh` stops only where a person is needed, on the queue of
tests/fixtures/refreshq.py: patches already upstream under each rule (found before merging,
dropped by --drop-upstreamed without a stop), a clean merge that would double lines,
--skip / --drop at a stop, hints whose command works (a non-default recipe, --workdir), a
recorded resolution replayed after --abort, a cascade, and what the stop message says."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from patchkit.spec.series import load_series
from patchkit.upkeep.refresh import RefreshOptions, RefreshStopped, refresh_start
from patchkit.upkeep.refresh.options import CascadeOf, ConflictedFile, LeftOut, UpstreamTouched
from tests.fixtures.drift import make_project, patch_header
from tests.fixtures.project import assert_error, invoke, run_cli
from tests.fixtures.refreshq import B_U5, GAMMA_CASE, make_refresh_queue, patches_for
from tests.fixtures.refreshq import PatchQueue as RefreshQueue
from tests.fixtures.upstream import GIT_ENV, git


@pytest.fixture(scope="module")
def rq(tmp_path_factory: pytest.TempPathFactory) -> RefreshQueue:
    old = os.environ.copy()
    os.environ.update(GIT_ENV)
    os.environ["GIT_CONFIG_GLOBAL"] = os.devnull
    try:
        return make_refresh_queue(tmp_path_factory.mktemp("rq"))
    finally:
        os.environ.clear()
        os.environ.update(old)


def series_files(proj: Path) -> list[str]:
    return [p.filename for p in load_series(proj / "patches").patches]


def hint_command(output: str, action: str) -> list[str]:
    """The argv of the hint's `patchkit refresh ... ACTION` command (without `patchkit`)."""
    m = re.search(r"`(patchkit refresh [^`]*" + re.escape(action) + r"[^`]*)`", output)
    assert m, output
    argv = shlex.split(m.group(1))
    assert argv[0] == "patchkit"
    return argv[1:]


@pytest.mark.parametrize(
    ("key", "rule", "commit"),
    [
        ("pid", "patch-id", "u1"),
        ("effect", "effect", "u4"),
    ],
)
def test_already_upstream_under_each_proving_rule_is_dropped_without_a_stop(
    rq: RefreshQueue, tmp_path: Path, key: str, rule: str, commit: str
) -> None:
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=patches_for(rq, key, "base"))
    res = invoke(proj, "refresh", "fixture", "--onto", rq.c["u6"], "--move-pin", "--drop-upstreamed")
    assert res.exit_code == 0, res.output
    sha = rq.c[commit]
    assert f"dropped 0001-{key}.patch: already upstream ({rule}" in res.stderr, res.stderr
    assert sha[:12] in res.stderr
    assert f"dropped   0001-{key}.patch" in res.stderr  # the result names it too
    assert series_files(proj) == ["0002-base.patch"]
    assert not (proj / "patches" / f"0001-{key}.patch").exists()
    assert rq.c["u6"] in (proj / "recipes" / "fixture.toml").read_text()


@pytest.mark.parametrize(
    ("key", "rule", "commit"),
    [
        ("pr", "pull-request #102", "u3"),
        ("words", "subject same words", "u3"),
    ],
)
def test_a_title_or_pull_request_alone_proposes_and_never_drops(
    rq: RefreshQueue, tmp_path: Path, key: str, rule: str, commit: str
) -> None:
    """A suggesting rule whose change is not there: kept and merged, proposed with the reason."""
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=patches_for(rq, key, "base"))
    res = invoke(proj, "refresh", "fixture", "--onto", rq.c["u6"], "--move-pin", "--drop-upstreamed")
    assert res.exit_code == 0, res.output
    assert f"dropped 0001-{key}.patch" not in res.stderr
    assert f"0001-{key}.patch: perhaps upstream ({rule}; only its" in res.stderr, res.stderr
    assert f"kept      0001-{key}.patch, perhaps upstream ({rule}" in res.stderr
    assert "not proven: `--drop PATCH` if it is" in res.stderr
    assert rq.c[commit][:12] in res.stderr
    assert series_files(proj) == [f"0001-{key}.patch", "0002-base.patch"]
    assert "check(22)" in (proj / "patches" / f"0001-{key}.patch").read_text()


def test_a_pull_request_named_in_the_prose_is_no_evidence(rq: RefreshQueue, tmp_path: Path) -> None:
    """The message only says "Similar to …/pull/102, though …" and upstream's change is
    another: the patch is kept; where the same title's change conflicts, it stops."""
    (file, header, body), base = patches_for(rq, "pr", "base")
    header = patch_header("tests: check two more") + (
        "Similar to https://github.com/ggml-org/llama.cpp/pull/102, though ours\n"
        "requires different checks.\n\n"
    )
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=[(file, header, body), base])
    res = invoke(proj, "refresh", "fixture", "--onto", rq.c["u6"], "--drop-upstreamed")
    assert res.exit_code == 0, res.output
    assert "0001-pr.patch: perhaps upstream (pull-request #102; only its pull request number" in res.stderr
    assert series_files(proj) == ["0001-pr.patch", "0002-base.patch"]
    # the same title, another change that conflicts: a stop that says what was suggested
    proj2 = make_project(tmp_path / "s", rq, pin=rq.c["r1"], patches=patches_for(rq, "subject"))
    res = run_cli(proj2, "refresh", "fixture", "--onto", rq.c["u6"], "--drop-upstreamed")
    assert_error(
        res, 5, "refresh stopped at 0001-subject.patch: conflicts in src/b.c", "perhaps upstream (subject"
    )


def test_a_suggestion_whose_change_is_there_is_dropped_with_both(rq: RefreshQueue, tmp_path: Path) -> None:
    (file, _, body), base = patches_for(rq, "prdone", "base")
    header = patch_header("tests: gamma checked (#102)")
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=[(file, header, body), base])
    res = invoke(proj, "refresh", "fixture", "--onto", rq.c["u6"], "--drop-upstreamed")
    assert res.exit_code == 0, res.output
    assert "dropped 0001-prdone.patch: already upstream (effect and pull-request #102): " in res.stderr
    assert rq.c["u3"][:12] in res.stderr
    assert series_files(proj) == ["0002-base.patch"]


def test_without_the_flag_an_upstream_patch_is_proposed_and_an_empty_one_stops(
    rq: RefreshQueue, tmp_path: Path
) -> None:
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=patches_for(rq, "pid", "effect"))
    workdir = tmp_path / "w"
    res = run_cli(proj, "refresh", "fixture", "--onto", rq.c["u6"], "--workdir", str(workdir))
    # found before merging: said at once, with the commit
    assert "0001-pid.patch: already upstream (patch-id " in res.stderr
    assert f"{rq.c['u1'][:12]} core: add a helper (#101); proposed for dropping" in res.stderr
    # merged, it is empty: a stop (git am stops there too), --skip drops it
    assert_error(res, 5, "refresh stopped at 0001-pid.patch: merged onto", "changes nothing")
    res = invoke(proj, *hint_command(res.output, "--skip"))
    assert_error(res, 5, "refresh stopped at 0002-effect.patch", "already upstream (effect)", rq.c["u4"][:12])
    res = invoke(proj, "refresh", "fixture", "--workdir", str(workdir), "--drop", "0002-effect.patch")
    assert res.exit_code == 0, res.output
    assert "dropped   0001-pid.patch: skipped at a stop" in res.stderr
    assert "dropped   0002-effect.patch: --drop" in res.stderr
    assert series_files(proj) == []


def test_a_clean_merge_that_doubles_lines_stops(rq: RefreshQueue, tmp_path: Path) -> None:
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=patches_for(rq, "dup"))
    workdir = tmp_path / "w"
    res = run_cli(proj, "refresh", "fixture", "--onto", rq.c["u6"], "--workdir", str(workdir))
    assert_error(
        res,
        5,
        "refresh stopped at 0001-dup.patch: the 3-way merge was clean but adds lines upstream added",
        "3 lines the patch adds are there twice now",
        f"upstream {rq.c['u3'][:12]} tests: a case for gamma (#102) added them",
    )
    tree = workdir / "tree"
    merged = (tree / "tests" / "t.c").read_text()
    assert merged.count(GAMMA_CASE) == 2  # what `git am -3` would have kept silently
    # the person keeps one copy; --continue takes it
    (tree / "tests" / "t.c").write_text(merged.replace(GAMMA_CASE, "", 1))
    git(tree, "add", "tests/t.c")
    res = invoke(proj, *hint_command(res.output, "--continue"))
    assert res.exit_code == 0, res.output
    assert "empty on top of" in res.stderr  # nothing of it was left: it leaves the series
    assert series_files(proj) == []


def test_skip_and_drop_at_a_stop(rq: RefreshQueue, tmp_path: Path) -> None:
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=patches_for(rq, "conflict", "base", "cascade"))
    res = run_cli(proj, "refresh", "fixture", "--onto", rq.c["u6"])
    assert_error(res, 5, "refresh stopped at 0001-conflict.patch: conflicts in src/b.c")
    # a patch already refreshed cannot be dropped; an unknown one is named
    res = invoke(proj, "refresh", "fixture", "--drop", "nope")
    assert_error(res, 2, "--drop nope: no such patch")
    # --drop alone takes the stopped patch only
    res = invoke(proj, "refresh", "fixture", "--drop", "cascade")
    assert_error(
        res, 2, "--drop alone drops that one", "`patchkit refresh fixture --continue --drop cascade`"
    )
    # --skip drops the stopped patch, --drop a later one (with it)
    res = invoke(proj, "refresh", "fixture", "--skip", "--drop", "cascade")
    assert res.exit_code == 0, res.output
    assert "dropped   0001-conflict.patch: skipped at a stop" in res.stderr
    assert "dropped   0003-cascade.patch: --drop" in res.stderr
    assert series_files(proj) == ["0002-base.patch"]
    assert "+    return x + 10;" in (proj / "patches" / "0002-base.patch").read_text()


@pytest.mark.parametrize("with_workdir", [True, False])
def test_the_hint_is_a_command_that_works(rq: RefreshQueue, tmp_path: Path, with_workdir: bool) -> None:
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=patches_for(rq, "conflict"))
    (proj / "recipes" / "fixture.toml").rename(proj / "recipes" / "my recipe.toml")
    extra = ["--workdir", str(tmp_path / "work dir")] if with_workdir else []
    # --abort's hint
    res = run_cli(proj, "refresh", "my recipe", "--onto", rq.c["u6"], *extra)
    assert_error(res, 5, "refresh stopped at 0001-conflict.patch")
    abort = hint_command(res.output, "--abort")
    assert abort[:2] == ["refresh", "my recipe"]
    assert ("--workdir" in abort) == with_workdir
    res = invoke(proj, *abort)
    assert res.exit_code == 0, res.output
    assert "refresh aborted" in res.stderr
    # --continue's
    res = run_cli(proj, "refresh", "my recipe", "--onto", rq.c["u6"], *extra)
    assert_error(res, 5, "refresh stopped at 0001-conflict.patch")
    cont = hint_command(res.output, "--continue")
    assert cont[:2] == ["refresh", "my recipe"]
    assert ("--workdir" in cont) == with_workdir
    # the file with markers is where the hint says; resolve it as the person would
    tree = Path(shlex.split(re.search(r"`git -C (.+?) add`", res.output).group(1))[0])  # type: ignore[union-attr]
    (tree / "src" / "b.c").write_text(B_U5.replace("return 2;", "return 3;"))
    git(tree, "add", "src/b.c")
    res = invoke(proj, *cont)
    assert res.exit_code == 0, res.output
    assert "updated   0001-conflict.patch" in res.stderr
    assert "-    return 2;\n+    return 3;" in (proj / "patches" / "0001-conflict.patch").read_text()


def test_a_recorded_resolution_is_replayed_after_abort(rq: RefreshQueue, tmp_path: Path) -> None:
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=patches_for(rq, "conflict", "base", "cascade"))
    start = ["refresh", "fixture", "--onto", rq.c["u6"], "--drop", "base"]
    res = run_cli(proj, *start)
    assert_error(res, 5, "refresh stopped at 0001-conflict.patch: conflicts in src/b.c")
    tree = Path(os.environ["PATCHKIT_CACHE"]) / "refresh" / "fixture" / "tree"
    text = (tree / "src" / "b.c").read_text()
    assert ">>>>>>> " in text and "(0001-conflict.patch)" in text  # the marker names the patch
    resolved = B_U5.replace("return 2;", "return 2 + 3;")
    (tree / "src" / "b.c").write_text(resolved)
    git(tree, "add", "src/b.c")
    res = invoke(proj, "refresh", "fixture", "--continue")
    assert "recorded 1 conflict resolution(s)" in res.stderr
    assert_error(res, 5, "refresh stopped at 0003-cascade.patch")
    records = list((Path(os.environ["PATCHKIT_CACHE"]) / "rerere").glob("*.json"))
    assert len(records) == 1
    res = invoke(proj, "refresh", "fixture", "--abort")
    assert res.exit_code == 0, res.output
    # started again: the first conflict resolves itself, the refresh stops at the next one
    res = run_cli(proj, *start)
    assert "0001-conflict.patch: src/b.c: reused a recorded resolution for 1 of 1 conflict(s)" in res.stderr
    assert_error(res, 5, "refresh stopped at 0003-cascade.patch")
    assert (tree / "src" / "b.c").read_text() == resolved  # replayed and committed
    assert "<<<<<<<" in (tree / "src" / "a.c").read_text()  # the next stop's own conflict
    res = invoke(proj, "refresh", "fixture", "--skip")
    assert res.exit_code == 0, res.output
    assert "reused 1 recorded conflict resolution(s)" in res.stderr
    assert "+    return 2 + 3;" in (proj / "patches" / "0001-conflict.patch").read_text()
    # a damaged record is never trusted: the conflict stops again
    records[0].write_text("{not json")
    proj2 = make_project(tmp_path / "again", rq, pin=rq.c["r1"], patches=patches_for(rq, "conflict"))
    res = run_cli(proj2, "refresh", "fixture", "--onto", rq.c["u6"])
    assert_error(res, 5, "refresh stopped at 0001-conflict.patch: conflicts in src/b.c")


def _stop(rq: RefreshQueue, proj: Path, workdir: Path, **kw: Any) -> RefreshStopped:
    """The engine's stop of a refresh of ``proj`` from r1 onto u6 (its fields, no words)."""
    series = load_series(proj / "patches")
    opts = RefreshOptions(
        repo=rq.path,
        patches=series.patches,
        patches_dir=proj / "patches",
        onto=rq.c["u6"],
        base=rq.c["r1"],
        workdir=workdir,
        **kw,
    )
    with pytest.raises(RefreshStopped) as stopped:
        refresh_start(opts)
    return stopped.value


def test_a_cascade_is_named_as_such(rq: RefreshQueue, tmp_path: Path) -> None:
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=patches_for(rq, "base", "cascade"))
    stop = _stop(rq, proj, tmp_path / "w1", drop=("0001-base.patch",))
    assert (stop.kind, stop.patch, stop.files, stop.cascade) == (
        "conflict",
        "0002-cascade.patch",
        ("src/a.c",),
        ("0001-base.patch",),
    )
    # the record: why each left-out patch was left out, and the reason, typed
    assert stop.stop.cascade == (LeftOut(file="0001-base.patch", dropped="--drop"),)
    assert stop.stop.reasons == (CascadeOf(files=("0001-base.patch",)),)
    assert [type(r) for r in stop.stop.reports] == [ConflictedFile]
    # its own conflict is not called a cascade
    proj2 = make_project(tmp_path / "own", rq, pin=rq.c["r1"], patches=patches_for(rq, "pid", "conflict"))
    stop = _stop(rq, proj2, tmp_path / "w2", drop=("pid",))
    assert (stop.kind, stop.patch, stop.files, stop.cascade) == (
        "conflict",
        "0002-conflict.patch",
        ("src/b.c",),
        (),
    )
    assert stop.commits == (rq.c["u5"][:12],) and stop.tree == tmp_path / "w2" / "tree"
    assert stop.stop.reasons == (UpstreamTouched(commits=(rq.c["u5"][:12],)),)


def test_each_kind_of_stop_says_what_it_is_in_fields(rq: RefreshQueue, tmp_path: Path) -> None:
    dup = make_project(tmp_path / "dup", rq, pin=rq.c["r1"], patches=patches_for(rq, "dup"))
    stop = _stop(rq, dup, tmp_path / "w-dup")
    assert (stop.kind, stop.patch, stop.files) == ("duplicate", "0001-dup.patch", ("tests/t.c",))
    (dup_lines,) = stop.stop.duplicates
    assert (dup_lines.path, len(dup_lines.lines)) == ("tests/t.c", 3) and len(dup_lines.at) == 2
    assert dup_lines.commit is not None and dup_lines.commit.sha == rq.c["u3"]
    empty = make_project(tmp_path / "empty", rq, pin=rq.c["r1"], patches=patches_for(rq, "pid"))
    stop = _stop(rq, empty, tmp_path / "w-empty")
    assert (stop.kind, stop.patch, stop.files) == ("empty", "0001-pid.patch", ())
    assert stop.upstreamed is not None and stop.upstreamed.rule == "patch-id"
    assert stop.upstreamed.commit is not None and stop.upstreamed.commit.sha == rq.c["u1"]


def test_the_stop_message(rq: RefreshQueue, tmp_path: Path) -> None:
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=patches_for(rq, "conflict"))
    res = run_cli(proj, "refresh", "fixture", "--onto", rq.c["u6"])
    u5 = rq.c["u5"][:12]
    assert_error(
        res,
        5,
        f"refresh stopped at 0001-conflict.patch: conflicts in src/b.c (upstream {u5})",
        "src/b.c:6-12 (conflict 1 of 1, 7 lines; the patch's hunk #1 of 1 `-3,5 +3,5`)",
        f"upstream {u5} rpc: other says 2 (last touched 1 of these lines)",
        "upstream |     return 2;",
        "patch    |     return 3;",
    )
    assert "patch 0" not in res.output and "(patch " not in res.output


def test_a_resolution_may_edit_a_file_outside_the_series(rq: RefreshQueue, tmp_path: Path) -> None:
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=patches_for(rq, "conflict"))
    res = run_cli(proj, "refresh", "fixture", "--onto", rq.c["u6"])
    assert_error(res, 5, "refresh stopped at 0001-conflict.patch")
    tree = Path(os.environ["PATCHKIT_CACHE"]) / "refresh" / "fixture" / "tree"
    assert not (tree / "src" / "a.c").exists()  # the scratch tree holds the series' files only
    (tree / "src" / "b.c").write_text(B_U5.replace("return 2;", "return alpha(2);"))
    a_new = git(rq.path, "show", f"{rq.c['u6']}:src/a.c") + "\nint extra(void) { return 0; }\n"
    (tree / "src" / "a.c").write_text(a_new)
    git(tree, "add", "src/b.c", "src/a.c")
    res = invoke(proj, "refresh", "fixture", "--continue")
    assert res.exit_code == 0, res.output
    assert "took upstream's src/a.c into the refresh" in res.stderr
    text = (proj / "patches" / "0001-conflict.patch").read_text()
    assert "diff --git a/src/a.c b/src/a.c" in text and "new file" not in text
    assert "+int extra(void) { return 0; }" in text
    # what check says: it applies at the new commit
    res = invoke(proj, "check", "fixture", "--ref", rq.c["u6"])
    assert res.exit_code == 0, res.output


def test_bump_drops_what_is_upstream_and_its_hint_names_the_workdir(rq: RefreshQueue, tmp_path: Path) -> None:
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=patches_for(rq, "pid", "base"))
    res = invoke(proj, "bump", "fixture", "--upstream", str(rq.path), "--to", rq.c["u6"], "--drop-upstreamed")
    assert res.exit_code == 0, res.output
    assert "dropped   0001-pid.patch: already upstream (patch-id" in res.stderr
    assert series_files(proj) == ["0002-base.patch"]
    assert rq.c["u6"] in (proj / "recipes" / "fixture.toml").read_text()
    # a stop in a bump: the hint's command (with --workdir) finishes it
    proj2 = make_project(tmp_path / "b", rq, pin=rq.c["r1"], patches=patches_for(rq, "conflict"))
    workdir = tmp_path / "bw"
    res = invoke(
        proj2, "bump", "fixture", "--upstream", str(rq.path), "--to", rq.c["u6"], "--workdir", str(workdir)
    )
    assert_error(res, 5, "refresh stopped at 0001-conflict.patch", f"upstream {rq.c['u5'][:12]}")
    res = invoke(proj2, *hint_command(res.output, "--skip"))
    assert res.exit_code == 0, res.output
    assert rq.c["u6"] in (proj2 / "recipes" / "fixture.toml").read_text()  # the pins moved
    assert series_files(proj2) == []


def test_a_patch_found_upstream_that_still_changes_something_is_kept_and_proposed(
    rq: RefreshQueue, tmp_path: Path
) -> None:
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=patches_for(rq, "pr"))
    res = invoke(proj, "refresh", "fixture", "--onto", rq.c["u6"])
    assert res.exit_code == 0, res.output
    assert (
        "kept      0001-pr.patch, perhaps upstream (pull-request #102; only its pull request number "
        f"matches, its change is not all there): {rq.c['u3'][:12]} "
        "tests: a case for gamma (#102): proposed for dropping (not proven" in res.stderr
    )
    assert series_files(proj) == ["0001-pr.patch"]


def test_a_conflict_with_an_earlier_patchs_resolution_names_that_patch(
    rq: RefreshQueue, tmp_path: Path
) -> None:
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=patches_for(rq, "conflict", "onconflict"))
    res = run_cli(proj, "refresh", "fixture", "--onto", rq.c["u6"])
    assert_error(res, 5, "refresh stopped at 0001-conflict.patch")
    tree = Path(os.environ["PATCHKIT_CACHE"]) / "refresh" / "fixture" / "tree"
    (tree / "src" / "b.c").write_text(B_U5.replace("return 2;", "return 2 + 3;"))
    git(tree, "add", "src/b.c")
    res = invoke(proj, "refresh", "fixture", "--continue")
    # upstream never had `return 2 + 3;`: the lines are the first patch's, as resolved here
    # (and upstream's commit that changed that line before it)
    assert_error(
        res,
        5,
        f"refresh stopped at 0002-onconflict.patch: conflicts in src/b.c (upstream {rq.c['u5'][:12]})",
        "the earlier patch 0001-conflict.patch did too (as refreshed here)",
    )


def test_a_cherry_picked_patch_is_found_by_the_commit_it_names(rq: RefreshQueue, tmp_path: Path) -> None:
    (file, header, body), base = patches_for(rq, "conflict", "base")
    header += f"Taken from upstream.\n\n(cherry picked from commit {rq.c['u5'][:10]})\n\n"
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=[(file, header, body), base])
    res = invoke(proj, "refresh", "fixture", "--onto", rq.c["u6"], "--drop-upstreamed")
    assert res.exit_code == 0, res.output
    assert f"dropped 0001-conflict.patch: already upstream (cherry-pick {rq.c['u5'][:10]})" in res.stderr
    assert series_files(proj) == ["0002-base.patch"]


def test_a_resolution_recorded_in_one_bump_is_reused_in_the_next(rq: RefreshQueue, tmp_path: Path) -> None:
    """rerere across bumps: a conflict resolved by hand in one bump resolves itself when the
    same conflict comes again in a later one (here: another checkout of the project, the
    same cache), with no stop."""
    bump = ["bump", "fixture", "--upstream", str(rq.path), "--to", rq.c["u6"]]
    first = make_project(tmp_path / "first", rq, pin=rq.c["r1"], patches=patches_for(rq, "conflict"))
    res = invoke(first, *bump)
    assert_error(res, 5, "refresh stopped at 0001-conflict.patch: conflicts in src/b.c")
    tree = Path(os.environ["PATCHKIT_CACHE"]) / "refresh" / "fixture" / "tree"
    (tree / "src" / "b.c").write_text(B_U5.replace("return 2;", "return 2 + 3;"))
    git(tree, "add", "src/b.c")
    res = invoke(first, *hint_command(res.output, "--continue"))
    assert res.exit_code == 0, res.output
    assert rq.c["u6"] in (first / "recipes" / "fixture.toml").read_text()
    resolved_patch = (first / "patches" / "0001-conflict.patch").read_text()
    assert "+    return 2 + 3;" in resolved_patch

    second = make_project(tmp_path / "second", rq, pin=rq.c["r1"], patches=patches_for(rq, "conflict"))
    res = invoke(second, *bump)
    assert res.exit_code == 0, res.output  # no stop: the recorded resolution answered it
    assert "reused a recorded resolution for 1 of 1 conflict(s)" in res.stderr
    assert rq.c["u6"] in (second / "recipes" / "fixture.toml").read_text()
    assert "+    return 2 + 3;" in (second / "patches" / "0001-conflict.patch").read_text()
