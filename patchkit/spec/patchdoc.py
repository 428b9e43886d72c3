"""A patch file as a document: patchkit's own form or a mail (``git format-patch``).

patchkit's own form (read and written as before)::

    Subject: ...                      a header block of patchkit's fields
    Why: ...
    Upstream-Status: pending
    When: SHA..

    free text
    diff --git a/x b/x              the diff

A mail, as ``git format-patch`` writes it and ``git am`` takes it::

    From <sha> Mon Sep 17 00:00:00 2001
    From: Name <mail>                 RFC 2047 encoded words, folded lines
    Date: Thu, 6 Jun 2024 23:55:47 -0700
    Subject: [PATCH] the title
    (MIME-Version / Content-Type: text/plain; charset=UTF-8 / Content-Transfer-Encoding: 8bit)

    the message
    Upstream-Status: pending          patchkit's fields as trailers, every one optional
    Patchkit-When: SHA..
    ---
     x | 2 +-                         the diffstat
     1 file changed, ...

    diff --git a/x b/x
    ...
    --                                an optional signature
    2.39.5

In a mail every field of patchkit is optional: ``Why`` is the message's first paragraph
(or the title), ``Upstream-Status`` ``pending``, ``When`` ``..`` (any commit), ``Default``
yes; a field found so is *derived*, and the document says which. The trailer names are
``Upstream-Status`` (the trailer OpenEmbedded uses, with the same values) and
``Patchkit-Why``, ``Patchkit-When``, ``Patchkit-Default``, ``Patchkit-Experimental``,
``Patchkit-Name``; ``git am`` keeps them in the commit message, so the same file serves
both tools. patchkit's fields may also be extra lines of the mail's header block (under
their own names or the trailers'; ``git am`` ignores them there). A file with patchkit's
header block followed by a mail (what a conversion script or an older ``refresh`` made) is
patchkit's form with an author.

A file is kept as bytes: the parts (head, message, diffstat, diff, signature) are slices
of it, and the diff is never decoded and encoded again.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import email.utils
import quopri
import re
from collections.abc import Mapping
from typing import Literal

from patchkit.core.errors import PatchError
from patchkit.spec.diffstat import diffstat, is_stat_line
from patchkit.spec.mailfmt import (
    ZERO_FROM_LINE,
    cleanup_subject,
    decode_words,
    format_from,
    format_subject,
    is_from_line,
    stripspace,
)
from patchkit.spec.patchfile import parse_diff, parse_header

__all__ = [
    "DERIVABLE",
    "TRAILERS",
    "Ident",
    "MailHead",
    "Parts",
    "PatchDoc",
    "PatchFields",
    "add_trailers",
    "commit_of",
    "decode_transfer",
    "derive_fields",
    "read_doc",
    "render_mail",
    "replace_diff",
    "split_mbox",
    "split_parts",
]

# trailer (lower case) -> patchkit's field
TRAILERS = {
    "upstream-status": "Upstream-Status",
    "patchkit-why": "Why",
    "patchkit-when": "When",
    "patchkit-default": "Default",
    "patchkit-experimental": "Experimental",
    "patchkit-name": "Name",
}
_TRAILER_OF = {
    field: ("Upstream-Status" if field == "Upstream-Status" else f"Patchkit-{field}")
    for field in TRAILERS.values()
}
# the fields a mail may leave out, and their value then (Why: from the message)
DERIVABLE = ("Why", "Upstream-Status", "When", "Default")
_DEFAULTS = {"Upstream-Status": "pending", "When": "..", "Default": "yes", "Experimental": "no"}
_TRAILER_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9-]*)\s*:\s*(.*)$")
_RECOGNISED = ("signed-off-by", *TRAILERS)
_INBODY = re.compile(rb"^(From|Date|Subject):", re.IGNORECASE)
_HEADER_NAME = re.compile(rb"^([!-9;-~]+):")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Ident:
    name: str
    email: str

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"


@dataclasses.dataclass(frozen=True, kw_only=True)
class MailHead:
    author: Ident
    date: str | None  # as the mail writes it (unfolded); None: no Date header
    subject: str  # decoded, unfolded, cleaned as git mailinfo does ("" when there is none)
    charset: str  # of the message text
    transfer_encoding: str  # "8bit", "7bit", "quoted-printable", ...
    headers: tuple[tuple[str, str], ...]  # every header, decoded, in order


@dataclasses.dataclass(frozen=True, kw_only=True)
class Parts:
    """The slices of a patch file, in order: ``head + message + stat + diff + tail`` is the
    file. ``head``: patchkit's header block and/or the mail's headers (and in-body
    headers); ``message``: the mail's message or patchkit's free text; ``stat``: the
    ``---`` line and diffstat before the diff (a diffstat block at the end of patchkit's
    free text too); ``diff``: from the first ``diff --git``; ``tail``: a ``-- `` signature."""

    head: bytes
    message: bytes
    stat: bytes
    diff: bytes
    tail: bytes
    native_end: int | None  # bytes of patchkit's header block at the start of head; None: none
    mail_at: int | None  # where in head the mail starts; None: no mail
    header_end: int | None  # where in head the mail's header block ends (after its blank line)

    @property
    def data(self) -> bytes:
        return self.head + self.message + self.stat + self.diff + self.tail


@dataclasses.dataclass(frozen=True, kw_only=True)
class PatchDoc:
    where: str
    parts: Parts
    native: Mapping[str, str] | None  # patchkit's header block (None: a plain mail)
    mail: MailHead | None
    message: str  # the message (mail) or free text (patchkit's form), decoded
    trailers: tuple[tuple[str, str], ...]  # the message's trailer block
    stated: Mapping[str, str]  # patchkit's fields the mail states (trailers, mail headers)

    @property
    def kind(self) -> Literal["patchkit", "mail"]:
        return "patchkit" if self.native is not None else "mail"


@dataclasses.dataclass(frozen=True, kw_only=True)
class PatchFields:
    """patchkit's fields of a document, raw (spec.series checks them); ``derived``: the
    ones a mail did not state."""

    subject: str
    why: str
    upstream_status: str
    when: str
    default: str
    experimental: str
    name: str | None
    derived: tuple[str, ...] = ()

    def get(self, field: str) -> str | None:
        return {
            "Subject": self.subject,
            "Why": self.why,
            "Upstream-Status": self.upstream_status,
            "When": self.when,
            "Default": self.default,
            "Experimental": self.experimental,
            "Name": self.name,
        }[field]


# -- splitting ------------------------------------------------------------------------------


def _lines(data: bytes) -> list[bytes]:
    """Lines with their ``\\n`` (only ``\\n`` ends a line, as for git)."""
    out = data.split(b"\n")
    last = out.pop()
    lines = [ln + b"\n" for ln in out]
    if last:
        lines.append(last)
    return lines


def _blank(line: bytes) -> bool:
    return not line.strip(b" \t\r\n")


def _patchbreak(line: bytes) -> bool:
    """git mailinfo's end of the message: ``diff -``, ``Index: ``, ``--- name``, ``---``."""
    if line.startswith((b"diff -", b"Index: ")):
        return True
    body = line.rstrip(b"\n")
    if len(line) < 4 or not body.startswith(b"---"):
        return False
    if body[3:4] == b" " and body[4:5] and not body[4:5].isspace():
        return True
    return not body[3:].strip(b" \t\r\v\f")


