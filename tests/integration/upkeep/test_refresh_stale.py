"""A patch that does not apply on its own base as it is (a conda or quilt queue applied
with GNU patch's fuzz: its context went stale, a hunk's line counts are off): the refresh
takes it on its base with recounted hunks or reduced context, says so, and merges it 3-way
from there; one that does not go in even so stops saying it was stale before the sync."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import Result

from tests.fixtures.project import invoke
from tests.fixtures.upstream import GIT_ENV, commit_files, git

F = "".join(f"line {i}\n" for i in range(1, 31))


def _setup(
    tmp_path: Path, patches: dict[str, str], text: str = F, new_text: str | None = None
) -> tuple[Path, Path, str, str]:
    old = os.environ.copy()
    os.environ.update(GIT_ENV)
    os.environ["GIT_CONFIG_GLOBAL"] = os.devnull
    tmp_path.mkdir(exist_ok=True)
    try:
        up = tmp_path / "up"
        up.mkdir()
        git(up, "init", "-q", "-b", "master")
        base = commit_files(up, {"src/f.c": text}, "initial")
        if new_text is None:
            new_text = F.replace("line 25\n", "line 25 (up)\n")
        new = commit_files(up, {"src/f.c": new_text}, "upstream: line 25")
    finally:
        os.environ.clear()
        os.environ.update(old)
    q = tmp_path / "q"
    q.mkdir()
    for name, text in patches.items():
        (q / name).write_text(text)
    (q / "series").write_text("".join(f"{n}\n" for n in patches))
    proj = tmp_path / "proj"
    (proj / "patches").mkdir(parents=True)
    (proj / "recipes").mkdir()
    r = invoke(proj, "series", "import", str(q), "--base", base)
    assert r.exit_code == 0, r.output
    return up, proj, base, new


# made on a file whose line 2 read otherwise (its first context line no longer matches),
# as a traditional diff (no index line, so git apply --3way has no blob to merge from)
FUZZY = "Spell four out\n\n--- a/src/f.c\n+++ b/src/f.c\n@@ -2,5 +2,5 @@\n line 2 (old)\n line 3\n-line 4\n+line four\n line 5\n line 6\n"
# its hunk says 5 lines and holds 4 (GNU patch takes it; git apply: corrupt patch)
SHORT = "Spell ten out\n\n--- a/src/f.c\n+++ b/src/f.c\n@@ -9,5 +9,5 @@\n line 9\n-line 10\n+line ten\n line 11\n line 12\n"
# nothing of it is on the base
GONE = "Spell gone out\n\n--- a/src/f.c\n+++ b/src/f.c\n@@ -14,3 +14,3 @@\n nope 1\n-nope 2\n+nope two\n nope 3\n"


def _refresh(tmp_path: Path, proj: Path, up: Path, base: str, new: str) -> Result:
    """``patchkit refresh --all`` of the fixture's queue from ``base`` onto ``new``."""
    return invoke(
        proj,
        "refresh",
        "--all",
        "--repo",
        str(up),
        "--from",
        base,
        "--onto",
        new,
        "--workdir",
        str(tmp_path / "wd"),
    )


def test_a_patch_stale_on_its_own_base_is_taken_there_loosely_and_merged(tmp_path: Path) -> None:
    up, proj, base, new = _setup(tmp_path, {"01-four.patch": FUZZY, "02-ten.patch": SHORT})
    # check says so per patch (git apply cannot read 02 at all) and goes on with the rest
    r = invoke(proj, "check", "--all", "--repo", str(up), "--ref", base, "--json")
    assert r.exit_code == 11, r.output
    (ref,) = json.loads(r.stdout)["refs"]
    assert [v["status"] for v in ref["results"]] == ["conflicts", "conflicts"]
    (c,) = ref["results"][1]["conflicts"]
    assert c["file"] == "src/f.c" and c["reason"].startswith("git apply cannot read the patch: corrupt patch")
    r = _refresh(tmp_path, proj, up, base, new)
    assert r.exit_code == 0, r.output
    assert (
        f"01-four.patch: does not apply on its base {base[:12]} as it is; taken there with reduced context"
        in r.output
    )
    assert "02-ten.patch: does not apply on its base" in r.output and "recounted" in r.output
    pdir = proj / "patches"
    four = (pdir / "01-four.patch").read_text()
    assert four.startswith("Spell four out\n") and "diff --git a/src/f.c b/src/f.c" in four
    assert " line 2\n line 3\n-line 4\n+line four\n" in four  # the base's context now
    git(up, "checkout", "-q", "--detach", new)
    for name in ("01-four.patch", "02-ten.patch"):
        git(up, "apply", "--check", str(pdir / name))


def test_a_patch_that_does_not_go_in_on_its_base_at_all_says_it_was_stale_before(tmp_path: Path) -> None:
    up, proj, base, new = _setup(tmp_path, {"01-gone.patch": GONE})
    r = _refresh(tmp_path, proj, up, base, new)
    assert r.exit_code == 5, r.output
    assert (
        f"refresh stopped at 01-gone.patch: it does not apply and cannot be 3-way merged (it does not apply "
        f"on its own base {base[:12]} either, not even with reduced context: it was stale before this sync"
    ) in r.output


CMAKE = (
    "".join(f"# {i}\n" for i in range(1, 11))
    + ("set_target_properties(llama PROPERTIES\n    VERSION ${LLAMA_INSTALL_VERSION}\n    SOVERSION 0\n)\n")
    + "".join(f"# {i}\n" for i in range(11, 21))
)
# upstream fixed the same problem its own way: a line among the patch's context lines
CMAKE_UP = CMAKE.replace("    SOVERSION 0\n", "    SOVERSION 0\n    MACHO_CURRENT_VERSION 0\n")
VERSION0 = (
    "Fix the dylib version\n\n--- a/src/f.c\n+++ b/src/f.c\n@@ -10,5 +10,5 @@\n # 10\n"
    " set_target_properties(llama PROPERTIES\n-    VERSION ${LLAMA_INSTALL_VERSION}\n+    VERSION 0\n"
    "     SOVERSION 0\n )\n"
)


def test_a_clean_merge_with_upstream_lines_among_the_hunks_own_is_to_review(tmp_path: Path) -> None:
    """Not a function (a CMake property list): upstream added a line two below the
    patched one; git merges it cleanly, the refresh lists it to review."""
    up, proj, base, new = _setup(tmp_path, {"01-v0.patch": VERSION0}, CMAKE, CMAKE_UP)
    wd = tmp_path / "wd"
    r = invoke(
        proj, "refresh", "--all", "--repo", str(up), "--from", base, "--onto", new, "--workdir", str(wd)
    )
    assert r.exit_code == 0, r.output
    assert (
        "merged cleanly, review 01-v0.patch: src/f.c: the hunk `-9,7 +9,7` merged with upstream's "
        f"change among or right next to its lines (upstream {new[:12]} upstream: line 25)"
    ) in r.output
    # a change of upstream's two lines away from the hunk is not among its lines
    up2, proj2, base2, new2 = _setup(
        tmp_path / "far", {"01-v0.patch": VERSION0}, CMAKE, CMAKE.replace("# 17\n", "# seventeen\n")
    )
    r = invoke(
        proj2,
        "refresh",
        "--all",
        "--repo",
        str(up2),
        "--from",
        base2,
        "--onto",
        new2,
        "--workdir",
        str(tmp_path / "wd2"),
    )
    assert r.exit_code == 0, r.output
    assert "right next to its lines" not in r.output  # (the nearby rule may still name it)
