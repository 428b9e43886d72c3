"""`check`'s cascades are found on the earlier patches' result: a patch that conflicts is
tried again on the files with the failed earlier patches put in anyway (their hunks where
they apply, else with some context unmatched), and is a cascade of them when it applies
there, even when every line it needs appears elsewhere in the file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from patchkit.core.fs import sha256_file
from patchkit.spec.series import load_series
from patchkit.upkeep.check import check_series
from patchkit.upkeep.textapply import FileContent, blob_id, force, prepare
from tests.fixtures.drift import patch_header
from tests.fixtures.upstream import GIT_ENV, commit_files, git

M = """\
void a(void) {
    check();
    one();
}

void b(void) {
    zero();
    two();
    three();
    five();
    four();
}
"""
M1 = M.replace("    two();\n", "    two();\n    check();\n")  # patch 2: check() in b too
M2 = M1.replace("zero();", "zero(2);")  # patch 3, on top of patch 2
M_UP = M.replace("four();", "four(1);")  # upstream: in patch 2's context only
OTHER = "int other = 1;\n"


@pytest.fixture
def chain(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    old = os.environ.copy()
    os.environ.update(GIT_ENV)
    os.environ["GIT_CONFIG_GLOBAL"] = os.devnull
    try:
        repo = tmp_path / "up"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "master")
        c = {"base": commit_files(repo, {"src/m.c": M, "src/o.c": OTHER}, "initial")}
        git(repo, "checkout", "-q", "-b", "work")
        c["p1"] = commit_files(repo, {"src/o.c": "int other = 2;\n"}, "p1")
        c["p2"] = commit_files(repo, {"src/m.c": M1}, "p2")
        c["p3"] = commit_files(repo, {"src/m.c": M2}, "p3")
        bodies = [
            git(repo, "diff", c[a], c[b]) + "\n" for a, b in (("base", "p1"), ("p1", "p2"), ("p2", "p3"))
        ]
        git(repo, "checkout", "-q", "master")
        c["new"] = commit_files(repo, {"src/m.c": M_UP}, "b: four takes one")
    finally:
        os.environ.clear()
        os.environ.update(old)
    pdir = tmp_path / "patches"
    pdir.mkdir()
    lines = []
    for i, (name, body) in enumerate(zip(("other", "check", "zero"), bodies, strict=True), 1):
        f = pdir / f"{i:04d}-{name}.patch"
        f.write_text(patch_header(f"m: {name}") + body)
        lines.append(f"{f.name} sha256={sha256_file(f)}\n")
    (pdir / "series").write_text("".join(lines))
    return repo, pdir, c


def test_a_patch_that_needs_a_failed_earlier_one_is_its_cascade(
    chain: tuple[Path, Path, dict[str, str]],
) -> None:
    repo, pdir, c = chain
    patches = load_series(pdir).patches
    report = check_series(repo, patches, [c["base"], c["new"]])
    at_base, at_new = (r.results for r in report.refs)
    assert [v.status.value for v in at_base] == ["applies", "applies", "applies"]
    assert [v.status.value for v in at_new] == ["applies", "conflicts", "conflicts"]
    # #2's own conflict: upstream changed its context
    assert at_new[1].cascade_of == () and at_new[1].note == ""
    # #3 needs the `check();` #2 adds, a line the file has elsewhere (in a()): it applies
    # once #2 is in, so it is #2's cascade, not a conflict of its own
    assert at_new[2].note == "checked without check"
    assert at_new[2].cascade_of == ("check",)
    assert at_new[2].label == "cascade of check"


def test_a_patch_that_still_fails_with_the_earlier_one_in_is_its_own_conflict(
    chain: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    repo, pdir, _ = chain
    env = {**os.environ, **GIT_ENV, "GIT_CONFIG_GLOBAL": os.devnull}
    old = os.environ.copy()
    os.environ.update(env)
    try:  # upstream also changes the line #3 changes
        newer = commit_files(repo, {"src/m.c": M_UP.replace("zero();", "zero(0);")}, "b: zero takes nothing")
    finally:
        os.environ.clear()
        os.environ.update(old)
    at_new = check_series(repo, load_series(pdir).patches, [newer]).refs[0].results
    assert at_new[2].status.value == "conflicts"
    assert at_new[2].cascade_of == ()
    assert at_new[2].note == "checked without check"


def test_force_puts_a_hunk_in_with_its_changed_context_unmatched() -> None:

    diff = (
        b"diff --git a/src/m.c b/src/m.c\n--- a/src/m.c\n+++ b/src/m.c\n"
        b"@@ -6,6 +6,7 @@ void a(void) {\n void b(void) {\n     zero();\n     two();\n"
        b"+    check();\n     three();\n     five();\n     four();\n"
    )
    text = prepare(diff)
    assert text is not None
    up = M_UP.encode()
    got = force(text, {"src/m.c": FileContent(mode="100644", oid=blob_id(up), data=up)})
    after = got["src/m.c"]
    assert after is not None
    assert after.data.decode() == M1.replace("four();", "four(1);")
    # nothing placed where no hunk fits: the file is left as it was
    other = b"int x;\n"
    assert force(text, {"src/m.c": FileContent(mode="100644", oid=blob_id(other), data=other)}) == {}