def _header_block(lines: list[bytes], start: int) -> int:
    """The index after a mail header block starting at ``start`` (its blank line excluded)."""
    i = start
    while i < len(lines) and not _blank(lines[i]):
        i += 1
    return i


def _looks_like_mail(lines: list[bytes], start: int) -> bool:
    """A mail starts here: an mbox ``From `` line, or a header block with ``From:`` and a
    ``Date:`` or ``Subject:``. After patchkit's header (``start`` > 0) the ``From:`` must
    also name an address: free text may well begin with "From: ..." prose."""
    if start >= len(lines):
        return False
    if is_from_line(lines[start]):
        return True
    block = lines[start : _header_block(lines, start)]
    names = {m.group(1).lower() for ln in block if (m := _HEADER_NAME.match(ln))}
    if b"from" not in names or not names & {b"date", b"subject"}:
        return False
    if start == 0:
        return True
    sender = next(ln for ln in block if ln[:5].lower() == b"from:")
    return bool(re.search(rb"<[^<>\s]*>\s*$|^from:\s*\S+@\S+\s*$", sender, re.IGNORECASE))


def _native_end(lines: list[bytes]) -> int:
    """Where patchkit's header block ends (parse_header's rule), its blank line included."""
    i = 0
    while i < len(lines):
        text = lines[i].decode("utf-8", "replace")
        if not text.strip() or text.startswith(("diff --git", "---", "From ")):
            break
        key, sep, _ = text.partition(":")
        if not sep or " " in key.strip():
            break
        i += 1
    if i < len(lines) and _blank(lines[i]):
        i += 1
    return i


