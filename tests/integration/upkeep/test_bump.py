"""`patchkit bump` on a fixture upstream (tests/fixtures/drift.py, make_bump_upstream):
a clean bump, one that needs a 3-way refresh, one that stops at a conflict (state kept,
--abort restores everything, --continue moves every pin), the dry run, the summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.spec.series import load_series
from tests.fixtures.drift import RPC_B5, BumpUpstream, bump_project, make_bump_upstream
from tests.fixtures.project import assert_error, invoke
from tests.fixtures.upstream import git, with_git_env


@pytest.fixture(scope="module")
def bup(tmp_path_factory: pytest.TempPathFactory) -> BumpUpstream:
    return with_git_env(make_bump_upstream, tmp_path_factory.mktemp("bump"))


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
    assert "| `guard` | applies-with-offset | `src/rpc.c: #1 +3` | rewritten |" in md
    assert "| `cli` | applies | `-` |" in md
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
    assert "| `guard` | conflicts | `src/rpc.c:1` | rewritten (3-way merge) |" in md
    # the summary: commits that touched the patched files (b3 did not), RPC protocol
    assert f"- `{bup.c['b4'][:12]}` 2026-03-04 `rpc: protocol 5.1 (#51)` (`src/rpc.c`)" in md
    assert f"- `{bup.c['b2'][:12]}` 2026-03-02 `rpc: add a file comment` (`src/rpc.c`)" in md
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
    assert "| `guard` | conflicts | `src/rpc.c:1` | would be rewritten (3-way merge) |" in md
    assert "### Recipes (would move together)" in md
    # a dry run that would stop at a conflict says so, and still writes nothing
    res = invoke(proj, "bump", "fixture", "--upstream", str(bup.path), "--dry-run", "--to", "next")
    assert res.exit_code == 0, res.output
    assert "Refresh: `refresh stopped at 0001-guard.patch: conflicts in src/rpc.c" in res.stdout
    assert snapshot(proj) == before


def test_nothing_to_do_and_bad_input(bup: BumpUpstream, tmp_path: Path) -> None:
    proj = bump_project(tmp_path, bup, pin=bup.c["b4"])
    before = snapshot(proj)
    res = invoke(proj, "bump", "fixture", "--upstream", str(bup.path))
    assert res.exit_code == 0, res.output
    assert "Already at the newest commit of `master`: nothing to do." in res.stdout
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


def test_every_output_is_checked_before_the_project_changes(bup: BumpUpstream, tmp_path: Path) -> None:
    """A --summary that cannot be written (a file where its folder should
    be, a folder) or a --build output folder that is not patchkit's stops the bump before a
    pin or patch is rewritten."""
    proj = bump_project(tmp_path, bup, pin=bup.c["b1"])
    before = snapshot(proj)
    plain = tmp_path / "plain.txt"
    plain.write_text("a file\n")
    res = invoke(proj, "bump", "fixture", "--upstream", str(bup.path), "--summary", str(plain / "pr.md"))
    assert_error(res, 2, f"cannot write {plain / 'pr.md'}: {plain} is not a folder")
    assert snapshot(proj) == before and pins(proj)["fixture"] == bup.c["b1"]
    res = invoke(proj, "bump", "fixture", "--upstream", str(bup.path), "--summary", str(tmp_path))
    assert_error(res, 2, "is a directory")
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep\n")
    res = invoke(
        proj, "bump", "fixture", "--upstream", str(bup.path), "--build", "fixture", "--out", str(foreign)
    )
    assert_error(res, 2, "is not a patchkit output dir")
    assert snapshot(proj) == before and (foreign / "notes.txt").read_text() == "keep\n"
    # a summary in a folder that does not exist yet is fine (it is made), through a link too
    (tmp_path / "real.md").write_text("old\n")
    (tmp_path / "link.md").symlink_to(tmp_path / "real.md")
    res = invoke(proj, "bump", "fixture", "--upstream", str(bup.path), "--summary", str(tmp_path / "link.md"))
    assert res.exit_code == 0, res.output
    assert (tmp_path / "link.md").is_symlink() and (tmp_path / "real.md").read_text() == res.stdout


HOSTILE = (
    "rpc: fix (#1) cc @octocat [click me](https://evil.example/x) ![t](https://evil.example/p.png) "
    "<b>x</b> \x1b]8;;https://evil.example\x07link\x1b]8;;\x07 \x1b[2J\x9b31m`code` done (#27142)"
)


def test_hostile_upstream_subject_is_inert(tmp_path: Path) -> None:
    """On the real command: a hostile subject in the upstream reaches
    neither the terminal as escapes nor the pull request as markup."""
    up = make_bump_upstream(tmp_path / "up")
    git(up.path, "checkout", "-q", "master")
    rpc = (up.path / "src" / "rpc.c").read_text()
    (up.path / "src" / "rpc.c").write_text(rpc + "/* hostile */\n")
    git(up.path, "add", "-A")
    git(up.path, "commit", "-q", "-m", HOSTILE)
    proj = bump_project(tmp_path, up, pin=up.c["b1"])
    summary = tmp_path / "pr.md"
    res = invoke(proj, "bump", "fixture", "--upstream", str(up.path), "--summary", str(summary), "--dry-run")
    assert res.exit_code == 0, res.output
    for text in (res.stdout, res.stderr, summary.read_text()):
        assert not any(c in text for c in "\x1b\x07\x9b"), repr(text)
    md = summary.read_text()
    assert "\\x1b]8;;https://evil.example\\x07" in md  # visible, escaped
    outside = "".join(md.split("`")[::2])  # what GitHub would render as markdown
    for bad in ("@octocat", "](", "<b>", "evil.example"):
        assert bad not in outside, bad
    assert md.count("`") % 2 == 0


RENAME_PATCH = """\
diff --git a/src/rpc.c b/src/rpc.c
--- a/src/rpc.c
+++ b/src/rpc.c
@@ -7,3 +7,7 @@ int rpc_check_bounds(size_t data, size_t nbytes, size_t base, size_t size) {
     }
     return 1;
 }
