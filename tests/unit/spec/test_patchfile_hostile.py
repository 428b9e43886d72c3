"""Hostile patches: what ``git apply`` would do with them is what the parser must see, and
``refusals`` says why one must never be applied (paths out of the worktree, symlinks whose
target leaves it or is not stated, diffs the parser cannot check)."""

from __future__ import annotations

import base64
import posixpath
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from patchkit.spec.patchfile import BINARY_MAX, parse_diff, refusals
from patchkit.spec.series import PATCH_MAX


def new_link(
    path: str, target: str, *, mode_line: str = "new file mode 120000", header: str | None = None
) -> str:
    """A symlink creation exactly as `git diff` writes it (the target is the content)."""
    head = header or f"diff --git a/{path} b/{path}"
    return (
        f"{head}\n{mode_line}\nindex 0000000..1234567\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n"
    )


def changed_link(path: str, old: str, new: str, index_mode: str = "120000") -> str:
    return (
        f"diff --git a/{path} b/{path}\nindex 1111111..2222222 {index_mode}\n--- a/{path}\n"
        f"+++ b/{path}\n@@ -1 +1 @@\n-{old}\n\\ No newline at end of file\n+{new}\n"
        "\\ No newline at end of file\n"
    )


def only(text: str) -> str:
    (reason,) = refusals(parse_diff(text))
    return reason


def test_link_targets_as_git_writes_them() -> None:
    link = parse_diff(new_link("docs/l", "../README.md")).files[0]
    assert link.makes_symlink and link.symlink_target == "../README.md"
    changed = parse_diff(changed_link("l", "a", "b/c")).files[0]
    assert changed.makes_symlink and changed.symlink_target == "b/c"
    assert refusals(parse_diff(new_link("docs/l", "../README.md"))) == []
    assert refusals(parse_diff(new_link("l", "src/rpc.c"))) == []


@pytest.mark.parametrize(
    ("path", "target", "why"),
    [
        ("LICENSE", "/etc/passwd", "an absolute target"),
        ("LICENSE", "../../../../etc/passwd", "a target above the worktree"),
        ("docs/x", "../../secret", "a target above the worktree"),
        ("LICENSE", "..", "a target above the worktree"),
        ("LICENSE", "src/../../x", "'..' after a folder name"),
        ("l", "sub/..", "'..' after a folder name"),
        ("LICENSE", "C:/Windows/win.ini", "an absolute target"),
        ("LICENSE", "\\\\server\\share\\x", "an absolute target"),
        ("LICENSE", "..\\..\\x", "backslash"),
        ("LICENSE", ".git/config", "inside .git"),
        ("LICENSE", "./.GIT/config", "inside .git"),
    ],
)
def test_links_leaving_the_worktree_are_refused(path: str, target: str, why: str) -> None:
    reason = only(new_link(path, target))
    assert reason.startswith(f"{path}: makes a symlink to {target!r}") and why in reason
    assert "leave the worktree" in reason


def test_an_existing_link_repointed_out_is_refused() -> None:
    assert "an absolute target" in only(changed_link("l", "ok", "/etc/shadow"))


@pytest.mark.parametrize(
    "mode_line",
    [
        "new file mode 120000",
        "new file mode 0120000",
        "new file mode  120000",
        "new file mode 120755",
        "new file mode 120000   ",
    ],
)
def test_every_spelling_of_a_symlink_mode_is_a_symlink(mode_line: str) -> None:
    # git reads modes with strtoul(, 8) and looks at the type bits only
    assert "an absolute target" in only(new_link("LICENSE", "/etc/passwd", mode_line=mode_line))


def test_a_file_turned_into_a_link_by_a_mode_change_is_refused_without_its_target() -> None:
    text = "diff --git a/LICENSE b/LICENSE\nold mode 100644\nnew mode 120000\n"
    assert "without stating its target" in only(text)
    index_only = "diff --git a/LICENSE b/LICENSE\nsimilarity index 100%\nindex 1..2 120000\n"
    assert "without stating its target" in only(index_only)


def test_a_binary_or_partial_symlink_is_refused() -> None:
    binary = (
        "diff --git a/l b/l\nnew file mode 120000\nindex 0000000..1234567\n"
        "GIT binary patch\nliteral 11\nScmZ?wWMBXQ0RR91\n\nliteral 0\nKcmV+b0RR6000031\n\n"
    )
    assert "without stating its target" in only(binary)
    two_lines = (
        "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1,2 @@\n+/etc\n+passwd\n"
    )
    assert "without stating its target" in only(two_lines)


