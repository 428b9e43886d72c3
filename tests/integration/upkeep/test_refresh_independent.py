"""`refresh --onto` on a series of independent patches (`# patchkit: independent`: each
made against the clean base, applied alone): each patch is merged onto the new commit
alone, never on another (no cascades between them), a stop is its own, and the refreshed
series is written as it came (each diff against the new commit, the independent line
kept), so that each still applies to the new commit alone."""

from __future__ import annotations

import os
from pathlib import Path

from patchkit.spec.series import load_series
from tests.fixtures.project import invoke
from tests.fixtures.upstream import GIT_ENV, commit_files, git

F = "".join(f"line {i}\n" for i in range(1, 31))


def _diff(up: Path, text: str) -> str:
    (up / "src/f.c").write_text(text)
    d = git(up, "diff") + "\n"
    git(up, "checkout", "-q", "--", "src/f.c")
    return d


def _queue(tmp_path: Path) -> tuple[Path, Path, str, str]:
    old = os.environ.copy()
    os.environ.update(GIT_ENV)
    os.environ["GIT_CONFIG_GLOBAL"] = os.devnull
    try:
        up = tmp_path / "up"
        up.mkdir()
        git(up, "init", "-q", "-b", "master")
        base = commit_files(up, {"src/f.c": F}, "initial")
        d1 = _diff(up, F.replace("line 3\n", "line three\n"))
        d2 = _diff(up, F.replace("line 20\n", "line twenty\n"))
        # made against the base in the same place as d1: alone it applies, on d1 it does not
        d3 = _diff(up, F.replace("line 4\n", "line four\n"))
        # upstream: a line far from every patch, and line 20 (d2's) changed
        new = commit_files(
            up,
            {"src/f.c": F.replace("line 12\n", "line 12 (moved)\n").replace("line 20\n", "line 20 (up)\n")},
            "upstream: two lines",
        )
    finally:
        os.environ.clear()
        os.environ.update(old)
    q = tmp_path / "q"
    q.mkdir()
    (q / "01-three.patch").write_text(d1)
    (q / "02-twenty.patch").write_text(d2)
    (q / "03-four.patch").write_text(d3)
    proj = tmp_path / "proj"
    (proj / "patches").mkdir(parents=True)
    (proj / "recipes").mkdir()
    r = invoke(proj, "series", "import", str(q), "--base", base, "--independent")
    assert r.exit_code == 0, r.output
    assert load_series(proj / "patches").independent
    return up, proj, base, new


def test_each_independent_patch_is_merged_onto_the_new_commit_alone(tmp_path: Path) -> None:
    up, proj, base, new = _queue(tmp_path)
    wd = tmp_path / "wd"
    args = ("--repo", str(up), "--workdir", str(wd))
    r = invoke(proj, "refresh", "--all", "--from", base, "--onto", new, *args)
    # one stop, 02's own conflict with upstream's line 20 (01 merged cleanly before it)
    assert r.exit_code == 5, r.output
    assert "refresh stopped at 02-twenty.patch: conflicts in src/f.c" in r.output
    assert "cascade" not in r.output
    assert "earlier patch" not in r.output
    tree = wd / "tree"
    # the stopped patch was merged onto the new commit alone: 01's line is not in the tree
    text = (tree / "src/f.c").read_text()
    assert "line three" not in text and "line 12 (moved)" in text
    (tree / "src/f.c").write_text(
        F.replace("line 12\n", "line 12 (moved)\n").replace("line 20\n", "line twenty\n")
    )
    git(tree, "add", "src/f.c")
    r = invoke(proj, "refresh", "--all", "--continue", "--workdir", str(wd))
    # 03 was made on the base alone: merged onto the new commit alone it is clean (stacked
    # on 01 it would conflict: line 3 is its context)
    assert r.exit_code == 0, r.output
    assert "updated   02-twenty.patch" in r.output
    pdir = proj / "patches"
    assert (pdir / "series").read_text().splitlines()[0] == "# patchkit: independent"
    assert load_series(pdir).independent
    # each refreshed patch is its diff from the new commit: it applies there alone
    for name, mine, others in (
        ("01-three.patch", "+line three", ("line four", "line twenty")),
        ("02-twenty.patch", "+line twenty", ("line three", "line four")),
        ("03-four.patch", "+line four", ("line three", "line twenty")),
    ):
        data = (pdir / name).read_text()
        assert mine in data, name
        assert not any(o in data for o in others), name
        git(up, "checkout", "-q", "--detach", new)
        git(up, "apply", "--check", str(pdir / name))
    assert "-line 20 (up)" in (pdir / "02-twenty.patch").read_text()
    # and check at the new commit takes each alone: all apply
    r = invoke(proj, "check", "--all", "--repo", str(up), "--ref", new)
    assert r.exit_code == 0, r.output
    assert r.stdout.count("applies") == 3


def test_a_stacked_refresh_of_the_same_queue_stops_where_the_independent_one_does_not(
    tmp_path: Path,
) -> None:
    """The same patches read as a stack: 03 lands on 01's line 3 and stops (what the
    independent line saves)."""
    up, proj, base, new = _queue(tmp_path)
    series = proj / "patches" / "series"
    series.write_text(series.read_text().replace("# patchkit: independent\n", ""))
    assert not load_series(proj / "patches").independent
    wd = tmp_path / "wd"
    r = invoke(
        proj, "refresh", "--all", "--repo", str(up), "--workdir", str(wd), "--from", base, "--onto", new
    )
    assert r.exit_code == 5 and "refresh stopped at 02-twenty.patch" in r.output, r.output
    tree = wd / "tree"
    (tree / "src/f.c").write_text(
        F.replace("line 3\n", "line three\n")
        .replace("line 12\n", "line 12 (moved)\n")
        .replace("line 20\n", "line twenty\n")
    )
    git(tree, "add", "src/f.c")
    r = invoke(proj, "refresh", "--all", "--continue", "--workdir", str(wd))
    assert r.exit_code == 5 and "refresh stopped at 03-four.patch" in r.output, r.output
