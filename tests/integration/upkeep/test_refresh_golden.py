"""The exact words of refresh's stops, as the CLI prints them: one golden text per kind of
stop (a conflict, a cascade, a file upstream split, a patch that does not apply, one that
merges to nothing, a clean merge that doubles lines). Commit names and temporary paths are
written as ``<name>`` / ``<TMP>`` so that the text is the same on every run; everything
else (the message, each detail line, the hint with its command lines) is compared byte for
byte."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.fixtures.drift import make_project
from tests.fixtures.project import invoke, run_cli
from tests.fixtures.refreshq import KEEP, PatchQueue, make_refresh_queue, make_stops_queue, patches_for
from tests.fixtures.upstream import GIT_ENV, git
from tests.integration.upkeep.test_refresh_stale import GONE, _refresh, _setup


def _made(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], PatchQueue]) -> PatchQueue:
    old = os.environ.copy()
    os.environ.update(GIT_ENV)
    os.environ["GIT_CONFIG_GLOBAL"] = os.devnull
    try:
        return make(factory.mktemp(name))
    finally:
        os.environ.clear()
        os.environ.update(old)


@pytest.fixture(scope="module")
def rq(tmp_path_factory: pytest.TempPathFactory) -> PatchQueue:
    return _made(tmp_path_factory, "rq", make_refresh_queue)


@pytest.fixture(scope="module")
def sq(tmp_path_factory: pytest.TempPathFactory) -> PatchQueue:
    return _made(tmp_path_factory, "sq", make_stops_queue)


def _said(res: Result, shas: dict[str, str], tmp: Path) -> str:
    """The error's text (from its ``error:`` line to the end), commits and paths named."""
    assert res.exit_code == 5, res.output
    lines = res.output.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("error: "))
    text = "\n".join(lines[at:])
    for name, sha in sorted(shas.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(sha, f"<{name}>").replace(sha[:12], f"<{name}>")
    return text.replace(os.environ["PATCHKIT_CACHE"], "<CACHE>").replace(str(tmp), "<TMP>")


def _golden(name: str, text: str) -> None:
    if os.environ.get("GOLDEN_DUMP"):
        with open(os.environ["GOLDEN_DUMP"], "a") as f:
            f.write(repr((name, text)) + "\n")
        return
    assert text == GOLDEN[name]


GOLDEN: dict[str, str] = {
    "conflict": "\n".join(
        [
            "error: refresh stopped at 0001-conflict.patch: conflicts in src/b.c (upstream <u5>)",
            "  │ src/b.c:6-12 (conflict 1 of 1, 7 lines; the patch's hunk #1 of 1 `-3,5 +3,5`)",
            "  │   upstream <u5> rpc: other says 2 (last touched 1 of these lines)",
            "  │     upstream |     return 2;",
            "  │     patch    |     return 3;",
            "  │ the files with conflict markers are in <CACHE>/refresh/fixture/tree",
            "hint: fix them, `git -C <CACHE>/refresh/fixture/tree add` them, then `patchkit refresh fixture --continue`; `patchkit refresh fixture --skip` drops 0001-conflict.patch; `patchkit refresh fixture --abort` stops the refresh",
        ]
    ),
    "conflict-workdir": "\n".join(
        [
            "error: refresh stopped at 0002-conflict.patch: conflicts in src/b.c (upstream <u5>)",
            "  │ src/b.c:6-12 (conflict 1 of 1, 7 lines; the patch's hunk #1 of 1 `-3,5 +3,5`)",
            "  │   upstream <u5> rpc: other says 2 (last touched 1 of these lines)",
            "  │     upstream |     return 2;",
            "  │     patch    |     return 3;",
            "  │ the files with conflict markers are in <TMP>/w d/tree",
            "hint: fix them, `git -C '<TMP>/w d/tree' add` them, then `patchkit refresh fixture --continue --workdir '<TMP>/w d'`; `patchkit refresh fixture --skip --workdir '<TMP>/w d'` drops 0002-conflict.patch; `patchkit refresh fixture --abort --workdir '<TMP>/w d'` stops the refresh",
        ]
    ),
    "cascade": "\n".join(
        [
            "error: refresh stopped at 0002-cascade.patch: conflicts in src/a.c (a cascade of 0001-base.patch)",
            "  │ a cascade: 0002-cascade.patch was written on top of 0001-base.patch (--drop), left out of this refresh; it does not apply without it on the old base either",
            "  │ src/a.c:4-10 (conflict 1 of 1, 7 lines; the patch's hunk #1 of 1 `-1,7 +1,7`)",
            "  │   no upstream commit in <r1>..<u6> last touched these lines",
            "  │     upstream |     return x + 1;",
            "  │     patch    |     return x + 20;",
            "  │ the files with conflict markers are in <CACHE>/refresh/fixture/tree",
            "hint: fix them, `git -C <CACHE>/refresh/fixture/tree add` them, then `patchkit refresh fixture --continue`; `patchkit refresh fixture --skip` drops 0002-cascade.patch; `patchkit refresh fixture --abort` stops the refresh",
        ]
    ),
    "empty": "\n".join(
        [
            "error: refresh stopped at 0001-pid.patch: merged onto <u6> it changes nothing: already upstream (patch-id 850aa19d0a9c): <u1> core: add a helper (#101)",
            "hint: `patchkit refresh fixture --skip` drops it; `patchkit refresh fixture --continue` goes on (an empty patch leaves the series at the end); `patchkit refresh fixture --abort` stops (a refresh started with --drop-upstreamed drops such patches without stopping)",
        ]
    ),
    "empty-effect": "\n".join(
        [
            "error: refresh stopped at 0002-effect.patch: merged onto <u6> it changes nothing: already upstream (effect): <u4> docs: notes, and a flag",
            "hint: `patchkit refresh fixture --skip` drops it; `patchkit refresh fixture --continue` goes on (an empty patch leaves the series at the end); `patchkit refresh fixture --abort` stops (a refresh started with --drop-upstreamed drops such patches without stopping)",
        ]
    ),
    "duplicate": "\n".join(
        [
            "error: refresh stopped at 0001-dup.patch: the 3-way merge was clean but adds lines upstream added meanwhile a second time",
            "  │ tests/t.c:2: 3 lines the patch adds are there twice now (lines 2, 8) (upstream <u3> tests: a case for gamma (#102) added them)",
            "  │     | void test_gamma(void) {",
            "  │     |     check(gamma(3) == 0);",
            "  │     | }",
            "  │ the merged files are in <CACHE>/refresh/fixture/tree (staged)",
            "hint: remove the second copy, `git -C <CACHE>/refresh/fixture/tree add` the file, then `patchkit refresh fixture --continue`; `patchkit refresh fixture --skip` drops 0001-dup.patch",
        ]
    ),
    "split": "\n".join(
        [
            "error: refresh stopped at 0001-split.patch: conflicts in src/old.c (renamed upstream by <u1>, its code now in src/run.c)",
            "  │ src/old.c: renamed to src/run.c upstream by <u1> gpu: split old.c into init.c and run.c; the patch changes it",
            "  │   the patch's hunk `-12,6 +12,6`: its code is now in src/run.c (9 of its 9 names)",
            "  │ the files with conflict markers are in <CACHE>/refresh/fixture/tree",
            "hint: fix them, `git -C <CACHE>/refresh/fixture/tree add` them, then `patchkit refresh fixture --continue`; `patchkit refresh fixture --skip` drops 0001-split.patch; `patchkit refresh fixture --abort` stops the refresh",
        ]
    ),
    "earlier-own": "\n".join(
        [
            "error: refresh stopped at 0001-keep_a.patch: conflicts in src/keep.c (upstream <u4>)",
            "  │ src/keep.c:2-8 (conflict 1 of 1, 7 lines; the patch's hunk #1 of 1 `-1,5 +1,5`)",
            "  │   upstream <u4> keep: v starts at 2 (last touched 1 of these lines)",
            "  │     upstream |     int v = 2;",
            "  │     patch    |     int v = 10;",
            "  │ the files with conflict markers are in <CACHE>/refresh/fixture/tree",
            "hint: fix them, `git -C <CACHE>/refresh/fixture/tree add` them, then `patchkit refresh fixture --continue`; `patchkit refresh fixture --skip` drops 0001-keep_a.patch; `patchkit refresh fixture --abort` stops the refresh",
        ]
    ),
    "earlier-removed": "\n".join(
        [
            "error: refresh stopped at 0002-keep_b.patch: conflicts in src/keep.c (lines the earlier patch 0001-keep_a.patch removed)",
            "  │ src/keep.c:6-11 (conflict 1 of 1, 6 lines; the patch's hunk #1 of 1 `-3,6 +3,6`)",
            "  │   the earlier patch 0001-keep_a.patch removed these lines (as resolved here)",
            "  │   no upstream commit in <r1>..<u4> last touched these lines",
            "  │     upstream: (nothing)",
            "  │     patch    |     v = v + 5;",
            "  │ the files with conflict markers are in <CACHE>/refresh/fixture/tree",
            "hint: fix them, `git -C <CACHE>/refresh/fixture/tree add` them, then `patchkit refresh fixture --continue`; `patchkit refresh fixture --skip` drops 0002-keep_b.patch; `patchkit refresh fixture --abort` stops the refresh",
        ]
    ),
    "deleted": "\n".join(
        [
            "error: refresh stopped at 0001-legacy.patch: conflicts in src/legacy.c (deleted upstream by <u5>, its code now in src/init.c)",
            "  │ src/legacy.c: deleted upstream by <u5> gpu: legacy.c goes, its reset into init.c; the patch changes it",
            "  │   the patch's hunk `-1,6 +1,6`: its code is now in src/init.c (7 of its 7 names)",
            "  │ the files with conflict markers are in <CACHE>/refresh/fixture/tree",
            "hint: fix them, `git -C <CACHE>/refresh/fixture/tree add` them, then `patchkit refresh fixture --continue`; `patchkit refresh fixture --skip` drops 0001-legacy.patch; `patchkit refresh fixture --abort` stops the refresh",
        ]
    ),
    "apply": "\n".join(
        [
            "error: refresh stopped at 01-gone.patch: it does not apply and cannot be 3-way merged (it does not apply on its own base <base> either, not even with reduced context: it was stale before this sync; repository lacks the necessary blob to perform 3-way merge.)",
            "  │ patch failed: src/f.c:14",
            "  │ src/f.c: patch does not apply",
            "hint: apply it by hand in <TMP>/wd/tree, `git -C <TMP>/wd/tree add` the files, then `patchkit refresh --continue --workdir <TMP>/wd`; `patchkit refresh --skip --workdir <TMP>/wd` drops 01-gone.patch; `patchkit refresh --abort --workdir <TMP>/wd` stops the refresh",
        ]
    ),
}


def test_a_conflict(rq: PatchQueue, tmp_path: Path) -> None:
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=patches_for(rq, "conflict"))
    res = run_cli(proj, "refresh", "fixture", "--onto", rq.c["u6"])
    _golden("conflict", _said(res, rq.c, tmp_path))


