"""Patch files as documents (spec.patchdoc): patchkit's form and mails, their parts, the
fields a mail states or leaves to be derived, and the files written from them
(replace_diff, add_trailers, render_mail). The mails are `git format-patch` output of
the synthetic queue (tests/fixtures/data/queue/)."""

from __future__ import annotations

import base64
import dataclasses
import quopri
from pathlib import Path

import pytest

from patchkit.core.errors import PatchError
from patchkit.spec.patchdoc import (
    Ident,
    add_trailers,
    commit_of,
    decode_transfer,
    derive_fields,
    read_doc,
    render_mail,
    replace_diff,
    split_mbox,
    split_parts,
)
from tests.fixtures.queue import QUEUE_DATA

MAILS = sorted(QUEUE_DATA.glob("*.patch"))
GUARD, NOTES, MOVE, TABLE, TABLE2 = (m.read_bytes() for m in MAILS)

NATIVE = b"""\
Subject: rpc: let zero-byte tensors pass the bounds check
Why: zero-element views carry a data pointer past the slice end
Upstream-Status: pending
When: 0123456..
Default: yes
Experimental: no

Details, in a paragraph
that goes on.
---
a line git am would take for the end of the message
diff --git a/src/x.c b/src/x.c
--- a/src/x.c
+++ b/src/x.c
@@ -1 +1 @@
-old
+new
"""


def doc(data: bytes, where: str = "patches/p.patch"):  # type: ignore[no-untyped-def]
    return read_doc(data, where)


@pytest.mark.parametrize("mail", MAILS, ids=[m.name[:4] for m in MAILS])
def test_a_mail_is_read_in_parts_and_written_back_byte_for_byte(mail: Path) -> None:
    data = mail.read_bytes()
    parts = split_parts(data)
    assert parts.head + parts.message + parts.stat + parts.diff + parts.tail == data
    assert parts.head.startswith(b"From 0000") and parts.diff.startswith(b"diff --git ")
    assert parts.stat.startswith(b"---\n") and parts.tail == b""  # --no-signature
    d = doc(data)
    assert d.kind == "mail" and d.native is None and d.mail is not None
    fields = derive_fields(d, "name-from-file")
    # the diffstat is fresh and nothing needs stating: the same bytes
    assert render_mail(d, fields, name_from_file="name-from-file", author=None) == data
    assert replace_diff(data, parts.diff) == data


def test_a_mail_keeps_author_date_and_title_and_derives_the_rest() -> None:
    d = doc(GUARD)
    assert d.mail is not None
    assert d.mail.author == Ident(name="Jöhannes Gäßler", email="jg@example.invalid")
    assert d.mail.date == "Thu, 6 Nov 2025 10:00:00 +0100"
    assert d.mail.subject == "rpc: let zëro-byte views pass the bounds check"  # [PATCH 1/5] gone
    assert d.trailers == (("Signed-off-by", "Jöhannes Gäßler <jg@example.invalid>"),)
    f = derive_fields(d, "rpc-let-z-ro-byte-views-pass-the-bounds-check")
    assert (
        f.why
        == "Zero-element views carry a data pointer past the slice end; the server must not abort on them."
    )
    assert (f.upstream_status, f.when, f.default, f.experimental, f.name) == (
        "pending",
        "..",
        "yes",
        "no",
        None,
    )
    assert f.derived == ("Why", "Upstream-Status", "When", "Default")
    # a title alone: Why is the title; a trailer states Upstream-Status
    f = derive_fields(doc(TABLE), "data-a-binary-table")
    assert f.why == "data: a binary table"
    assert f.upstream_status == "Submitted [https://example.invalid/pull/7]"
    assert f.derived == ("Why", "When", "Default")
    assert doc(MOVE).mail.author == Ident(name="nobody", email="")  # type: ignore[union-attr]