def _diff_end(lines: list[bytes], start: int) -> int:
    """Where a ``-- `` signature after the diff starts (len(lines) when there is none): the
    first ``-- `` line after the diff's last file header or hunk."""
    parsed = parse_diff(b"".join(lines[start:]))
    end = start + max(
        (max([f.line, *(h.line + len(h.lines) for h in f.hunks)]) for f in parsed.files), default=0
    )
    return next((j for j in range(end, len(lines)) if lines[j].rstrip(b"\n") == b"-- "), len(lines))


def _stat_run(lines: list[bytes], lo: int, hi: int) -> tuple[int, int] | None:
    """The last diffstat block (file lines, the totals line, summary lines) in
    ``lines[lo:hi]``, as (start, end)."""
    found: tuple[int, int] | None = None
    i = lo
    while i < hi:
        kinds: list[str] = []
        j = i
        while j < hi:
            kind = is_stat_line(lines[j].rstrip(b"\n").decode("utf-8", "replace"))
            if kind is None:
                break
            kinds.append(kind)
            j += 1
        if "totals" in kinds:
            found = (i, j)
        i = max(j, i + 1)
    return found


def split_parts(data: bytes) -> Parts:
    """The parts of a patch file (no field is read or checked here)."""
    lines = _lines(data)
    n = len(lines)
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln))

    native_end: int | None = None
    mail_at: int | None = None
    if _looks_like_mail(lines, 0):
        mail_at = 0
    else:
        native_end = _native_end(lines)
        k = native_end
        while k < n and _blank(lines[k]):
            k += 1
        if _looks_like_mail(lines, k):
            mail_at = k

    header_end: int | None = None
    if mail_at is not None:
        k = mail_at + (1 if is_from_line(lines[mail_at]) else 0)
        k = _header_block(lines, k)
        k = min(k + 1, n)  # the blank line
        header_end = k
        if k < n and _INBODY.match(lines[k]):  # in-body From:/Date:/Subject: lines
            k = min(_header_block(lines, k) + 1, n)
        head_end = k
        while k < n and not _patchbreak(lines[k]):
            k += 1
        msg_end = k
    else:
        head_end = native_end or 0
        msg_end = head_end
        while msg_end < n and not lines[msg_end].startswith(b"diff --git "):
            msg_end += 1
    diff_at = msg_end
    while diff_at < n and not lines[diff_at].startswith(b"diff --git "):
        diff_at += 1
    if mail_at is None:
        # a diffstat block at the end of the free text (blank lines after it) is a stat part
        end = msg_end
        while end > head_end and _blank(lines[end - 1]):
            end -= 1
        run = _stat_run(lines, head_end, end)
        if run is not None and run[1] == end:
            start = run[0]
            if start > head_end and lines[start - 1].rstrip(b"\n") == b"---":
                start -= 1
            msg_end = start
    tail_at = _diff_end(lines, diff_at) if diff_at < n else n

    def cut(a: int, b: int) -> bytes:
        return data[offsets[a] : offsets[b]]

    return Parts(
        head=cut(0, head_end),
        message=cut(head_end, msg_end),
        stat=cut(msg_end, diff_at),
        diff=cut(diff_at, tail_at),
        tail=cut(tail_at, n),
        native_end=None if native_end is None else offsets[native_end],
        mail_at=None if mail_at is None else offsets[mail_at],
        header_end=None if header_end is None else offsets[header_end],
    )


def split_mbox(data: bytes, *, mboxrd: bool = False) -> list[bytes]:
    """The mails of an mbox, split where git mailsplit splits (at ``From `` lines that end
    in a date); ``mboxrd``: ``>From `` lines lose one ``>`` (only that format escapes)."""
    mails: list[bytes] = []
    cur: list[bytes] = []
    for ln in _lines(data):
        if is_from_line(ln):
            if any(not _blank(c) for c in cur):
                mails.append(b"".join(cur))
            cur = []  # blank lines before a From line belong to no mail
        elif mboxrd and re.match(rb"^>+From ", ln):
            ln = ln[1:]
        cur.append(ln)
    if any(not _blank(c) for c in cur):
        mails.append(b"".join(cur))
    return mails


