"""`git mailinfo` as the oracle for reading a mail (spec.patchdoc): what `git am` makes of a
mail's author, date, title and message is what patchkit reads from it, on the fixture
queue's `git format-patch` mails and on headers written by other mailers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from patchkit.spec.mailfmt import stripspace
from patchkit.spec.patchdoc import commit_of, read_doc
from tests.fixtures.queue import QUEUE_DATA

DIFF = b"---\n x | 1 +\n\ndiff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1,2 @@\n x\n+y\n"
DATE = b"Date: Thu, 6 Nov 2025 10:00:00 +0100\n"


def _mail(head: bytes, body: bytes = b"The message.\n\nSigned-off-by: A <a@x.org>\n") -> bytes:
    return (
        b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        + head
        + b"\n"
        + body
        + DIFF
    )


OTHERS = {
    "quoted-name": _mail(b'From: "Doe, Jane" <j@x.org>\n' + DATE + b"Subject: [PATCH] x: y\n"),
    "escaped-quote": _mail(b'From: "Jane \\"JD\\" Doe" <j@x.org>\n' + DATE + b"Subject: [PATCH] x: y\n"),
    "address-comment": _mail(b"From: jane@x.org (Jane Doe)\n" + DATE + b"Subject: [PATCH] x: y\n"),
    "rfc2047-b": _mail(
        b"From: =?utf-8?b?SsO2cmc=?= <j@x.org>\n" + DATE + b"Subject: =?utf-8?q?=C3=A9t=C3=A9?=\n"
    ),
    "prefixes": _mail(b"From: A <a@x.org>\n" + DATE + b"Subject: Re: [PATCH v2 3/7] [net] foo: bar\n"),
    "blank-runs": _mail(b"From: A <a@x.org>\n" + DATE + b"Subject: [PATCH] foo:  bar \t baz\x0bq\x0c r\n"),
    "folded-subject": _mail(
        b"From: A <a@x.org>\n" + DATE + b"Subject: [PATCH] a long\n title that\n\tgoes on\n"
    ),
    "latin1-body": _mail(
        b"From: A <a@x.org>\n" + DATE + b"Subject: [PATCH] x\nContent-Type: text/plain; charset=ISO-8859-1\n",
        b"caf\xe9 au lait\n",
    ),
    "no-date": _mail(b"From: A <a@x.org>\nSubject: [PATCH] x\n"),
}
CASES = {m.name[:4]: m.read_bytes() for m in sorted(QUEUE_DATA.glob("*.patch"))} | OTHERS


def _mailinfo(tmp_path: Path, mail: bytes) -> tuple[dict[str, str], str]:
    out = subprocess.run(
        ["git", "mailinfo", "-u", str(tmp_path / "msg"), str(tmp_path / "patch")],
        input=mail,
        capture_output=True,
        check=True,
    )
    info = {}
    for line in out.stdout.decode("utf-8").split("\n"):  # not splitlines: \v and \f are text
        key, sep, value = line.partition(": ")
        if sep:
            info[key] = value
    return info, (tmp_path / "msg").read_bytes().decode("utf-8")


@pytest.mark.parametrize("name", list(CASES))
def test_a_mail_reads_as_git_am_reads_it(tmp_path: Path, name: str) -> None:
    mail = CASES[name]
    info, msg = _mailinfo(tmp_path, mail)
    who, date, message = commit_of(mail, "p.patch")
    doc = read_doc(mail, "p.patch")
    assert doc.mail is not None
    assert (who.name, who.email) == (info["Author"], info["Email"])
    assert doc.mail.subject == info["Subject"]
    assert date == info.get("Date")
    # git am's commit message: the title, a blank line, mailinfo's message, cleaned
    assert message == stripspace(info["Subject"] + "\n\n" + msg)
