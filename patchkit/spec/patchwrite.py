"""Writing patch files: a diff replaced under the same header and message
(:func:`replace_diff`, a refresh), patchkit's fields added as trailers
(:func:`add_trailers`), a document rendered as a mail ``git am`` takes
(:func:`render_mail`), a quoted-printable or base64 mail decoded to 8 bits
(:func:`decode_transfer`). Everything not rewritten stays byte for byte."""

from __future__ import annotations

import base64
import binascii
import quopri
import re
from collections.abc import Mapping

from patchkit.core.errors import PatchError
from patchkit.spec.diffstat import diffstat
from patchkit.spec.mailfmt import ZERO_FROM_LINE, format_from, format_subject, is_from_line
from patchkit.spec.patchparts import header_block, is_blank, is_patchbreak, lines_of, split_parts, stat_run
from patchkit.spec.patchread import (
    DEFAULTS,
    TRAILER_OF,
    Ident,
    PatchDoc,
    PatchFields,
    read_doc,
    read_headers,
    stated_fields,
    trailer_block,
    trailers_of,
    why_from,
)

__all__ = ["add_trailers", "decode_transfer", "render_mail", "replace_diff"]


def _restat(stat: bytes, diff: bytes, *, keep: bool, add: bool) -> bytes:
    """``stat`` with its diffstat block made from ``diff`` (``keep``) or removed; ``add``:
    write one after the ``---`` line when there was none."""
    lines = lines_of(stat)
    fresh = diffstat(diff.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
    run = stat_run(lines, 0, len(lines))
    if run is not None:
        a, b = run
        if keep:
            return b"".join(lines[:a]) + fresh + b"".join(lines[b:])
        if b < len(lines) and is_blank(lines[b]):
            b += 1
        return b"".join(lines[:a]) + b"".join(lines[b:])
    if add and keep and fresh:
        if lines and is_patchbreak(lines[0]) and lines[0].rstrip(b"\n") == b"---":
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
    for k, v in read_headers(head[parts.mail_at :], where):
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
    lines = lines_of(head)
    start = 1 if lines and is_from_line(lines[0]) else 0
    end = header_block(lines, start)
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
    block = trailer_block(text_lines)
    if block is not None and block[1] == len(trimmed):
        return body + b"\n" + new
    return body + b"\n\n" + new


def add_trailers(data: bytes, fields: Mapping[str, str], where: str) -> bytes:
    """A mail with patchkit's ``fields`` (Why, When, ...) added as trailers of its
    message (after the ones it has); the rest of the file stays as it is."""
    doc = read_doc(data, where)
    if doc.mail is None:
        raise PatchError(f"{where}: not a mail: patchkit's fields go in its header block")
    add = [(TRAILER_OF[k], v) for k, v in fields.items()]
    head, charset = _head_for(doc.parts.head, doc.mail.charset, add)
    message = _append_trailers(doc.parts.message, add, charset, where)
    if not message.endswith(b"\n"):
        message += b"\n"
    return head + message + doc.parts.stat + doc.parts.diff + doc.parts.tail


def _escape_breaks(text: str) -> str:
    """Message lines git am would take for the start of the diff, indented by one space."""
    return "\n".join(
        " " + ln if is_patchbreak((ln + "\n").encode("utf-8", "replace")) else ln for ln in text.split("\n")
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
        "Why": why_from(message, fields.subject),
        **DEFAULTS,
        "Name": name_from_file,
    }
    have = stated_fields(trailers_of(message.split("\n")))
    out: list[tuple[str, str]] = []
    for field in ("Why", "Upstream-Status", "When", "Default", "Experimental", "Name"):
        value = fields.get(field) if field != "Name" else (fields.name or name_from_file)
        if value is None or field in have or _same(field, value, derived[field]):
            continue
        out.append((TRAILER_OF[field], value))
    return out


def _replace_subject(head: bytes, subject: str) -> bytes:
    lines = lines_of(head)
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
        if not is_from_line(lines_of(head)[0]):
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