def test_a_conflict_with_a_workdir_given(rq: PatchQueue, tmp_path: Path) -> None:
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=patches_for(rq, "pid", "conflict"))
    res = run_cli(proj, "refresh", "fixture", "--onto", rq.c["u6"], "--workdir", str(tmp_path / "w d"))
    res = invoke(proj, "refresh", "fixture", "--skip", "--workdir", str(tmp_path / "w d"))
    _golden("conflict-workdir", _said(res, rq.c, tmp_path))


def test_a_cascade(rq: PatchQueue, tmp_path: Path) -> None:
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=patches_for(rq, "base", "cascade"))
    res = run_cli(proj, "refresh", "fixture", "--onto", rq.c["u6"], "--drop", "base")
    _golden("cascade", _said(res, rq.c, tmp_path))


def test_an_empty_merge(rq: PatchQueue, tmp_path: Path) -> None:
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=patches_for(rq, "pid", "effect"))
    res = run_cli(proj, "refresh", "fixture", "--onto", rq.c["u6"])
    _golden("empty", _said(res, rq.c, tmp_path))
    res = invoke(proj, "refresh", "fixture", "--skip")
    _golden("empty-effect", _said(res, rq.c, tmp_path))


def test_a_clean_merge_that_doubles_lines(rq: PatchQueue, tmp_path: Path) -> None:
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=patches_for(rq, "dup"))
    res = run_cli(proj, "refresh", "fixture", "--onto", rq.c["u6"])
    _golden("duplicate", _said(res, rq.c, tmp_path))