# -- reading ----------------------------------------------------------------------------------


MAX_HEADER = 65_536  # characters of one mail header, its folded lines joined


def _excerpt(value: str) -> str:
    """A header value for a message: its start, quoted, and its length when cut."""
    if len(value) <= 60:
        return repr(value)
    return f"{value[:60]!r}… ({len(value):,} characters)"


def _read_headers(block: bytes, where: str) -> list[tuple[str, str]]:
    """(name, value) of a mail header block, continuation lines joined, values raw; a
    header longer than :data:`MAX_HEADER` is a PatchError (no mail git writes has one, and
    what reads it need not be ready for megabytes)."""
    out: list[tuple[str, list[str]]] = []
    size = 0
    for raw in _lines(block):
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line.strip():
            break
        if line[:1] in (" ", "\t") and out:
            out[-1][1].append(line)
            size += len(line)
        else:
            name, sep, value = line.partition(":")
            if not (sep and name and " " not in name):
                continue
            out.append((name.strip(), [value.strip()]))
            size = len(line)
        if size > MAX_HEADER:
            raise PatchError(
                f"{where}: the mail's header {_excerpt(out[-1][0])} is longer than "
                f"{MAX_HEADER:,} characters: no mail git writes has one",
                hint="is this a patch mail? `git format-patch` makes one",
            )
    return [(name, "".join(parts)) for name, parts in out]


def _parse_ident(value: str, where: str) -> Ident:
    try:
        text = decode_words(value).strip()
    except ValueError as e:
        raise PatchError(f"{where}: cannot read the mail's From: header {_excerpt(value)} ({e})") from None
    name = mail = ""
    found = False
    # `Name <address>`: the address is in the last <...> at the end (no regex: a blank run
    # between name and address must not cost its length squared)
    if text.endswith(">"):
        lt = text.rfind("<", 0, len(text) - 1)
        if lt >= 0 and ">" not in text[lt + 1 : -1]:
            name, mail, found = text[:lt].strip(), text[lt + 1 : -1].strip(), True
    if not found and re.match(r"^[^\s<>@]+@[^\s<>@]+(\s*\(.*\))?$", text):
        mail, _, rest = text.partition(" ")
        name = rest.strip().strip("()").strip() or mail
        found = True
    if not found:
        raise PatchError(
            f"{where}: cannot read the mail's From: header {_excerpt(value)}",
            hint="it must be `Name <address>` (an empty address `<>` is allowed)",
        )
    if len(name) >= 2 and name[0] == name[-1] == '"':
        name = re.sub(r"\\(.)", r"\1", name[1:-1])
    if not name:
        name = mail
    if not name:
        raise PatchError(
            f"{where}: the mail's From: header {_excerpt(value)} names no one", hint="git am needs a name"
        )
    if any(c in name + mail for c in "<>\n\0"):
        raise PatchError(f"{where}: cannot read the mail's From: header {_excerpt(value)}")
    return Ident(name=name, email=mail)


_EVERY_BYTE = bytes(range(256))


def _charset(name: str, where: str) -> str:
    """The charset a mail's text is read and written in: ``name`` when Python decodes and
    encodes text with it; an unknown name (or a codec that is no charset, such as base64)
    reads as UTF-8; a codec that cannot read text with U+FFFD for what it cannot decode
    (``undefined``, ``idna``, ``punycode``) is a PatchError."""
    try:
        "".encode(name)
    except LookupError:
        return "utf-8"
    except (UnicodeError, ValueError) as e:
        raise PatchError(
            f"{where}: the mail's charset {_excerpt(name)} cannot be read as text ({e})",
            hint="declare the charset the mail is written in (`Content-Type: text/plain; charset=UTF-8`)",
        ) from None
    try:
        _EVERY_BYTE.decode(name, "replace")
    except (LookupError, UnicodeError, ValueError) as e:
        raise PatchError(
            f"{where}: the mail's charset {_excerpt(name)} cannot be read as text ({e})",
            hint="declare the charset the mail is written in (`Content-Type: text/plain; charset=UTF-8`)",
        ) from None
    return name