def test_patchkit_fields_as_trailers_or_mail_headers() -> None:
    data = add_trailers(
        NOTES, {"When": "0123456..", "Default": "no", "Why": "a reason", "Name": "notes"}, "p.patch"
    )
    f = derive_fields(doc(data), "x")
    assert (f.when, f.default, f.why, f.name) == ("0123456..", "no", "a reason", "notes")
    assert f.derived == ("Upstream-Status",)
    # as extra mail headers (git am drops those, patchkit reads them)
    hdr = GUARD.replace(b"MIME-Version", b"Patchkit-When: abcdef0..\nMIME-Version", 1)
    assert derive_fields(doc(hdr), "x").when == "abcdef0.."
    # patchkit's own header lines in the mail's header block: an extra header block
    block = b"Why: a reason\nUpstream-Status: submitted x\nWhen: abcdef0..\nDefault: no\nExperimental: yes\n"
    f = derive_fields(doc(GUARD.replace(b"MIME-Version", block + b"MIME-Version", 1)), "x")
    assert (f.why, f.upstream_status, f.when, f.default, f.experimental) == (
        "a reason",
        "submitted x",
        "abcdef0..",
        "no",
        "yes",
    )
    assert f.derived == ()
    # in the message only the trailer names count (a "When:" line there is prose)
    f = derive_fields(doc(NOTES.replace(b"a date).\n", b"a date).\n\nWhen: never\n", 1)), "x")
    assert f.when == ".." and "When" in f.derived


def test_trailers_are_added_where_git_interpret_trailers_would() -> None:
    # after an existing trailer block
    out = add_trailers(GUARD, {"When": "0123456.."}, "p.patch")
    assert (
        b"Signed-off-by: J\xc3\xb6hannes G\xc3\xa4\xc3\x9fler <jg@example.invalid>\nPatchkit-When: 0123456..\n---\n"
        in out
    )
    assert out.replace(b"Patchkit-When: 0123456..\n", b"") == GUARD
    # a message without trailers gets a paragraph of its own
    out = add_trailers(NOTES, {"Upstream-Status": "backport 5acd455460f4"}, "p.patch")
    assert b"a date).\n\nUpstream-Status: backport 5acd455460f4\n---\n" in out
    # a title alone: the trailers are the message; a non-ASCII value declares UTF-8
    out = add_trailers(MOVE, {"Why": "für alle"}, "p.patch")
    assert b"Content-Type: text/plain; charset=UTF-8\n" in out
    assert b"executable\nMIME-Version: 1.0\n" in out
    assert b"\n\nPatchkit-Why: f\xc3\xbcr alle\n---\n" in out
    assert derive_fields(doc(out), "x").why == "für alle"
    with pytest.raises(PatchError, match="not a mail"):
        add_trailers(NATIVE, {"When": ".."}, "p.patch")


def test_patchkits_form_with_a_mail_after_its_header() -> None:
    # what a conversion script (or refresh, before) made: the header first, then the mail
    data = NATIVE.split(b"\n\n", 1)[0] + b"\n\n" + GUARD
    d = doc(data)
    assert d.kind == "patchkit" and d.native is not None and d.mail is not None
    assert d.mail.author.name == "Jöhannes Gäßler"
    f = derive_fields(d, "x")
    assert f.subject == "rpc: let zero-byte tensors pass the bounds check" and f.derived == ()
    # as a mail: the mail's head first (git am finds the author), patchkit's title, its
    # fields as trailers
    out = render_mail(d, f, name_from_file="x", author=None)
    assert out.startswith(b"From 0000000000000000000000000000000000000000 Mon Sep 17")
    assert b"Subject: [PATCH] rpc: let zero-byte tensors pass the bounds check\nMIME-Version" in out
    assert (
        b"\nPatchkit-Why: zero-element views carry a data pointer past the slice end\nPatchkit-When: 0123456..\n---\n"
        in out
    )
    again = derive_fields(doc(out), "x")
    for field in ("subject", "why", "upstream_status", "when", "default", "experimental"):
        assert getattr(again, field) == getattr(f, field)


def test_free_text_that_begins_like_a_header_is_free_text() -> None:
    prose = NATIVE.replace(b"Details, in a paragraph\n", b"From: the bug report\nSubject: the crash\n", 1)
    d = doc(prose)
    assert d.kind == "patchkit" and d.mail is None and d.message.startswith("From: the bug report\n")


