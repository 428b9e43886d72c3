"""The patch file parser (spec.patchfile): the diff's files, modes and hunks, and what
``git apply -v`` says about them."""

from __future__ import annotations

import pytest

from patchkit.core.errors import PatchError
from patchkit.spec.patchfile import HEADER_KEYS, Hunk, parse_apply_output, parse_diff, parse_header
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
        ("src/rpc.c", 1, 3, 3),
        ("README.md", 1, 1, 1),
    ]
    assert hunks[0].header == "@@ -3,6 +3,9 @@"


def test_parse_apply_output_offsets_and_failed_hunk() -> None:
    hunks = [
        Hunk(file="f.txt", number=1, old_start=2, new_start=2, header="@@ -2,3 +2,4 @@"),
        Hunk(file="f.txt", number=2, old_start=10, new_start=11, header="@@ -10,3 +11,4 @@ x"),
        Hunk(file="g.txt", number=1, old_start=2, new_start=2, header="@@ -2,3 +2,4 @@"),
    ]
    out = (
        "Checking patch f.txt...\nHunk #1 succeeded at 4 (offset 2 lines).\n"
        "error: while searching for:\nj\nerror: a source line, not a message\n\n"
        "error: patch failed: f.txt:10\nerror: f.txt: patch does not apply\n"
        "Checking patch g.txt...\nerror: g.txt: No such file or directory\n"
    )
    offsets, conflicts = parse_apply_output(out, hunks)
    assert [(o.file, o.hunk, o.lines) for o in offsets] == [("f.txt", 1, 2)]
    # the "while searching for" body is skipped up to the real "patch failed" line
    assert [(c.file, c.hunk, c.header) for c in conflicts] == [
        ("f.txt", 2, "@@ -10,3 +11,4 @@ x"),
        ("g.txt", None, ""),
    ]
    assert conflicts[1].reason == "No such file or directory"
    assert conflicts[0].where == "f.txt:2"


MIXED = """\
Subject: many kinds of change
Why: to see every header parse_diff reads

Free text before the first diff is not part of it:
diff --git a/not/this b/not/this is prose
diff --git a/link b/link
new file mode 120000
index 0000000..1234567
--- /dev/null
+++ b/link
@@ -0,0 +1 @@
+target
\\ No newline at end of file
diff --git a/old.c b/new.c
similarity index 90%
rename from old.c
rename to new.c
index 1111111..2222222 100644
--- a/old.c
+++ b/new.c
@@ -1,2 +1,2 @@ int f()
-a
+b
 c
@@ -10 +10 @@
-x
+y
diff --git a/run.sh b/run.sh
old mode 100644
new mode 100755
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
index 3333333..0000000
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
diff --git a/blob.bin b/blob.bin
index 4444444..5555555 100644
GIT binary patch
literal 3
KcmZ?wWMBXQ0RR91

"""


def test_parse_diff_modes_hunks_and_targets() -> None:
    parsed = parse_diff(MIXED)
    files = {f.new_path: f for f in parsed.files}
    assert list(files) == ["link", "new.c", "run.sh", "gone.txt", "blob.bin"]
    link, renamed, script, gone, blob = parsed.files
    assert (link.old_mode, link.new_mode, link.makes_symlink) == (None, "120000", True)
    assert link.body == ("@@ -0,0 +1 @@", "+target", "\\ No newline at end of file")
    assert (renamed.old_path, renamed.new_path) == ("old.c", "new.c")
    assert (renamed.old_mode, renamed.new_mode) == ("100644", "100644")  # from the index line
    assert [(h.file, h.number, h.old_start, h.new_start, h.header) for h in renamed.hunks] == [
        ("new.c", 1, 1, 1, "@@ -1,2 +1,2 @@ int f()"),
        ("new.c", 2, 10, 10, "@@ -10 +10 @@"),
    ]
    assert (script.old_mode, script.new_mode, script.hunks, script.body) == ("100644", "100755", (), ())
    assert (gone.old_mode, gone.new_mode) == ("100644", None)
    assert [(h.old_start, h.new_start) for h in gone.hunks] == [(1, 0)]
    assert blob.hunks == () and blob.body[:2] == ("GIT binary patch", "literal 3")
    assert not any(f.makes_symlink for f in parsed.files[1:])
    assert parsed.targets == ("link", "new.c", "run.sh", "gone.txt", "blob.bin")
    assert parsed.paths == ("link", "old.c", "new.c", "run.sh", "gone.txt", "blob.bin")
    assert parsed.hunks[0].header == "@@ -0,0 +1 @@" and len(parsed.hunks) == 4
    # what git's summary says of each (the diffstat's create/rename/mode/delete lines)
    assert [(f.status, f.similarity) for f in parsed.files] == [
        ("A", None),
        ("R", 90),
        ("M", None),
        ("D", None),
        ("M", None),
    ]


def test_symlink_by_a_mode_change_and_by_the_index_line() -> None:
    change = "diff --git a/l b/l\nold mode 100644\nnew mode 120000\n"
    index = "diff --git a/l b/l\nindex 1234567..89abcde 120000\n--- a/l\n+++ b/l\n@@ -1 +1 @@\n-a\n+b\n"
    assert parse_diff(change).files[0].makes_symlink
    assert parse_diff(index).files[0].makes_symlink
    assert not parse_diff(GUARD_PATCH_BODY).files[0].makes_symlink


def test_parse_diff_of_text_without_a_diff() -> None:
    assert parse_diff("Subject: x\n\njust words\n").files == ()
    assert parse_diff("").targets == () and parse_diff("").hunks == ()