def _mail_head(head: bytes, where: str) -> MailHead:
    lines = _lines(head)
    start = 1 if lines and is_from_line(lines[0]) else 0
    headers = _read_headers(b"".join(lines[start:]), where)
    body_at = _header_block(lines, start) + 1
    inbody = _read_headers(b"".join(lines[body_at:]), where) if body_at < len(lines) else []

    def last(name: str, *sources: list[tuple[str, str]]) -> str | None:
        found = None
        for src in sources:
            for k, v in src:
                if k.lower() == name:
                    found = v
        return found

    sender = last("from", headers, inbody)
    if sender is None:
        raise PatchError(
            f"{where}: a mail without a From: header: git am would stop (empty ident)",
            hint="add `From: Name <address>` to its header",
        )
    author = _parse_ident(sender, where)
    date = last("date", headers, inbody)
    if date is not None:
        try:
            email.utils.parsedate_to_datetime(date)
        except (TypeError, ValueError, IndexError):
            raise PatchError(
                f"{where}: cannot read the mail's Date: header {_excerpt(date)}",
                hint="it must be an RFC 2822 date, e.g. `Thu, 6 Jun 2024 23:55:47 -0700`",
            ) from None
    subject_raw = last("subject", headers, inbody) or ""
    try:
        subject = cleanup_subject(decode_words(subject_raw))
    except ValueError:
        subject = cleanup_subject(subject_raw)
    ctype = (last("content-type", headers) or "text/plain").strip()
    if ctype.lower().startswith("multipart/"):
        raise PatchError(
            f"{where}: a multipart mail (an attachment?): patchkit reads plain-text patches",
            hint="save the patch itself, or make it with `git format-patch` (no --attach)",
        )
    m = re.search(r'charset\s*=\s*"?([^";\s]+)', ctype, re.IGNORECASE)
    charset = _charset(m.group(1).lower() if m else "utf-8", where)
    cte = (last("content-transfer-encoding", headers) or "8bit").strip().lower()
    decoded: list[tuple[str, str]] = []
    for k, v in headers:
        try:
            decoded.append((k, decode_words(v)))
        except ValueError:
            decoded.append((k, v))
    return MailHead(
        author=author,
        date=date,
        subject=subject,
        charset=charset,
        transfer_encoding=cte,
        headers=tuple(decoded),
    )


def _trailer_block(lines: list[str]) -> tuple[int, int] | None:
    """The last paragraph of a message, as (start, end) line indexes, when git would read
    it as trailers: every line a trailer (``Token: value``, or its indented continuation),
    or one git knows (Signed-off-by, patchkit's) and at least a quarter trailers."""
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    start = end
    while start and lines[start - 1].strip():
        start -= 1
    if start == end:
        return None
    trailers = others = 0
    recognised = False
    for ln in lines[start:end]:
        if ln[:1] in (" ", "\t") and (trailers or others):
            continue
        if ln.startswith("(cherry picked from commit "):
            trailers += 1
            recognised = True
            continue
        m = _TRAILER_LINE.match(ln)
        if m:
            trailers += 1
            recognised = recognised or m.group(1).lower() in _RECOGNISED
        else:
            others += 1
    if trailers and (not others or (recognised and trailers * 3 >= others)):
        return start, end
    return None


def _trailers(lines: list[str]) -> tuple[tuple[str, str], ...]:
    block = _trailer_block(lines)
    if block is None:
        return ()
    out: list[tuple[str, str]] = []
    for ln in lines[block[0] : block[1]]:
        if ln[:1] in (" ", "\t") and out:
            out[-1] = (out[-1][0], f"{out[-1][1]} {ln.strip()}".strip())
            continue
        m = _TRAILER_LINE.match(ln)
        if m:
            out.append((m.group(1), m.group(2).strip()))
    return tuple(out)


_BARE = {"why": "Why", "when": "When", "default": "Default", "experimental": "Experimental", "name": "Name"}


def _stated(
    pairs: tuple[tuple[str, str], ...] | list[tuple[str, str]], *, bare: bool = False
) -> dict[str, str]:
    """patchkit's fields among ``(key, value)`` pairs: trailer names, and with ``bare``
    (a mail's own header block) patchkit's header names too (``When:``, ``Why:``)."""
    found: dict[str, str] = {}
    for key, value in pairs:
        field = TRAILERS.get(key.lower()) or (_BARE.get(key.lower()) if bare else None)
        if field is not None:
            found[field] = value
    return found