def test_patchkits_form_rendered_as_a_mail() -> None:
    d = doc(NATIVE)
    f = derive_fields(d, "zero-nbytes")
    out = render_mail(
        d, f, name_from_file="zero-nbytes", author=Ident(name="Ann Ö", email="ann@example.invalid")
    )
    assert out.decode() == (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: =?UTF-8?q?Ann=20=C3=96?= <ann@example.invalid>\n"
        "Subject: [PATCH] rpc: let zero-byte tensors pass the bounds check\n"
        "\n"
        "zero-element views carry a data pointer past the slice end\n"
        "\n"
        "Details, in a paragraph\n"
        "that goes on.\n"
        " ---\n"  # indented: git am would end the message there
        "a line git am would take for the end of the message\n"
        "\n"
        "Patchkit-When: 0123456..\n"  # Upstream-Status pending, Default yes: derived again
        "---\n"
        " src/x.c | 2 +-\n"
        " 1 file changed, 1 insertion(+), 1 deletion(-)\n"
        "\n"
        "diff --git a/src/x.c b/src/x.c\n--- a/src/x.c\n+++ b/src/x.c\n@@ -1 +1 @@\n-old\n+new\n"
    )
    again = derive_fields(doc(out), "zero-nbytes")
    assert (again.subject, again.why, again.upstream_status, again.when) == (
        f.subject,
        f.why,
        "pending",
        "0123456..",
    )
    author, date, message = commit_of(out, "p.patch")
    assert author.name == "Ann Ö" and date is None
    assert message.startswith("rpc: let zero-byte tensors pass the bounds check\n\nzero-element views")
    assert message.endswith("\n\nPatchkit-When: 0123456..\n")
    # no diffstat asked; a name the file name would not give back is stated
    out = render_mail(
        d,
        dataclasses.replace(f, name="other", experimental="yes"),
        name_from_file="zero-nbytes",
        author=Ident(name="A", email="a@b"),
        with_diffstat=False,
    )
    assert b"Patchkit-Experimental: yes\nPatchkit-Name: other\n---\ndiff --git" in out
    with pytest.raises(PatchError, match="names no author"):
        render_mail(d, f, name_from_file="x", author=None)


def test_replace_diff_keeps_everything_but_the_diff_and_never_a_stale_diffstat() -> None:
    new_diff = (
        b"diff --git a/src/rpc.c b/src/rpc.c\n--- a/src/rpc.c\n+++ b/src/rpc.c\n@@ -1 +1,2 @@\n x\n+y\n"
    )
    signed = GUARD + b"-- \n2.39.5\n\n"
    out = replace_diff(signed, new_diff)
    head = GUARD[: GUARD.index(b"---\n")]
    assert (
        out
        == head
        + b"---\n src/rpc.c | 1 +\n 1 file changed, 1 insertion(+)\n\n"
        + new_diff
        + b"-- \n2.39.5\n\n"
    )
    assert (
        replace_diff(signed, new_diff, with_diffstat=False) == head + b"---\n" + new_diff + b"-- \n2.39.5\n\n"
    )
    # patchkit's form: header and free text as they are
    native = replace_diff(NATIVE, new_diff)
    assert native == NATIVE[: NATIVE.index(b"diff --git")] + new_diff
    # patchkit's header before a mail (what refresh used to leave stale)
    hybrid = NATIVE.split(b"\n\n", 1)[0] + b"\n\n" + GUARD
    out = replace_diff(hybrid, new_diff)
    assert b" src/rpc.c | 1 +\n" in out and b"3 insertions" not in out and out.endswith(new_diff)
    # a diffstat at the end of patchkit's free text is one too
    stale = NATIVE.replace(
        b"diff --git",
        b"---\n src/x.c | 9 +++++----\n 1 file changed, 5 insertions(+), 4 deletions(-)\n\ndiff --git",
        1,
    )
    out = replace_diff(stale, new_diff)
    assert b" src/rpc.c | 1 +\n 1 file changed, 1 insertion(+)\n\ndiff --git" in out and b"9 +++" not in out


