"""What a refresh says at its stops and after its clean merges, on the queue of
tests/fixtures/refreshq.make_stops_queue: a file upstream split (the deleting commit and where the
hunk's code lives now), clean merges to review (beside upstream's change in the same
function, a call to a function whose declaration changed), recorded resolutions kept to
their file and patch (a file they fill entirely is staged), a resolution carried through
to a dependent patch's same conflict, a stop whose lines an earlier patch's resolution
removed, a relative --workdir."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.fixtures.drift import make_project
from tests.fixtures.project import assert_error, invoke, run_cli
from tests.fixtures.refreshq import KEEP, TWICE, TWIN, make_stops_queue
from tests.fixtures.refreshq import PatchQueue as StopsQueue
from tests.fixtures.refreshq import patches_for as stops_patches
from tests.fixtures.upstream import GIT_ENV, git


@pytest.fixture(scope="module")
def sq(tmp_path_factory: pytest.TempPathFactory) -> StopsQueue:
    old = os.environ.copy()
    os.environ.update(GIT_ENV)
    os.environ["GIT_CONFIG_GLOBAL"] = os.devnull
    try:
        return make_stops_queue(tmp_path_factory.mktemp("sq"))
    finally:
        os.environ.clear()
        os.environ.update(old)


def _tree() -> Path:
    return Path(os.environ["PATCHKIT_CACHE"]) / "refresh" / "fixture" / "tree"


def _resolve(path: str, text: str) -> None:
    tree = _tree()
    (tree / path).write_text(text)
    git(tree, "add", path)


def test_a_file_upstream_split_names_the_commit_and_where_the_code_is_now(
    sq: StopsQueue, tmp_path: Path
) -> None:
    proj = make_project(tmp_path, sq, pin=sq.c["r1"], patches=stops_patches(sq, "split"))
    res = run_cli(proj, "refresh", "fixture", "--onto", sq.c["u4"])
    u1 = sq.c["u1"][:12]
    assert_error(
        res,
        5,
        # git's rename detection pairs old.c with run.c, which holds most of it
        f"refresh stopped at 0001-split.patch: conflicts in src/old.c (renamed upstream by {u1}, "
        "its code now in src/run.c",
        f"src/old.c: renamed to src/run.c upstream by {u1} gpu: split old.c into init.c and run.c; "
        "the patch changes it",
        "the patch's hunk `-12,6 +12,6`: its code is now in src/run.c (9 of its 9 names)",
    )
    assert "no conflict markers" not in res.output
    # the hunk's code is gpu_run's: run.c is named first, init.c (which has none of it) is not
    line = next(ln for ln in res.output.splitlines() if "its code is now in" in ln)
    assert "src/init.c" not in line.split("src/run.c")[0]


def test_a_file_upstream_deleted_names_the_commit_and_the_file_its_code_moved_to(
    sq: StopsQueue, tmp_path: Path
) -> None:
    proj = make_project(tmp_path, sq, pin=sq.c["r1"], patches=stops_patches(sq, "legacy"))
    res = run_cli(proj, "refresh", "fixture", "--onto", sq.c["u5"])
    u5 = sq.c["u5"][:12]
    assert_error(
        res,
        5,
        f"refresh stopped at 0001-legacy.patch: conflicts in src/legacy.c (deleted upstream by {u5}, "
        "its code now in src/init.c)",
        f"src/legacy.c: deleted upstream by {u5} gpu: legacy.c goes, its reset into init.c; the patch changes it",
        "its code is now in src/init.c (",
    )
    assert "(nothing)" not in res.output and "no conflict markers" not in res.output


def test_clean_merges_to_review_are_listed_at_the_end_and_in_json(sq: StopsQueue, tmp_path: Path) -> None:
    proj = make_project(tmp_path, sq, pin=sq.c["r1"], patches=stops_patches(sq, "nearby", "api", "m"))
    res = invoke(proj, "refresh", "fixture", "--onto", sq.c["u4"], "--drop", "m", "--json")
    assert res.exit_code == 0, res.output
    u2 = sq.c["u2"][:12]
    assert (
        "merged cleanly, review 0001-nearby.patch: src/model.c: the hunk `-4,7 +4,7` merged beside lines "
        f"upstream changed in the same function `int build_one(int x) {{` (upstream {u2} api: compute takes "
        "a context)" in res.stderr
    ), res.stderr
    assert (
        "merged cleanly, review 0002-api.patch: src/model.c: calls compute(), which has other parameters in "
        "src/api.h upstream (was `compute(int x, int y)`; now `compute(struct ctx * c, int x, int y)`)"
        in res.stderr
    ), res.stderr
    data = json.loads(res.stdout)
    review = {r["patch"]: r for r in data["review"]}
    assert set(review) == {"0001-nearby.patch", "0002-api.patch"}
    assert review["0002-api.patch"]["names"] == ["compute"]
    assert [r["kind"] for r in review["0001-nearby.patch"]["findings"]] == ["nearby"]
    assert data["dropped"] == [{"patch": "0003-m.patch", "reason": "--drop", "commit": None}]


def test_a_stop_names_its_cleanly_merged_files_to_review(sq: StopsQueue, tmp_path: Path) -> None:
    # one patch: src/model.c merges cleanly (calling compute, whose parameters changed),
    # src/m.c conflicts
    (_, header, api), (_, _, m) = stops_patches(sq, "api", "m")
    proj = make_project(
        tmp_path, sq, pin=sq.c["r1"], patches=[("0001-both.patch", header, api.rstrip("\n") + "\n" + m)]
    )
    res = run_cli(proj, "refresh", "fixture", "--onto", sq.c["u4"])
    assert_error(
        res,
        5,
        "refresh stopped at 0001-both.patch: conflicts in src/m.c",
        "merged cleanly, review: src/model.c: calls compute(), which has other parameters in src/api.h",
    )
    _resolve("src/m.c", TWIN.replace("return 1;", "return 2 + 3;"))
    res = invoke(proj, "refresh", "fixture", "--continue")
    assert res.exit_code == 0, res.output
    assert "merged cleanly, review 0001-both.patch: src/model.c: calls compute()" in res.stderr


def test_a_patch_upstream_left_alone_is_not_listed_for_review(sq: StopsQueue, tmp_path: Path) -> None:
    body = stops_patches(sq, "api")[0][2].replace("compute(y, t)", "scale(t)")
    proj = make_project(
        tmp_path, sq, pin=sq.c["r1"], patches=[("0001-api.patch", stops_patches(sq, "api")[0][1], body)]
    )
    res = invoke(proj, "refresh", "fixture", "--onto", sq.c["u4"])
    assert res.exit_code == 0, res.output
    assert "review" not in res.stderr


def _record_m(sq: StopsQueue, root: Path, name: str) -> None:
    """A refresh of patch ``m`` (as file ``name``) resolved by hand: its resolution recorded."""
    proj = make_project(root, sq, pin=sq.c["r1"], patches=stops_patches(sq, "m", names={"m": name}))
    res = run_cli(proj, "refresh", "fixture", "--onto", sq.c["u4"])
    assert_error(res, 5, f"refresh stopped at {name}: conflicts in src/m.c")
    _resolve("src/m.c", TWIN.replace("return 1;", "return 2 + 3;"))
    res = invoke(proj, "refresh", "fixture", "--continue")
    assert res.exit_code == 0, res.output
    assert "recorded 1 conflict resolution(s)" in res.stderr


@pytest.mark.parametrize("name", ["0001-n.patch", "0001-m.patch"])
def test_a_resolution_recorded_for_another_file_is_not_replayed(
    sq: StopsQueue, tmp_path: Path, name: str
) -> None:
    _record_m(sq, tmp_path / "first", "0001-m.patch")
    # the same conflict (the same two sides) in src/n.c: another file, whatever the patch's name
    proj = make_project(
        tmp_path / "second", sq, pin=sq.c["r1"], patches=stops_patches(sq, "n", names={"n": name})
    )
    res = run_cli(proj, "refresh", "fixture", "--onto", sq.c["u4"])
    assert_error(res, 5, f"refresh stopped at {name}: conflicts in src/n.c")
    assert "reused" not in res.output
    assert "<<<<<<<" in (_tree() / "src" / "n.c").read_text()


def test_a_replay_says_where_the_resolution_came_from(sq: StopsQueue, tmp_path: Path) -> None:
    _record_m(sq, tmp_path / "first", "0001-m.patch")
    proj = make_project(tmp_path / "second", sq, pin=sq.c["r1"], patches=stops_patches(sq, "m"))
    res = invoke(proj, "refresh", "fixture", "--onto", sq.c["u4"])
    assert res.exit_code == 0, res.output
    assert (
        "0001-m.patch: src/m.c: reused a recorded resolution for 1 of 1 conflict(s) "
        "(recorded for 0001-m.patch's src/m.c)" in res.stderr
    ), res.stderr


def test_a_file_filled_from_records_is_staged_and_not_called_conflicted(
    sq: StopsQueue, tmp_path: Path
) -> None:
    _record_m(sq, tmp_path / "first", "0001-mn.patch")
    # the patch now changes src/n.c too: src/m.c comes from the record, src/n.c is the person's
    proj = make_project(tmp_path / "second", sq, pin=sq.c["r1"], patches=stops_patches(sq, "mn"))
    res = run_cli(proj, "refresh", "fixture", "--onto", sq.c["u4"])
    assert_error(res, 5, "refresh stopped at 0001-mn.patch: conflicts in src/n.c (upstream")
    assert "src/m.c" not in res.output.split("error: ", 1)[1].splitlines()[0]
    assert "no conflict markers" not in res.output
    tree = _tree()
    assert git(tree, "ls-files", "-u", "--", "src/m.c").strip() == ""  # staged: not unmerged
    assert "src/m.c" in git(tree, "diff", "--cached", "--name-only", "HEAD").split()
    assert (tree / "src" / "m.c").read_text() == TWIN.replace("return 1;", "return 2 + 3;")
    _resolve("src/n.c", TWIN.replace("return 1;", "return 2 + 4;"))
    res = invoke(proj, "refresh", "fixture", "--continue")
    assert res.exit_code == 0, res.output
    text = (proj / "patches" / "0001-mn.patch").read_text()
    assert "+    return 2 + 3;" in text and "+    return 2 + 4;" in text


def test_a_dependent_patchs_same_conflict_carries_the_resolution(sq: StopsQueue, tmp_path: Path) -> None:
    proj = make_project(tmp_path, sq, pin=sq.c["r1"], patches=stops_patches(sq, "first", "second"))
    res = run_cli(proj, "refresh", "fixture", "--onto", sq.c["u4"], "--workdir", str(tmp_path / "w"))
    assert_error(res, 5, "refresh stopped at 0001-first.patch: conflicts in src/twice.c")
    tree = tmp_path / "w" / "tree"
    (tree / "src" / "twice.c").write_text(
        TWICE.replace("return 1;", "return 2 + 3;", 1).replace("return 1;", "return 2;")
    )
    git(tree, "add", "src/twice.c")
    res = invoke(proj, "refresh", "fixture", "--continue", "--workdir", str(tmp_path / "w"))
    assert res.exit_code == 0, res.output
    assert (
        "0002-second.patch: src/twice.c: carried the resolution of 0001-first.patch's same conflict "
        "through (1 of 1 conflict(s))" in res.stderr
    ), res.stderr
    text = (proj / "patches" / "0002-second.patch").read_text()
    assert "-    return 2;\n+    return 2 + 3;" in text


def test_a_stop_whose_lines_an_earlier_resolution_removed_names_that_patch(
    sq: StopsQueue, tmp_path: Path
) -> None:
    proj = make_project(tmp_path, sq, pin=sq.c["r1"], patches=stops_patches(sq, "keep_a", "keep_b"))
    res = run_cli(proj, "refresh", "fixture", "--onto", sq.c["u4"])
    assert_error(res, 5, "refresh stopped at 0001-keep_a.patch: conflicts in src/keep.c")
    # resolved: v starts at 12 and the line `v = v + 1;` goes (the next patch changes it)
    _resolve("src/keep.c", KEEP.replace("int v = 1;", "int v = 12;").replace("    v = v + 1;\n", ""))
    res = invoke(proj, "refresh", "fixture", "--continue")
    assert_error(
        res,
        5,
        "refresh stopped at 0002-keep_b.patch: conflicts in src/keep.c (lines the earlier patch "
        "0001-keep_a.patch removed)",
        "the earlier patch 0001-keep_a.patch removed these lines (as resolved here)",
    )


def test_a_relative_workdir_works(sq: StopsQueue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proj = make_project(tmp_path, sq, pin=sq.c["r1"], patches=stops_patches(sq, "m"))
    monkeypatch.chdir(tmp_path)
    # from u3 the patch does not apply on its base: the refresh falls back to `git apply --3way`
    res = run_cli(proj, "refresh", "fixture", "--onto", sq.c["u4"], "--from", sq.c["u3"], "--workdir", "wd")
    assert_error(res, 5, "refresh stopped at 0001-m.patch: conflicts in src/m.c")
    assert "can't open patch" not in res.output
    assert f"--workdir {tmp_path / 'wd'}" in res.output  # the hint names the folder it resolved
    _resolve_in = tmp_path / "wd" / "tree"
    (_resolve_in / "src" / "m.c").write_text(TWIN.replace("return 1;", "return 3;"))
    git(_resolve_in, "add", "src/m.c")
    monkeypatch.chdir(proj)  # elsewhere: the relative folder names another place; the absolute one works
    res = invoke(proj, "refresh", "fixture", "--continue", "--workdir", str(tmp_path / "wd"))
    assert res.exit_code == 0, res.output


def test_refresh_options_refuse_relative_paths(tmp_path: Path) -> None:
    from patchkit.upkeep.refresh import RefreshOptions

    with pytest.raises(AssertionError):
        RefreshOptions(repo=tmp_path, patches=(), patches_dir=tmp_path, onto="HEAD", workdir=Path("wd"))
