"""Reading a patch file as a document (:func:`read_doc`): patchkit's header block, or a
mail's author, date, title, charset and trailers; patchkit's fields stated or derived
(:func:`derive_fields`); what ``git am`` makes of a mail (:func:`commit_of`). The format is
described in :mod:`patchkit.spec.patchdoc`."""

from __future__ import annotations

import dataclasses
import email.utils
import re
from collections.abc import Mapping
from typing import Literal

from patchkit.core.errors import PatchError
from patchkit.spec.mailfmt import cleanup_subject, decode_words, is_from_line, stripspace
from patchkit.spec.patchfile import HEADER_KEYS, parse_header
from patchkit.spec.patchparts import Parts, header_block, lines_of, split_parts

__all__ = [
    "DEFAULTS",
    "DERIVABLE",
    "MAX_HEADER",
    "TRAILERS",
    "TRAILER_OF",
    "Ident",
    "MailHead",
    "PatchDoc",
    "PatchFields",
    "commit_of",
    "derive_fields",
    "read_doc",
    "read_headers",
    "stated_fields",
    "title_from",
    "trailer_block",
    "trailers_of",
    "why_from",
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
TRAILER_OF = {
    field: ("Upstream-Status" if field == "Upstream-Status" else f"Patchkit-{field}")
    for field in TRAILERS.values()
}
# the fields a mail may leave out, and their value then (Why: from the message)
DERIVABLE = ("Why", "Upstream-Status", "When", "Default")
DEFAULTS = {"Upstream-Status": "pending", "When": "..", "Default": "yes", "Experimental": "no"}
_TRAILER_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9-]*)\s*:\s*(.*)$")
_RECOGNISED = ("signed-off-by", *TRAILERS)


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
class PatchDoc:
    where: str
    parts: Parts
    native: Mapping[str, str] | None  # patchkit's header block (None: a plain mail)
    mail: MailHead | None
    message: str  # the message (mail) or free text (patchkit's form), decoded
    trailers: tuple[tuple[str, str], ...]  # the message's trailer block
    stated: Mapping[str, str]  # patchkit's fields the mail states (trailers, mail headers)

    @property
    def kind(self) -> Literal["patchkit", "mail", "plain"]:
        if self.native is not None:
            return "patchkit"
        return "mail" if self.mail is not None else "plain"


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


MAX_HEADER = 65_536  # characters of one mail header, its folded lines joined


def _excerpt(value: str) -> str:
    """A header value for a message: its start, quoted, and its length when cut."""
    if len(value) <= 60:
        return repr(value)
    return f"{value[:60]!r}… ({len(value):,} characters)"


def read_headers(block: bytes, where: str) -> list[tuple[str, str]]:
    """(name, value) of a mail header block, continuation lines joined, values raw; a
    header longer than :data:`MAX_HEADER` is a PatchError (no mail git writes has one, and
    what reads it need not be ready for megabytes)."""
    out: list[tuple[str, list[str]]] = []
    size = 0
    for raw in lines_of(block):
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
    lines = lines_of(head)
    start = 1 if lines and is_from_line(lines[0]) else 0
    headers = read_headers(b"".join(lines[start:]), where)
    body_at = header_block(lines, start) + 1
    inbody = read_headers(b"".join(lines[body_at:]), where) if body_at < len(lines) else []

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


def trailer_block(lines: list[str]) -> tuple[int, int] | None:
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


def trailers_of(lines: list[str]) -> tuple[tuple[str, str], ...]:
    block = trailer_block(lines)
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


def stated_fields(
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
    plain = parts.mail_at is None and not _names_a_field(parts.head[: parts.native_end or 0])
    if parts.native_end is not None and not plain:
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
    # a plain diff (``git diff``, quilt): whatever text is before the diff is its message
    message = (parts.head + parts.message if plain else parts.message).decode(charset, "replace")
    lines = message.split("\n")
    trailers = trailers_of(lines) if mail is not None else ()
    stated: dict[str, str] = {}
    if mail is not None and native is None:
        stated = stated_fields(list(mail.headers), bare=True) | stated_fields(trailers)
    return PatchDoc(
        where=where,
        parts=parts,
        native=native,
        mail=mail,
        message=message,
        trailers=trailers,
        stated=stated,
    )


def _names_a_field(block: bytes) -> bool:
    """Whether a block of ``Key: value`` lines names one of patchkit's header fields but
    Subject (else it is free text: a quilt patch's ``Subject:`` or description, DEP-3
    lines, nothing)."""
    for line in block.decode("utf-8", "replace").splitlines():
        key, sep, _ = line.partition(":")
        if sep and key.strip() in HEADER_KEYS and key.strip() != "Subject":
            return True
    return False


def title_from(message: str, name_from_file: str) -> str:
    """A plain diff's title: its text's first line (a ``Subject:`` or DEP-3
    ``Description:`` line's value), else the file's name in words."""
    for ln in message.split("\n"):
        text = ln.strip()
        if not text:
            continue
        key, sep, value = text.partition(":")
        if sep and key.strip().lower() in ("subject", "description") and value.strip():
            return value.strip()
        if text.startswith(("Index:", "====", "---", "+++")):
            break
        return text
    return re.sub(r"[-_]+", " ", name_from_file).strip() or name_from_file


def why_from(message: str, subject: str) -> str:
    """The message's first paragraph (trailers left out), on one line; else the title."""
    lines = message.split("\n")
    block = trailer_block(lines)
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
    (spec.series says what is missing). A mail: what it states, the rest derived. A plain
    diff (no mail, no field of patchkit's): every field derived, no author."""
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
    stated = doc.stated
    if doc.mail is None:  # a plain diff: the title from its text or its file's name
        subject = title_from(doc.message, name_from_file)
        has_subject = False
    else:
        subject = doc.mail.subject or name_from_file
        has_subject = bool(doc.mail.subject)
    derived = [k for k in DERIVABLE if k not in stated]
    if not has_subject:
        derived.insert(0, "Subject")
    return PatchFields(
        subject=subject,
        why=stated.get("Why") or why_from(doc.message, subject),
        upstream_status=stated.get("Upstream-Status", DEFAULTS["Upstream-Status"]),
        when=stated.get("When", DEFAULTS["When"]),
        default=stated.get("Default", DEFAULTS["Default"]),
        experimental=stated.get("Experimental", DEFAULTS["Experimental"]),
        name=stated.get("Name") or None,
        derived=tuple(derived),
    )


def commit_of(mail: bytes, where: str) -> tuple[Ident, str | None, str]:
    """What ``git am`` makes of a mail: its author, date and commit message."""
    doc = read_doc(mail, where)
    if doc.mail is None:
        raise PatchError(f"{where}: not a mail")
    message = stripspace(doc.mail.subject + "\n\n" + doc.message)
    return doc.mail.author, doc.mail.date, message