def test_parse_header() -> None:
    text = "Subject: s\nWhy: w: with a colon\nUpstream-Status: pending\n\nSubject: not header\n"
    assert parse_header(text, "p.patch") == {
        "Subject": "s",
        "Why": "w: with a colon",
        "Upstream-Status": "pending",
    }
    assert parse_header("diff --git a/x b/x\n", "p.patch") == {}
    assert parse_header("From 0123 Mon Sep 17 00:00:00 2001\nSubject: x\n", "p.patch") == {}
    assert parse_header("some prose: here\nSubject: x\n", "p.patch") == {}  # a key with spaces ends it
    with pytest.raises(PatchError) as e:
        parse_header("Sbject: s\n", "patches/0001-x.patch")
    assert str(e.value) == "patches/0001-x.patch: unknown header key 'Sbject' (did you mean \"Subject\"?)"
    assert set(HEADER_KEYS) >= {"Subject", "Why", "Upstream-Status", "When", "Default", "Experimental"}


def test_apply_output_whole_file_failures_and_conflict_json() -> None:
    hunks = [Hunk(file="a.c", number=1, old_start=5, new_start=5, header="@@ -5,3 +5,4 @@")]
    out = (
        "Checking patch a.c...\nHunk #1 succeeded at 5.\n"
        "Checking patch new.c...\nerror: new.c: already exists in working directory\n"
        "Checking patch b.c...\nerror: patch failed: b.c:40\nerror: b.c: patch does not apply\n"
    )
    offsets, conflicts = parse_apply_output(out, hunks)
    assert offsets == []  # "succeeded at 5" with no offset is not an offset
    assert [(c.file, c.hunk, c.header, c.reason) for c in conflicts] == [
        ("new.c", None, "", "already exists in working directory"),
        ("b.c", None, "line 40", "context does not match"),
    ]
    assert conflicts[0].where == "new.c (already exists in working directory)"
    assert conflicts[1].to_json() == {
        "file": "b.c",
        "hunk": None,
        "header": "line 40",
        "reason": "context does not match",
    }
    _, alone = parse_apply_output("error: c.c: patch does not apply\n", [])
    assert [(c.file, c.reason) for c in alone] == [("c.c", "does not apply")]
    neg, _ = parse_apply_output("Checking patch a.c...\nHunk #1 succeeded at 2 (offset -3 lines).\n", hunks)
    assert [(o.file, o.hunk, o.lines) for o in neg] == [("a.c", 1, -3)]


def test_hunks_carry_their_ranges_and_both_sides() -> None:
    diff = (
        'diff --git "a/sp ace.c" "b/sp ace.c"\nindex 1111111..2222222 100644\n'
        '--- "a/sp ace.c"\n+++ "b/sp ace.c"\n'
        "@@ -1,4 +1,5 @@ int f(void)\n {\n-\tint i;\n+\tint i = 0;\n+++i;\n \n---i;\n+return i;\n"
        "\\ No newline at end of file\n"
        "@@ -9 +10,0 @@\n-gone\n"
    )
    (f,) = parse_diff(diff).files
    assert (f.old_path, f.new_path, f.line) == ("sp ace.c", "sp ace.c", 1)
    first, second = f.hunks
    assert (first.old_count, first.new_count, first.line, first.complete) == (4, 5, 5, True)
    assert (first.old_range, first.new_range) == (range(1, 5), range(1, 6))
    assert first.before == ("{", "\tint i;", "", "--i;")
    assert first.after == ("{", "\tint i = 0;", "++i;", "", "return i;")
    assert first.added == ("\tint i = 0;", "++i;", "return i;")
    assert first.removed == ("\tint i;", "--i;")
    assert first.added_runs == (("\tint i = 0;", "++i;"), ("return i;",))
    assert first.removed_runs == (("\tint i;",), ("--i;",))
    # as file lines: the marked last line keeps no newline, on the side that has it
    assert first.image("old") == ("{\n", "\tint i;\n", "\n", "--i;\n")
    assert first.image("new") == ("{\n", "\tint i = 0;\n", "++i;\n", "\n", "return i;")
    assert (second.old_range, second.new_range, second.before, second.after) == (
        range(9, 10),
        range(10, 10),
        ("gone",),
        (),
    )


def test_a_hunk_short_of_its_count_or_after_prose_is_marked() -> None:
    short = "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n"
    assert not parse_diff(short).files[0].hunks[0].complete
    loose = "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\nprose\n@@ -5 +5 @@\n-x\n+y\n"
    (f,) = parse_diff(loose).files
    assert f.loose and len(f.hunks) == 2 and all(h.complete for h in f.hunks)
    assert not parse_diff(short).files[0].loose


def test_parse_from_bytes_keeps_the_bytes_and_reads_names_as_text() -> None:
    data = b"diff --git a/caf\xe9.c b/caf\xe9.c\n--- a/caf\xe9.c\n+++ b/caf\xe9.c\n@@ -1 +1 @@ \xff\n-\xe9\n+\xea\n"
    raw, text = parse_diff(data), parse_diff(data.decode("utf-8", "replace"))
    assert raw.exact and not text.exact
    assert raw.paths == text.paths == ("caf\ufffd.c",)
    assert raw.hunks[0].header == text.hunks[0].header
    (h,) = raw.hunks
    assert [ln.encode("utf-8", "surrogateescape") for ln in h.image("old") + h.image("new")] == [
        b"\xe9\n",
        b"\xea\n",
    ]
