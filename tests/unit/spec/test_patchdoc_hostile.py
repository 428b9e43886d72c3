"""Mails from strangers (spec.patchdoc, spec.mailfmt): headers built to make a parser slow
(a blank run in From:, a million `[x]` blocks in Subject:) are read in one pass and capped,
a charset Python cannot read text with is a one-line PatchError, and no error quotes a
huge header back. Where old code would take quadratic time, an alarm bounds the test."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from patchkit.core.errors import PatchError
from patchkit.spec.mailfmt import cleanup_subject
from patchkit.spec.patchdoc import MAX_HEADER, read_doc
from tests.fixtures.project import assert_error, invoke
from tests.fixtures.queue import QUEUE_DATA

GUARD = sorted(QUEUE_DATA.glob("*.patch"))[0].read_bytes()
FROM = b"From: =?UTF-8?q?J=C3=B6hannes=20G=C3=A4=C3=9Fler?= <jg@example.invalid>\n"
DIFF = b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
SUBJECT = (
    b"Subject: [PATCH 1/5] =?UTF-8?q?rpc:=20let=20z=C3=ABro-byte=20views=20pass?=\n"
    b" =?UTF-8?q?=20the=20bounds=20check?=\n"
)


@contextmanager
def _alarm(seconds: int) -> Iterator[None]:
    """Fail (rather than hang) when the body takes longer than a generous bound."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"took over {seconds} s: not linear")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _error(data: bytes) -> str:
    with pytest.raises(PatchError) as exc:
        read_doc(data, "patches/0001-x.patch")
    msg = str(exc.value)
    assert msg.startswith("patches/0001-x.patch: ") and "\n" not in msg
    assert len(msg) < 300, msg[:300]  # no header quoted back whole
    return msg


def test_a_from_header_of_blanks_is_capped_not_backtracked() -> None:
    assert GUARD.count(FROM) == 1
    huge = GUARD.replace(FROM, b"From: x" + b" " * (MAX_HEADER + 5_000) + b"y\n")
    with _alarm(60):
        msg = _error(huge)
    assert "the mail's header 'From' is longer than 65,536 characters" in msg
    # under the cap, no address: the same error as a short one, in one pass, quoted short
    blank_run = GUARD.replace(FROM, b"From: x" + b" " * 20_000 + b"y\n")
    with _alarm(60):
        msg = _error(blank_run)
    assert "cannot read the mail's From: header 'x" in msg and "(20,002 characters)" in msg
    # folded lines count as the one header they are
    folded = GUARD.replace(FROM, b"From: a\n" + b" b\n" * (MAX_HEADER // 2) + b" <a@b>\n")
    assert "'From' is longer than" in _error(folded)


def test_a_subject_of_a_million_blocks() -> None:
    many = GUARD.replace(SUBJECT, b"Subject: " + b"[x]" * 2_000_000 + b" title\n")
    with _alarm(60):
        assert "the mail's header 'Subject' is longer than" in _error(many)
    # the clean-up itself is one pass (it used to re-slice the string per block)
    with _alarm(20):
        assert cleanup_subject("[x]" * 300_000 + " Re: [PATCH] title") == "title"
    assert cleanup_subject("Re: re: [PATCH 1/2]: x [y]") == "x [y]"
    assert cleanup_subject("[x") == "[x" and cleanup_subject("Re:") == "Re:"


@pytest.mark.parametrize("charset", ["undefined", "idna", "punycode"])
def test_a_charset_that_cannot_read_text_is_a_one_line_error(charset: str) -> None:
    data = GUARD.replace(b"charset=UTF-8", f"charset={charset}".encode())
    assert data != GUARD
    msg = _error(data)
    assert f"the mail's charset '{charset}' cannot be read as text" in msg


def test_an_unknown_or_binary_codec_charset_still_reads_as_utf8() -> None:
    for charset in (b"x-unknown-charset", b"base64"):
        doc = read_doc(GUARD.replace(b"charset=UTF-8", b"charset=" + charset), "p.patch")
        assert doc.mail is not None and doc.mail.charset == "utf-8"
    doc = read_doc(GUARD.replace(b"charset=UTF-8", b"charset=ISO-8859-1"), "p.patch")
    assert doc.mail is not None and doc.mail.charset == "iso-8859-1"


def test_series_import_of_such_mails_exits_5_in_one_line(project: Path, tmp_path: Path) -> None:
    cases = {
        "0001-charset.patch": GUARD.replace(b"charset=UTF-8", b"charset=undefined"),
        "0001-from.patch": GUARD.replace(FROM, b"From: x" + b" " * 400_000 + b"y\n"),
    }
    before = (project / "patches" / "series").read_bytes()
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with _alarm(60):
            r = invoke(project, "series", "import", str(path), "--replace")
        assert_error(r, 5, f"{path}: the mail's ")
        assert len(r.output) < 600 and "Traceback" not in r.output
        assert (project / "patches" / "series").read_bytes() == before


def test_a_from_line_of_at_signs_after_patchkits_header_is_read_in_one_pass() -> None:
    # after patchkit's header, a mail is told from prose by its From: naming an address;
    # that test was a regex retried at every `@` (30,000 of them: half a minute)
    native = b"Subject: x\nWhy: y\nUpstream-Status: pending\nWhen: ..\n\n"
    prose = native + b"From: " + b"a@" * 30_000 + b" y\nSubject: z\n\nbody\n" + DIFF
    with _alarm(20):
        doc = read_doc(prose, "patches/0001-x.patch")
    assert doc.kind == "patchkit" and doc.mail is None
    mail = native + b"From: A <a@x.org>\nSubject: z\n\nbody\n" + DIFF
    doc = read_doc(mail, "patches/0001-x.patch")
    assert doc.mail is not None and doc.mail.author.email == "a@x.org"
    assert read_doc(native + b"From: a@x.org\nSubject: z\n\nbody\n" + DIFF, "p").mail is not None
    assert read_doc(native + b"From: the report\nSubject: z\n\nbody\n" + DIFF, "p").mail is None