def read_doc(data: bytes, where: str) -> PatchDoc:
    """The document in a patch file: its parts, patchkit's header block (if any), the
    mail's author, date and title (if a mail), the message and its trailers.

    A mail whose From: or Date: cannot be read, or that git apply could not read as it is
    (quoted-printable, base64, multipart), is a PatchError naming ``where``."""
    parts = split_parts(data)
    native: dict[str, str] | None = None
    if parts.native_end is not None:
        native = parse_header(parts.head[: parts.native_end].decode("utf-8", "replace"), where)
    mail: MailHead | None = None
    charset = "utf-8"
    if parts.mail_at is not None:
        mail = _mail_head(parts.head[parts.mail_at :], where)
        charset = mail.charset
        if mail.transfer_encoding not in ("7bit", "8bit", "binary"):
            raise PatchError(
                f"{where}: the mail's body is {mail.transfer_encoding}: git apply cannot read the diff in it",
                hint="`patchkit series import` decodes it into a plain format-patch file",
            )
    message = parts.message.decode(charset, "replace")
    lines = message.split("\n")
    trailers = _trailers(lines) if mail is not None else ()
    stated: dict[str, str] = {}
    if mail is not None and native is None:
        stated = _stated(list(mail.headers), bare=True) | _stated(trailers)
    return PatchDoc(
        where=where,
        parts=parts,
        native=native,
        mail=mail,
        message=message,
        trailers=trailers,
        stated=stated,
    )


def _why_from(message: str, subject: str) -> str:
    """The message's first paragraph (trailers left out), on one line; else the title."""
    lines = message.split("\n")
    block = _trailer_block(lines)
    if block is not None:
        lines = lines[: block[0]]
    para: list[str] = []
    for ln in lines:
        if ln.strip():
            para.append(ln.strip())
        elif para:
            break
    return " ".join(para) or subject


def derive_fields(doc: PatchDoc, name_from_file: str) -> PatchFields:
    """patchkit's fields of a document. patchkit's form: its header block as written
    (spec.series says what is missing). A mail: what it states, the rest derived."""
    if doc.native is not None:
        h = doc.native
        return PatchFields(
            subject=h.get("Subject", ""),
            why=h.get("Why", ""),
            upstream_status=h.get("Upstream-Status", ""),
            when=h.get("When", ""),
            default=h.get("Default", "yes"),
            experimental=h.get("Experimental", "no"),
            name=h.get("Name") or None,
        )
    assert doc.mail is not None
    stated = doc.stated
    subject = doc.mail.subject or name_from_file
    derived = [k for k in DERIVABLE if k not in stated]
    if not doc.mail.subject:
        derived.insert(0, "Subject")
    return PatchFields(
        subject=subject,
        why=stated.get("Why") or _why_from(doc.message, subject),
        upstream_status=stated.get("Upstream-Status", _DEFAULTS["Upstream-Status"]),
        when=stated.get("When", _DEFAULTS["When"]),
        default=stated.get("Default", _DEFAULTS["Default"]),
        experimental=stated.get("Experimental", _DEFAULTS["Experimental"]),
        name=stated.get("Name") or None,
        derived=tuple(derived),
    )


# -- writing ----------------------------------------------------------------------------------