+const char * rpc_version(void) {
+    const char * (*get)(void) = fixture_version;
+    return get();
+}
"""


def test_bump_build_lists_compile_errors_per_patch(tmp_path: Path) -> None:
    """Upstream renames a function a patch uses; the patch still merges
    cleanly, the build fails, and the summary names the patch and its error line."""
    from tests.fixtures.project import write_patch, write_recipe
    from tests.fixtures.upstream import CORE, HEADER, make_upstream

    up = make_upstream(tmp_path / "up")
    tools = {
        f"tools/{t}.c": (up.path / "tools" / f"{t}.c").read_text() for t in ("cli", "bench", "rpc_server")
    }
    renamed = {"include/fixture.h": HEADER.replace("fixture_version", "fixture_version_string")}
    renamed["src/core.c"] = CORE.replace("VERSION", "2").replace("fixture_version", "fixture_version_string")
    renamed |= {k: v.replace("fixture_version", "fixture_version_string") for k, v in tools.items()}
    for rel, text in renamed.items():
        (up.path / rel).write_text(text)
    git(up.path, "add", "-A")
    git(up.path, "commit", "-q", "-m", "core: rename fixture_version (#77)")
    proj = tmp_path / "project"
    (proj / "patches").mkdir(parents=True)
    (proj / "recipes").mkdir()
    (proj / "patches" / "series").write_text("")
    write_patch(proj / "patches", "0001-rpc-version.patch", RENAME_PATCH)
    write_recipe(proj, "fixture", url=str(up.path), commit=up.commits["c3"])
    res = invoke(proj, "bump", "fixture", "--upstream", str(up.path), "--build", "fixture", "-j", "2")
    assert res.exit_code == 6, res.output
    md = res.stdout
    assert "### Compile errors in patched code" in md
    (line,) = [
        ln for ln in md.splitlines() if ln.startswith("- `") and "error(s) in lines its hunks cover" in ln
    ]
    assert line.startswith("- `rpc-version`: 1 error(s)")
    errs = [ln for ln in md.splitlines() if ln.startswith("  - `src/rpc.c:11:")]
    assert len(errs) == 1 and "fixture_version" in errs[0] and "undeclared" in errs[0]
    assert "compile error(s) in lines the patches cover" in res.stderr