@pytest.mark.parametrize(
    "header",
    [
        'diff --git "a/LICENSE" "b/LICENSE"',  # quoted names
        "diff --git x/LICENSE y/LICENSE",  # any one-component prefix (git apply -p1)
        'diff --git "a/LIC\\105NSE" "b/LIC\\105NSE"',  # octal escapes
    ],
)
def test_links_behind_unusual_headers_are_still_seen(header: str) -> None:
    assert "an absolute target" in only(new_link("LICENSE", "/etc/passwd", header=header))


def test_a_line_separator_git_does_not_know_cannot_shorten_the_target() -> None:
    # str.splitlines() would cut the target at \x1c; git writes all of it
    text = new_link("l", "a\x1c/../../../etc/passwd")
    link = parse_diff(text).files[0]
    assert link.symlink_target == "a\x1c/../../../etc/passwd"
    assert "'..' after a folder name" in only(text)


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ("../outside", "../outside", "'..' component"),
        ("/etc/passwd", "/etc/passwd", "is absolute"),
        ("a/./b", "a/./b", "'..' component"),
        (".git/hooks/post-checkout", ".git/hooks/post-checkout", "inside .git"),
        ("sub/.GIT/config", "sub/.GIT/config", "inside .git"),
        ("a\\..\\b", "a\\..\\b", "backslash"),
    ],
)
def test_paths_outside_the_worktree_are_refused(old: str, new: str, why: str) -> None:
    text = f"diff --git a/{old} b/{new}\n--- a/{old}\n+++ b/{new}\n@@ -1 +1 @@\n-x\n+y\n"
    reason = refusals(parse_diff(text))[0]
    assert reason.startswith(f"the path {old!r}") and why in reason


def test_rename_and_copy_names_are_checked_too() -> None:
    text = "diff --git a/x b/y\nsimilarity index 100%\ncopy from ../../etc/passwd\ncopy to y\n"
    assert "'../../etc/passwd'" in refusals(parse_diff(text))[0]


def test_unreadable_headers_are_refused() -> None:
    unreadable = "diff --git a/one two b/three four\nnew file mode 120000\n"
    assert "cannot read the file names" in only(unreadable)
    # a traditional diff whose names have no -p1 prefix to strip
    assert "cannot read the file names of '--- LICENSE' (a -p1 diff)" in only(
        "--- LICENSE\n+++ LICENSE\n@@ -1 +1 @@\n-a\n+b\n"
    )


def test_traditional_diffs_are_read_as_git_apply_reads_them() -> None:
    """``diff -u`` / quilt sections (no ``diff --git`` line: conda's and CMake's patch
    folders) are files like any other: -p1 names, creation and deletion by /dev/null,
    their paths checked the same."""
    traditional = "Subject: x\n\n--- a/LICENSE\t2024-01-01 10:00\n+++ b/LICENSE\n@@ -1 +1 @@\n-a\n+b\n"
    parsed = parse_diff(traditional)
    assert parsed.problems == () and refusals(parsed) == []
    (f,) = parsed.files
    assert (f.old_path, f.new_path, f.status, len(f.hunks), f.hunks[0].added) == (
        "LICENSE",
        "LICENSE",
        "M",
        1,
        ("b",),
    )
    # after a git section's last hunk, prose again: a traditional section there is read too
    after = (
        "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
        "--- /dev/null\n+++ b/new.c\n@@ -0,0 +1 @@\n+c\n"
        "--- a/gone.c\n+++ /dev/null\n@@ -1 +0,0 @@\n-d\n"
    )
    parsed = parse_diff(after)
    assert [(f.new_path, f.status, f.deleted) for f in parsed.files] == [
        ("x", "M", False),
        ("new.c", "A", False),
        ("gone.c", "D", True),
    ]
    assert parsed.paths == ("x", "new.c", "gone.c")
    assert "'../up'" in refusals(parse_diff("--- a/../up\n+++ b/../up\n@@ -1 +1 @@\n-a\n+b\n"))[0]


def test_hunk_lines_that_look_like_headers_are_content() -> None:
    # a removed line "-- x" and an added "++ y" inside a counted hunk are not a diff header
    text = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n--- x\n+++ y\n @@ -1 +1 @@\n"
    parsed = parse_diff(text)
    assert refusals(parsed) == [] and len(parsed.hunks) == 1
    assert parsed.files[0].body[1:] == ("--- x", "+++ y", " @@ -1 +1 @@")