def _restat(stat: bytes, diff: bytes, *, keep: bool, add: bool) -> bytes:
    """``stat`` with its diffstat block made from ``diff`` (``keep``) or removed; ``add``:
    write one after the ``---`` line when there was none."""
    lines = _lines(stat)
    fresh = diffstat(diff.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
    run = _stat_run(lines, 0, len(lines))
    if run is not None:
        a, b = run
        if keep:
            return b"".join(lines[:a]) + fresh + b"".join(lines[b:])
        if b < len(lines) and _blank(lines[b]):
            b += 1
        return b"".join(lines[:a]) + b"".join(lines[b:])
    if add and keep and fresh:
        if lines and _patchbreak(lines[0]) and lines[0].rstrip(b"\n") == b"---":
            return lines[0] + fresh + b"\n" + b"".join(lines[1:])
        return b"---\n" + fresh + b"\n" + stat
    return stat


def replace_diff(old: bytes, new_diff: bytes, *, with_diffstat: bool = True) -> bytes:
    """A patch file with its diff replaced: the header, mail headers, message and trailers
    (or patchkit's header and free text) and a signature stay byte for byte; a diffstat is
    made again from the new diff (``with_diffstat``) or dropped, never left stale."""
    parts = split_parts(old)
    stat = _restat(parts.stat, new_diff, keep=with_diffstat, add=False)
    return parts.head + parts.message + stat + new_diff + parts.tail


def decode_transfer(data: bytes, where: str) -> bytes:
    """A mail whose body is quoted-printable or base64, as the same mail in 8 bits (what
    git am reads from it); anything else as it is."""
    parts = split_parts(data)
    if parts.mail_at is None or parts.header_end is None:
        return data
    head = parts.head[: parts.header_end]
    cte = ""
    for k, v in _read_headers(head[parts.mail_at :], where):
        if k.lower() == "content-transfer-encoding":
            cte = v.strip().lower()
    body = data[parts.header_end :]
    if cte == "quoted-printable":
        decoded = quopri.decodestring(body)
    elif cte == "base64":
        try:
            decoded = base64.b64decode(body)
        except (binascii.Error, ValueError) as e:
            raise PatchError(f"{where}: the mail's base64 body cannot be read ({e})") from None
    else:
        return data
    new_head = re.sub(
        rb"(?im)^content-transfer-encoding:[^\n]*(\n[ \t][^\n]*)*\n",
        b"Content-Transfer-Encoding: 8bit\n",
        head[parts.mail_at :],
        count=1,
    )
    return head[: parts.mail_at] + new_head + decoded


def _encode_text(text: str, charset: str, where: str) -> bytes:
    try:
        return text.encode(charset)
    except (UnicodeError, ValueError):
        raise PatchError(
            f"{where}: {text[:60]!r} cannot be written in the mail's charset {charset}"
        ) from None


def _with_utf8_headers(head: bytes) -> bytes:
    """A mail head that declares UTF-8 text (format-patch's three MIME lines), added
    before its blank line when it declares nothing."""
    if re.search(rb"(?im)^content-type:", head):
        return head
    lines = _lines(head)
    start = 1 if lines and is_from_line(lines[0]) else 0
    end = _header_block(lines, start)
    mime = b"MIME-Version: 1.0\nContent-Type: text/plain; charset=UTF-8\nContent-Transfer-Encoding: 8bit\n"
    return b"".join(lines[:end]) + mime + b"".join(lines[end:])


def _head_for(head: bytes, charset: str, add: list[tuple[str, str]]) -> tuple[bytes, str]:
    """The head and charset to write ``add`` in: a head that declares no charset gets
    format-patch's UTF-8 lines when a value is not ASCII."""
    if all(v.isascii() for _, v in add) or re.search(rb"(?im)^content-type:", head):
        return head, charset
    return _with_utf8_headers(head), "utf-8"


def _append_trailers(message: bytes, add: list[tuple[str, str]], charset: str, where: str) -> bytes:
    """The message with trailer lines added to its trailer block (or a new one)."""
    if not add:
        return message
    text_lines = message.decode(charset, "replace").split("\n")
    new = b"".join(_encode_text(f"{k}: {v}\n", charset, where) for k, v in add)
    body = message.rstrip(b"\n")
    trimmed = message.decode(charset, "replace").rstrip("\n").split("\n")
    if not body.strip():
        return new
    block = _trailer_block(text_lines)
    if block is not None and block[1] == len(trimmed):
        return body + b"\n" + new
    return body + b"\n\n" + new


def add_trailers(data: bytes, fields: Mapping[str, str], where: str) -> bytes:
    """A mail with patchkit's ``fields`` (Why, When, ...) added as trailers of its
    message (after the ones it has); the rest of the file stays as it is."""
    doc = read_doc(data, where)
    if doc.mail is None:
        raise PatchError(f"{where}: not a mail: patchkit's fields go in its header block")
    add = [(_TRAILER_OF[k], v) for k, v in fields.items()]
    head, charset = _head_for(doc.parts.head, doc.mail.charset, add)
    message = _append_trailers(doc.parts.message, add, charset, where)
    if not message.endswith(b"\n"):
        message += b"\n"
    return head + message + doc.parts.stat + doc.parts.diff + doc.parts.tail


def _escape_breaks(text: str) -> str:
    """Message lines git am would take for the start of the diff, indented by one space."""
    return "\n".join(
        " " + ln if _patchbreak((ln + "\n").encode("utf-8", "replace")) else ln for ln in text.split("\n")
    )


def _same(field: str, a: str, b: str) -> bool:
    if field in ("Default", "Experimental"):
        truth = {"yes": "1", "true": "1", "on": "1", "1": "1", "no": "0", "false": "0", "off": "0", "0": "0"}
        return truth.get(a.strip().lower(), a) == truth.get(b.strip().lower(), b)
    return a.strip() == b.strip()


def _wanted_trailers(fields: PatchFields, message: str, name_from_file: str) -> list[tuple[str, str]]:
    """patchkit's fields a rendered mail must state as trailers: the ones that reading it
    again would not derive to the same value and that its message does not state yet."""
    derived = {
        "Why": _why_from(message, fields.subject),
        **_DEFAULTS,
        "Name": name_from_file,
    }
    have = _stated(_trailers(message.split("\n")))
    out: list[tuple[str, str]] = []
    for field in ("Why", "Upstream-Status", "When", "Default", "Experimental", "Name"):
        value = fields.get(field) if field != "Name" else (fields.name or name_from_file)
        if value is None or field in have or _same(field, value, derived[field]):
            continue
        out.append((_TRAILER_OF[field], value))
    return out


def _replace_subject(head: bytes, subject: str) -> bytes:
    lines = _lines(head)
    out: list[bytes] = []
    skipping = False
    done = False
    for ln in lines:
        if skipping and ln[:1] in (b" ", b"\t"):
            continue
        skipping = False
        if not done and ln.lower().startswith(b"subject:"):
            out.append(format_subject(subject).encode("utf-8"))
            skipping = done = True
            continue
        out.append(ln)
    return b"".join(out)


def render_mail(
    doc: PatchDoc,
    fields: PatchFields,
    *,
    name_from_file: str,
    author: Ident | None,
    with_diffstat: bool = True,
) -> bytes:
    """The document as a mail ``git am`` takes, with patchkit's fields as trailers where
    reading it again would not give them. A mail keeps its headers, message and diff as
    they are; patchkit's form gets a head (``author``, the subject) and a message made of
    Why and its free text. The diffstat is made from the diff (or left out)."""
    parts = doc.parts
    if doc.mail is not None:
        assert parts.mail_at is not None
        head = parts.head[parts.mail_at :]
        if not is_from_line(_lines(head)[0]):
            head = ZERO_FROM_LINE.encode() + head
        if fields.subject != doc.mail.subject:
            head = _replace_subject(head, fields.subject)
        add = _wanted_trailers(fields, doc.message, name_from_file)
        head, charset = _head_for(head, doc.mail.charset, add)
        body = _append_trailers(parts.message, add, charset, doc.where)
        if body and not body.endswith(b"\n"):
            body += b"\n"
        stat = _restat(parts.stat, parts.diff, keep=with_diffstat, add=True)
        if not stat.strip():
            stat = b"---\n"
        return head + body + stat + parts.diff + parts.tail
    if author is None:
        raise PatchError(f"{doc.where}: patchkit's form names no author: give one (--author)")
    free = doc.message.strip("\n")
    text = fields.why + ("\n\n" + free if free.strip() else "") + "\n"
    text = _escape_breaks(text.rstrip("\n")) + "\n"
    add = _wanted_trailers(fields, text, name_from_file)
    if add:
        text += "\n" + "".join(f"{k}: {v}\n" for k, v in add)
    top = ZERO_FROM_LINE + format_from(author.name, author.email) + format_subject(fields.subject)
    if not (fields.subject + text).isascii():
        top += "MIME-Version: 1.0\nContent-Type: text/plain; charset=UTF-8\nContent-Transfer-Encoding: 8bit\n"
    stat = diffstat(parts.diff.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
    sep = b"---\n" + (stat + b"\n" if with_diffstat and stat else b"")
    return (top + "\n" + text).encode("utf-8") + sep + parts.diff


def commit_of(mail: bytes, where: str) -> tuple[Ident, str | None, str]:
    """What ``git am`` makes of a mail: its author, date and commit message."""
    doc = read_doc(mail, where)
    if doc.mail is None:
        raise PatchError(f"{where}: not a mail")
    message = stripspace(doc.mail.subject + "\n\n" + doc.message)
    return doc.mail.author, doc.mail.date, message