def test_a_file_upstream_split(sq: PatchQueue, tmp_path: Path) -> None:
    proj = make_project(tmp_path, sq, pin=sq.c["r1"], patches=patches_for(sq, "split"))
    res = run_cli(proj, "refresh", "fixture", "--onto", sq.c["u4"])
    _golden("split", _said(res, sq.c, tmp_path))


def test_lines_an_earlier_resolution_removed(sq: PatchQueue, tmp_path: Path) -> None:
    proj = make_project(tmp_path, sq, pin=sq.c["r1"], patches=patches_for(sq, "keep_a", "keep_b"))
    res = run_cli(proj, "refresh", "fixture", "--onto", sq.c["u4"])
    _golden("earlier-own", _said(res, sq.c, tmp_path))
    tree = Path(os.environ["PATCHKIT_CACHE"]) / "refresh" / "fixture" / "tree"
    (tree / "src/keep.c").write_text(
        KEEP.replace("int v = 1;", "int v = 12;").replace("    v = v + 1;\n", "")
    )
    git(tree, "add", "src/keep.c")
    res = invoke(proj, "refresh", "fixture", "--continue")
    _golden("earlier-removed", _said(res, sq.c, tmp_path))


def test_a_file_upstream_deleted(sq: PatchQueue, tmp_path: Path) -> None:
    proj = make_project(tmp_path, sq, pin=sq.c["r1"], patches=patches_for(sq, "legacy"))
    res = run_cli(proj, "refresh", "fixture", "--onto", sq.c["u5"])
    _golden("deleted", _said(res, sq.c, tmp_path))


def test_a_patch_that_does_not_apply(tmp_path: Path) -> None:
    up, proj, base, new = _setup(tmp_path, {"01-gone.patch": GONE})
    res = _refresh(tmp_path, proj, up, base, new)
    _golden("apply", _said(res, {"base": base, "new": new}, tmp_path))