def test_a_deleted_symlink_is_fine() -> None:
    text = (
        "diff --git a/l b/l\ndeleted file mode 120000\nindex 1234567..0000000\n--- a/l\n"
        "+++ /dev/null\n@@ -1 +0,0 @@\n-/etc/passwd\n\\ No newline at end of file\n"
    )
    assert refusals(parse_diff(text)) == []


_part = st.sampled_from(["..", ".", "a", "b", "", ".git", "c d", "x\\y"])


@settings(max_examples=400, deadline=None)
@given(depth=st.integers(0, 3), parts=st.lists(_part, min_size=1, max_size=6), absolute=st.booleans())
def test_property_an_accepted_target_stays_inside(depth: int, parts: list[str], absolute: bool) -> None:
    path = "/".join(["d"] * depth + ["link"])
    target = ("/" if absolute else "") + "/".join(parts)
    accepted = refusals(parse_diff(new_link(path, target))) == []
    if accepted:
        # resolved lexically from the link's folder, an accepted target never leaves the
        # worktree (and never needs a folder that could be a link to go back up)
        where = posixpath.normpath(posixpath.join(posixpath.dirname(path) or ".", target))
        assert not target.startswith("/") and "\\" not in target
        assert where != ".." and not where.startswith("../")
        assert ".git" not in where.split("/")


def _base85_lines(data: bytes) -> str:
    """git's base85 lines of a binary block (a length character, then 4-byte groups)."""
    out = []
    for i in range(0, len(data), 52):
        chunk = data[i : i + 52]
        n = len(chunk)
        out.append(
            (chr(ord("A") + n - 1) if n <= 26 else chr(ord("a") + n - 27))
            + base64.b85encode(chunk, pad=True).decode()
        )
    return "\n".join(out) + "\n"


def _binary(kind: str, declared: int, payload: bytes) -> str:
    return (
        "diff --git a/t.bin b/t.bin\nindex 1111111..2222222 100644\nGIT binary patch\n"
        f"{kind} {declared}\n{_base85_lines(zlib.compress(payload))}\nliteral 0\nHcmV?d00001\n\n"
    )


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def test_a_binary_block_that_inflates_past_the_patch_cap_is_refused() -> None:
    # a small patch whose literal says 1 GiB: git apply would inflate it whole, every time
    bomb = _binary("literal", 1 << 30, b"\0" * 64)
    assert "t.bin: a binary literal that inflates to 1,073,741,824 bytes (more than 64 MiB" in only(bomb)
    assert "inflates to 18,446,744,073,709,551,616 bytes" in only(_binary("literal", int("9" * 40), b"x"))
    # a delta: its own size, and the target size its header declares
    assert "binary delta that inflates to" in only(_binary("delta", 1 << 30, b"x"))
    header = _varint(16) + _varint(1 << 30) + b"\x90\x10"  # copy 16 bytes, then nothing
    (f,) = parse_diff(_binary("delta", len(header), header)).files
    assert [(b.kind, b.result_size()) for b in f.binary_blocks] == [("delta", 1 << 30), ("literal", 0)]
    assert "binary delta that inflates to 1,073,741,824 bytes" in only(_binary("delta", len(header), header))
    # at the cap, and a real small one: fine
    assert refusals(parse_diff(_binary("literal", BINARY_MAX, b"x"))) == []
    small = _varint(16) + _varint(20) + b"\x90\x10\x04abcd"
    assert refusals(parse_diff(_binary("delta", len(small), small))) == []
    assert BINARY_MAX == PATCH_MAX  # the cap a patch file has is the cap on what it inflates to


def test_a_diff_git_line_of_many_names_is_read_in_one_pass() -> None:
    import signal

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError("not linear")

    # every space was a candidate split, each compared by slicing the line: 150,000
    # spaces took some twenty seconds; the lengths of the two names agree at one split
    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(10)
    try:
        parsed = parse_diff("diff --git " + "a/x " * 150_000 + "\n")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert parsed.files == () and "cannot read the file names" in parsed.problems[0]
    (f,) = parse_diff("diff --git a/s p/a c e b/s p/a c e\n").files
    assert (f.old_path, f.new_path) == ("s p/a c e", "s p/a c e")
    (f,) = parse_diff("diff --git x/one y/two\n").files  # one space: split there
    assert (f.old_path, f.new_path) == ("one", "two")