def test_the_signature_is_found_after_the_last_hunk_only() -> None:
    # "-- " inside a hunk is a removed line "- "; after the hunk it is the signature
    data = GUARD.replace(b"+    if (nbytes == 0) {\n", b"-- \n+    if (nbytes == 0) {\n", 1).replace(
        b"@@ -1,6 +1,9 @@", b"@@ -1,7 +1,9 @@"
    )
    parts = split_parts(data + b"-- \n2.39.5\n\n")
    assert parts.tail == b"-- \n2.39.5\n\n" and b"-- \n+    if" in parts.diff


def test_unreadable_mails_are_one_line_errors_naming_the_file() -> None:
    cases = [
        (
            GUARD.replace(b"From: =?UTF-8?q?J=C3=B6hannes=20G=C3=A4=C3=9Fler?= <jg@example.invalid>\n", b""),
            "without a From: header",
        ),
        (
            GUARD.replace(b"<jg@example.invalid>\nDate", b"jg at example\nDate", 1),
            "cannot read the mail's From: header",
        ),
        (
            GUARD.replace(b"Date: Thu, 6 Nov 2025 10:00:00 +0100", b"Date: yesterday"),
            "cannot read the mail's Date: header",
        ),
        (
            GUARD.replace(b"Content-Transfer-Encoding: 8bit", b"Content-Transfer-Encoding: quoted-printable"),
            "quoted-printable: git apply cannot read",
        ),
        (
            GUARD.replace(
                b"Content-Type: text/plain; charset=UTF-8", b'Content-Type: multipart/mixed; boundary="x"'
            ),
            "a multipart mail",
        ),
    ]
    for data, message in cases:
        with pytest.raises(PatchError) as exc:
            read_doc(data, "patches/0001-x.patch")
        assert str(exc.value).startswith("patches/0001-x.patch: ") and message in str(exc.value)
        assert "\n" not in str(exc.value)


def test_mbox_split_and_transfer_decoding() -> None:
    mbox = b"\n\n" + GUARD + NOTES + MOVE
    assert split_mbox(mbox) == [GUARD, NOTES, MOVE]  # "From here on ..." is no separator
    escaped = NOTES.replace(b"From here on", b">From here on")
    assert split_mbox(escaped, mboxrd=True) == [NOTES]
    assert split_mbox(escaped) == [escaped]  # only mboxrd escapes
    assert split_mbox(b"\n \n") == []
    head, body = GUARD.split(b"\n\n", 1)
    for cte, encoded in (
        ("quoted-printable", quopri.encodestring(body)),
        ("base64", base64.encodebytes(body)),
    ):
        mail = head.replace(b"8bit", cte.encode()) + b"\n\n" + encoded
        assert encoded != body and decode_transfer(mail, "p.patch") == GUARD
    assert decode_transfer(GUARD, "p.patch") == GUARD
    assert decode_transfer(NATIVE, "p.patch") == NATIVE


def test_a_mail_whose_diff_is_a_traditional_one_is_split_there() -> None:
    """A mail (conda's patch folders) whose diff has no ``diff --git`` line: the diff starts
    at its ``---``/``+++``/``@@`` lines, after the ``---`` patchbreak; the message is kept."""
    data = (
        b"From 3ea0eac09703ea067e29c7460afd72c063a6b19f Mon Sep 17 00:00:00 2001\n"
        b"From: A U Thor <a@example.org>\nDate: Sun, 20 Jul 2025 14:37:44 -0400\n"
        b"Subject: [PATCH] fix the models path\n\nUse the script's folder.\n\n---\n"
        b"--- a/convert.py\n+++ b/convert.py\n@@ -1 +1 @@\n-old\n+new\n"
    )
    parts = split_parts(data)
    assert parts.head + parts.message + parts.stat + parts.diff + parts.tail == data
    assert parts.stat == b"---\n" and parts.diff.startswith(b"--- a/convert.py\n")
    assert b"Use the script's folder." in parts.message
    d = doc(data)
    assert d.kind == "mail" and d.mail is not None
    plain = b"Raise the tolerance\n\n--- a/t.cpp\n+++ b/t.cpp\n@@ -1 +1 @@\n-1e-7\n+1e-6\n"
    assert split_parts(plain).diff.startswith(b"--- a/t.cpp")
