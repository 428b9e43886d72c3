"""`patchkit bump` on a fixture upstream (tests/fixtures/drift.py, make_bump_upstream):
a clean bump, one that needs a 3-way refresh, one that stops at a conflict (state kept,
--abort restores everything, --continue moves every pin), the dry run, the summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.spec.series import load_series
from tests.fixtures.drift import RPC_B5, BumpUpstream, bump_project, make_bump_upstream
from tests.fixtures.project import assert_error, invoke
from tests.fixtures.upstream import GIT_ENV, git


@pytest.fixture(scope="module")
def bup(tmp_path_factory: pytest.TempPathFactory) -> BumpUpstream:
    import os

    old = os.environ.copy()
    os.environ.update(GIT_ENV)
    os.environ["GIT_CONFIG_GLOBAL"] = os.devnull
    try:
        return make_bump_upstream(tmp_path_factory.mktemp("bump"))
    finally:
        os.environ.clear()
        os.environ.update(old)


def snapshot(proj: Path) -> dict[str, bytes]:
    return {str(p.relative_to(proj)): p.read_bytes() for p in sorted(proj.rglob("*")) if p.is_file()}


def pins(proj: Path) -> dict[str, str]:
    out = {}
    for p in sorted((proj / "recipes").glob("*.toml")):
        line = next(ln for ln in p.read_text().splitlines() if ln.startswith("commit = "))
        out[p.stem] = line.split('"')[1]
    return out


def check_statuses(proj: Path, ref: str) -> list[str]:
    import json

    res = invoke(proj, "check", "fixture", "--ref", ref, "--json")
    return [r["status"] for r in json.loads(res.stdout)["refs"][0]["results"]]


def test_clean_bump_moves_every_pin_on_that_upstream(bup: BumpUpstream, tmp_path: Path) -> None:
    proj = bump_project(tmp_path, bup, pin=bup.c["b1"])
    other = (proj / "recipes" / "other.toml").read_bytes()
    res = invoke(proj, "bump", "fixture", "--upstream", str(bup.path), "--to", bup.c["b3"])
    assert res.exit_code == 0, res.output
    assert pins(proj) == {"fixture": bup.c["b3"], "fixture-b": bup.c["b3"], "other": bup.c["b1"]}
    assert (proj / "recipes" / "other.toml").read_bytes() == other  # another upstream
    assert check_statuses(proj, bup.c["b3"]) == ["applies", "applies", "applies"]
    assert all(p.read_verified() for p in load_series(proj / "patches").patches)
    md = res.stdout
    assert md.startswith(f"## Bump llama.cpp {bup.c['b1'][:12]} (build 1) → {bup.c['b3'][:12]} (build 3)\n")
    assert "| guard | applies-with-offset | src/rpc.c: #1 +3 | rewritten |" in md
    assert "| cli | applies | - |" in md
    assert "patches refreshed and every pin moved" in md
    assert "### Recipes (moved together)\n\n- fixture\n- fixture-b\n" in md
    assert "other" not in md.split("### Recipes")[1]


def test_bump_that_needs_a_3way_refresh(bup: BumpUpstream, tmp_path: Path) -> None:
    proj = bump_project(tmp_path, bup, pin=bup.c["b1"])
    summary = tmp_path / "pr.md"
    # no --to: the newest commit of the default branch (master = b4)
    res = invoke(proj, "bump", "fixture", "--upstream", str(bup.path), "--summary", str(summary))
    assert res.exit_code == 0, res.output
    assert pins(proj) == {"fixture": bup.c["b4"], "fixture-b": bup.c["b4"], "other": bup.c["b1"]}
    assert check_statuses(proj, bup.c["b4"]) == ["applies", "applies", "applies"]
    guard = (proj / "patches" / "0001-guard.patch").read_text()
    assert "         return 0; /* outside */" in guard  # the merged context
    md = summary.read_text()
    assert md == res.stdout
    assert f"(build 1) → {bup.c['b4'][:12]} (build 4)" in md
    # git apply alone would not have done it
    assert "| guard | conflicts | src/rpc.c:1 | rewritten (3-way merge) |" in md
    # the summary: commits that touched the patched files (b3 did not), RPC protocol
    assert f"- `{bup.c['b4'][:12]}` 2026-03-04 rpc: protocol 5.1 (#51) (src/rpc.c)" in md
    assert f"- `{bup.c['b2'][:12]}` 2026-03-02 rpc: add a file comment (src/rpc.c)" in md
    assert "docs: readme" not in md
    assert "### Upstream commits that touched the patched files (2)" in md
    assert f"| old | `{bup.c['b1']}` | 2026-03-01 | 1 | 5.0.0 |" in md
    assert f"| new | `{bup.c['b4']}` | 2026-03-04 | 4 | 5.1.0 |" in md
    assert (
        "**RPC protocol 5.0.0 → 5.1.0.** New clients with old servers: ok; old clients "
        "with new servers: refused." in md
    )
    assert "Target: `master` of" in md and "3 commits in between (3 first-parent)" in md


def test_conflict_keeps_state_and_abort_restores_everything(bup: BumpUpstream, tmp_path: Path) -> None:
    proj = bump_project(tmp_path, bup, pin=bup.c["b1"])
    before = snapshot(proj)
    workdir = tmp_path / "work"
    res = invoke(
        proj, "bump", "fixture", "--upstream", str(bup.path), "--to", "next", "--workdir", str(workdir)
    )
    assert_error(
        res,
        5,
        "refresh stopped at 0001-guard.patch: conflicts in src/rpc.c",
        f"`patchkit refresh fixture --continue --workdir {workdir}`",
        f"`patchkit refresh fixture --abort --workdir {workdir}`",
    )
    assert "Status: stopped at a conflict: nothing was written yet" in res.stdout
    assert snapshot(proj) == before  # recipes and patches untouched
    assert (workdir / "refresh-state.json").is_file()
    # a second bump does not trample the refresh in progress
    res = invoke(
        proj, "bump", "fixture", "--upstream", str(bup.path), "--to", "next", "--workdir", str(workdir)
    )
    assert_error(res, 5, "already in progress")
    res = invoke(proj, "refresh", "fixture", "--abort", "--workdir", str(workdir))
    assert res.exit_code == 0, res.output
    assert snapshot(proj) == before and not workdir.exists()


def test_conflict_resolved_then_continue_moves_every_pin(bup: BumpUpstream, tmp_path: Path) -> None:
    proj = bump_project(tmp_path, bup, pin=bup.c["b1"])
    workdir = tmp_path / "work"
    res = invoke(
        proj, "bump", "fixture", "--upstream", str(bup.path), "--to", "next", "--workdir", str(workdir)
    )
    assert res.exit_code == 5
    resolved = RPC_B5.replace(
        "size_t size) {\n",
        "size_t size) {\n    if (nbytes == 0) {\n"
        "        return 1; /* zero-byte views carry no data */\n    }\n",
        1,
    )
    tree = workdir / "tree"
    (tree / "src" / "rpc.c").write_text(resolved)
    git(tree, "add", "src/rpc.c")
    res = invoke(proj, "refresh", "fixture", "--continue", "--workdir", str(workdir))
    assert res.exit_code == 0, res.output
    assert pins(proj) == {"fixture": bup.c["b5"], "fixture-b": bup.c["b5"], "other": bup.c["b1"]}
    assert check_statuses(proj, bup.c["b5"]) == ["applies", "applies", "applies"]


def test_dry_run_changes_nothing(bup: BumpUpstream, tmp_path: Path) -> None:
    proj = bump_project(tmp_path, bup, pin=bup.c["b1"])
    before = snapshot(proj)
    res = invoke(proj, "bump", "fixture", "--upstream", str(bup.path), "--dry-run")
    assert res.exit_code == 0, res.output
    assert snapshot(proj) == before
    md = res.stdout
    assert "Status: dry run: nothing was written" in md
    assert "| guard | conflicts | src/rpc.c:1 | would be rewritten (3-way merge) |" in md
    assert "### Recipes (would move together)" in md
    # a dry run that would stop at a conflict says so, and still writes nothing
    res = invoke(proj, "bump", "fixture", "--upstream", str(bup.path), "--dry-run", "--to", "next")
    assert res.exit_code == 0, res.output
    assert "Refresh: refresh stopped at 0001-guard.patch: conflicts in src/rpc.c" in res.stdout
    assert snapshot(proj) == before


def test_nothing_to_do_and_bad_input(bup: BumpUpstream, tmp_path: Path) -> None:
    proj = bump_project(tmp_path, bup, pin=bup.c["b4"])
    before = snapshot(proj)
    res = invoke(proj, "bump", "fixture", "--upstream", str(bup.path))
    assert res.exit_code == 0, res.output
    assert "Already at the newest commit of master: nothing to do." in res.stdout
    # backwards / sideways is not a bump
    res = invoke(proj, "bump", "fixture", "--upstream", str(bup.path), "--to", "side")
    assert_error(res, 4, "does not descend from the pin", "--to REF")
    res = invoke(proj, "bump", "fixture", "--upstream", str(bup.path), "--to", "nope")
    assert_error(res, 4, "unknown ref 'nope'")
    res = invoke(proj, "bump", "fixture", "--dry-run", "--build", "fixture")
    assert_error(res, 2, "cannot go with --dry-run")
    res = invoke(proj, "bump", "fixture", "--upstream", str(bup.path), "--build", "other")
    assert_error(res, 2, "--build other: that recipe is not on")
    # recipes of one upstream on different pins: refused, nothing moved
    rb = proj / "recipes" / "fixture-b.toml"
    rb.write_text(rb.read_text().replace(bup.c["b4"], bup.c["b1"]))
    mid = snapshot(proj)
    res = invoke(proj, "bump", "fixture", "--upstream", str(bup.path), "--to", "next")
    assert_error(res, 3, "pin different commits", "fixture-b")
    assert snapshot(proj) == mid != before


def test_bump_then_build_and_smoke_one_recipe(tmp_path: Path) -> None:
    import json

    from tests.fixtures.project import write_patch, write_recipe
    from tests.fixtures.upstream import GUARD_PATCH_BODY, make_upstream

    up = make_upstream(tmp_path / "up")  # a CMake project: c1 → c2 → c3 (master)
    proj = tmp_path / "project"
    (proj / "patches").mkdir(parents=True)
    (proj / "recipes").mkdir()
    (proj / "patches" / "series").write_text("")
    write_patch(proj / "patches", "0001-zero-nbytes-guard.patch", GUARD_PATCH_BODY)
    write_recipe(proj, "fixture", url=str(up.path), commit=up.commits["c1"])
    write_recipe(proj, "fixture-2", url=str(up.path), commit=up.commits["c1"])
    out = tmp_path / "out"
    res = invoke(
        proj,
        "bump",
        "fixture",
        "--upstream",
        str(up.path),
        "--build",
        "fixture-2",
        "--out",
        str(out),
        "-j",
        "2",
    )
    assert res.exit_code == 0, res.output
    assert pins(proj) == {"fixture": up.commits["c3"], "fixture-2": up.commits["c3"]}
    info = json.loads((out / "build-info.json").read_text())
    assert info["recipe"]["name"] == "fixture-2" and info["upstream"]["commit"] == up.commits["c3"]
    assert "### Build\n\n`patchkit build fixture-2`: ok, upstream " in res.stdout
    assert f"smoke {info['smoke']['status']}" in res.stdout
