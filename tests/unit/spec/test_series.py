"""Series and patch-header parsing, hashing, hunk location (pure unit tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.builder.patch import failed_hunks
from patchkit.core.errors import PatchError
from patchkit.core.fs import sha256_file
from patchkit.spec.series import load_series, patch_name_from_file, rehash_series

HEADER = (
    "Subject: s\nWhy: because\nUpstream-Status: submitted https://x/pr/1\n"
    "When: 0123456..\nExperimental: no\n\n"
)
BODY = (
    "diff --git a/a.c b/a.c\n--- a/a.c\n+++ b/a.c\n@@ -1,3 +1,4 @@\n x\n+y\n z\n w\n"
    "@@ -10,2 +11,2 @@\n-p\n+q\n r\n"
    "diff --git a/b.c b/b.c\n--- a/b.c\n+++ b/b.c\n@@ -5 +5 @@\n-m\n+n\n"
)


def make(tmp_path: Path, header: str = HEADER, body: str = BODY, line: str | None = None) -> Path:
    d = tmp_path / "patches"
    d.mkdir(exist_ok=True)
    p = d / "0001-fix-thing.patch"
    p.write_text(header + body)
    (d / "series").write_text(
        "# comment\n\n" + (line or f"0001-fix-thing.patch sha256={sha256_file(p)}") + "\n"
    )
    return d


def test_series_parses_header_and_files(tmp_path: Path) -> None:
    s = load_series(make(tmp_path))
    (p,) = s.patches
    assert p.name == "fix-thing"
    assert p.upstream_status.startswith("submitted")
    assert (p.when_from, p.when_to) == ("0123456", None)
    assert p.files == ("a.c", "b.c")
    assert p.default and not p.experimental
    assert p.read_verified() == (HEADER + BODY).encode()


def test_hash_mismatch_refused_and_rehash_fixes_it(tmp_path: Path) -> None:
    d = make(tmp_path)
    (d / "0001-fix-thing.patch").write_text(HEADER + BODY + "\n")
    s = load_series(d)
    with pytest.raises(PatchError, match="sha256 is .* the series records"):
        s.patches[0].read_verified()
    changed = rehash_series(d)
    assert [c[0] for c in changed] == ["0001-fix-thing.patch"]
    assert load_series(d).patches[0].read_verified()
    assert (d / "series").read_text().startswith("# comment\n")


@pytest.mark.parametrize(
    ("header", "line", "message"),
    [
        (HEADER.replace("Why: because\n", ""), None, "header lacks Why"),
        (
            HEADER.replace("Upstream-Status: submitted https://x/pr/1", "Upstream-Status: pendng"),
            None,
            'did you mean "pending"',
        ),
        (HEADER.replace("When: 0123456..", "When: 0123456"), None, "When must be FROM..TO"),
        (HEADER.replace("When: 0123456..", "When: main.."), None, "is not a commit sha"),
        (HEADER.replace("Experimental: no", "Experimental: maybe"), None, "must be yes or no"),
        ("Sbject: x\n" + HEADER, None, "unknown header key 'Sbject' (did you mean \"Subject\"?)"),
        (HEADER, "0001-fix-thing.patch", "expected `FILE sha256=<64 hex>`"),
        (HEADER, "../x.patch sha256=" + "0" * 64, "must be a file in patches/"),
        (HEADER, "0002-missing.patch sha256=" + "0" * 64, "does not exist"),
    ],
)
def test_bad_series_or_header(tmp_path: Path, header: str, line: str | None, message: str) -> None:
    with pytest.raises(PatchError) as exc:
        load_series(make(tmp_path, header=header, line=line))
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_patch_without_diff_refused(tmp_path: Path) -> None:
    with pytest.raises(PatchError, match="holds no `diff --git` section"):
        load_series(make(tmp_path, body="just text\n"))


def test_name_from_file() -> None:
    assert patch_name_from_file("0001-rpc-guard.patch") == "rpc-guard"
    assert patch_name_from_file("fix.diff") == "fix"


def test_hunks_and_failure_location() -> None:
    err = "error: patch failed: a.c:10\nerror: a.c: patch does not apply\n"
    assert failed_hunks(BODY, err) == ["a.c hunk #2 (@@ -10,2 +11,2 @@)"]
    assert failed_hunks(BODY, "error: b.c: No such file or directory\n") == [
        "b.c: the file does not exist at this commit"
    ]


def test_a_format_patch_file_is_a_patch_as_it_is(tmp_path: Path) -> None:
    from tests.fixtures.queue import QUEUE_DATA

    d = tmp_path / "patches"
    d.mkdir()
    lines = []
    for mail in sorted(QUEUE_DATA.glob("*.patch")):
        (d / mail.name).write_bytes(mail.read_bytes())
        lines.append(f"{mail.name} sha256={sha256_file(d / mail.name)}")
    (d / "series").write_text("\n".join(lines) + "\n")
    s = load_series(d)
    first, notes, move, table, _ = s.patches
    assert first.kind == "mail" and first.name == "rpc-let-z-ro-byte-views-pass-the-bounds-check"
    assert first.author == "Jöhannes Gäßler <jg@example.invalid>"
    assert first.date == "Thu, 6 Nov 2025 10:00:00 +0100"
    assert first.subject == "rpc: let zëro-byte views pass the bounds check"
    assert first.why.startswith("Zero-element views carry")
    assert (first.upstream_status, first.when, first.default, first.experimental) == (
        "pending",
        "..",
        True,
        False,
    )
    assert first.derived == ("Why", "Upstream-Status", "When", "Default")
    assert (
        first.files == ("src/rpc.c",) and first.read_verified() == (QUEUE_DATA / first.filename).read_bytes()
    )
    assert notes.files == ("docs/howto.txt", "docs/notes.txt", "tests/test.c", "tools/run.sh")
    assert move.author == "nobody <>" and move.files == ("docs/guide/howto.txt", "tools/run.sh")
    assert table.upstream_status.startswith("Submitted") and table.derived == ("Why", "When", "Default")


@pytest.mark.parametrize(
    ("trailer", "message"),
    [
        ("Upstream-Status: sent", "Upstream-Status 'sent' is not one of"),
        ("Patchkit-When: main..", "is not a commit sha"),
        ("Patchkit-Default: maybe", "Default must be yes or no"),
    ],
)
def test_a_mail_states_its_fields_as_trailers_checked_as_headers(
    tmp_path: Path, trailer: str, message: str
) -> None:
    mail = (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: A <a@example.invalid>\nDate: Thu, 6 Nov 2025 10:00:00 +0100\nSubject: [PATCH] s\n\n"
        f"why it is\n\n{trailer}\n---\n" + BODY
    )
    with pytest.raises(PatchError) as exc:
        load_series(make(tmp_path, header=mail, body=""))
    assert message in str(exc.value) and str(exc.value).startswith("patches/0001-fix-thing.patch: ")


def test_a_mail_that_writes_outside_the_tree_is_refused_as_patchkits_form_is(tmp_path: Path) -> None:
    mail = (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: A <a@example.invalid>\nDate: Thu, 6 Nov 2025 10:00:00 +0100\nSubject: [PATCH] s\n\n---\n"
        "diff --git a/../x b/../x\n--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n"
    )
    with pytest.raises(PatchError, match="refused: the path '../x' has an empty, '.' or '..' component"):
        load_series(make(tmp_path, header=mail, body=""))
