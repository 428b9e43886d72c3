"""The patch file parser (model.patchfile): the diff's files, modes and hunks, and what
``git apply -v`` says about them."""

from __future__ import annotations

from patchkit.model.patchfile import Hunk, parse_apply_output, parse_diff
from tests.fixtures.drift import (
    GUARD_PATCH_BODY,
    README_PATCH_BODY,
    patch_header,
)


def test_parse_hunks_numbers_hunks_per_file() -> None:
    text = GUARD_PATCH_BODY + README_PATCH_BODY
    parsed = parse_diff(patch_header("x") + text)
    paths, hunks = parsed.paths, parsed.hunks
    assert paths == ("src/rpc.c", "README.md")
    assert [(h.file, h.number, h.old_start, h.new_start) for h in hunks] == [
        ("src/rpc.c", 1, 3, 3), ("README.md", 1, 1, 1)]
    assert hunks[0].header == "@@ -3,6 +3,9 @@"


def test_parse_apply_output_offsets_and_failed_hunk() -> None:
    hunks = [Hunk(file="f.txt", number=1, old_start=2, new_start=2, header="@@ -2,3 +2,4 @@"),
             Hunk(file="f.txt", number=2, old_start=10, new_start=11, header="@@ -10,3 +11,4 @@ x"),
             Hunk(file="g.txt", number=1, old_start=2, new_start=2, header="@@ -2,3 +2,4 @@")]
    out = ("Checking patch f.txt...\nHunk #1 succeeded at 4 (offset 2 lines).\n"
           "error: while searching for:\nj\nerror: a source line, not a message\n\n"
           "error: patch failed: f.txt:10\nerror: f.txt: patch does not apply\n"
           "Checking patch g.txt...\nerror: g.txt: No such file or directory\n")
    offsets, conflicts = parse_apply_output(out, hunks)
    assert [(o.file, o.hunk, o.lines) for o in offsets] == [("f.txt", 1, 2)]
    # the "while searching for" body is skipped up to the real "patch failed" line
    assert [(c.file, c.hunk, c.header) for c in conflicts] == [
        ("f.txt", 2, "@@ -10,3 +11,4 @@ x"), ("g.txt", None, "")]
    assert conflicts[1].reason == "No such file or directory"
    assert conflicts[0].where == "f.txt:2"
