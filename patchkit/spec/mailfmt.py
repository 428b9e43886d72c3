"""Mail headers as ``git format-patch`` writes them and ``git mailinfo`` reads them.

Writing: ``From:`` and ``Subject:`` follow git's ``pretty.c`` (RFC 2047 ``q`` encoding of
non-ASCII text in pieces of at most 76 columns, RFC 822 quoting of a name with special
characters, plain text wrapped at 78 columns), so a header patchkit renders is the one git
would. Reading: RFC 2047 encoded words and folded lines through Python's ``email``
package, and the subject cleaned as ``git mailinfo`` cleans it (``[PATCH n/m]``, ``Re:``).
A patch's file name is git's: ``NNNN-`` plus the sanitized subject, at most 52 characters.
"""

from __future__ import annotations

import email.errors
import email.header
import re

__all__ = [
    "PATCH_NAME_MAX",
    "ZERO_FROM_LINE",
    "cleanup_subject",
    "decode_words",
    "format_from",
    "format_subject",
    "is_from_line",
    "sanitized_subject",
    "stripspace",
    "wrap_text",
]

ZERO_FROM_LINE = "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
PATCH_NAME_MAX = 52  # format-patch: 64 for "NNNN-" + name + ".patch" + 1
_MAX_LENGTH = 78  # per RFC 2822
_MAX_ENCODED = 76  # per RFC 2047
_RFC822_SPECIAL = set('()<>[]:;@,."\\')


def is_from_line(line: bytes) -> bool:
    """git mailsplit's test for a line that starts a mail in an mbox: ``From `` and
    something that ends like a date (``hh:mm:ss yyyy``, a year after 1990)."""
    line = line.rstrip(b"\n")
    if len(line) < 19 or not line.startswith(b"From "):
        return False
    colon = line.rfind(b":", 5, len(line) - 1)  # git looks from the second-to-last byte back
    if colon < 0:
        return False
    digits = (colon - 4, colon - 2, colon - 1, colon + 1, colon + 2)
    if not all(0 <= i < len(line) and 0x30 <= line[i] <= 0x39 for i in digits):
        return False
    year = re.match(rb"\d+", line[colon + 3 :].lstrip())
    return bool(year) and int(year.group()) > 90  # type: ignore[union-attr]


def _needs_rfc2047(text: str) -> bool:
    return any(ord(c) >= 0x80 or c == "\n" for c in text) or "=?" in text


def _rfc2047_special(byte: int, address: bool) -> bool:
    if byte >= 0x80 or not 0x20 <= byte < 0x7F:
        return True
    c = chr(byte)
    if c.isspace() or c in "=?_":
        return True
    if not address:
        return False
    return not (c.isalnum() or c in "!*+-/")


def _last_line_length(text: str) -> int:
    return len(text) - (text.rfind("\n") + 1)


def _add_rfc2047(out: str, text: str, *, address: bool) -> str:
    line_len = _last_line_length(out) + len("UTF-8") + 5
    out += "=?UTF-8?q?"
    for ch in text:
        raw = ch.encode("utf-8", "surrogateescape")
        special = len(raw) > 1 or _rfc2047_special(raw[0], address)
        encoded = "".join(f"={b:02X}" for b in raw) if special else ch
        if line_len + len(encoded) + 2 > _MAX_ENCODED:
            out += "?=\n =?UTF-8?q?"
            line_len = len("UTF-8") + 5 + 1
        out += encoded
        line_len += len(encoded)
    return out + "?="


def wrap_text(text: str, indent1: int, indent2: int, width: int) -> str:
    """git's ``strbuf_add_wrapped_text`` for ASCII text: words moved to new lines (indented
    by ``indent2``) so that lines stay within ``width`` columns; a negative ``indent1``
    says that many columns of the first line are already used."""
    out: list[str] = []
    n = len(text)
    i = bol = 0
    w = indent = indent1
    space: int | None = None
    if indent < 0:
        w = -indent
        space = 0
    while True:
        c = text[i] if i < n else ""
        if c and not c.isspace():
            w += 1
            i += 1
            continue
        new_line = False
        if w <= width or space is None:
            start = bol
            if not c and i == start:
                return "".join(out)
            if space is not None:
                start = space
            else:
                out.append(" " * indent)
            out.append(text[start:i])
            if not c:
                return "".join(out)
            space = i
            if c == "\t":
                w |= 0x07
            elif c == "\n":
                space += 1
                nxt = text[space] if space < n else ""
                if nxt == "\n":
                    out.append("\n")
                    new_line = True
                elif not nxt.isalnum():
                    new_line = True
                else:
                    out.append(" ")
            if not new_line:
                w += 1
                i += 1
                continue
        else:
            new_line = True
        assert space is not None
        out.append("\n")
        i = bol = space + (1 if space < n and text[space].isspace() else 0)
        space = None
        w = indent = indent2


def format_from(name: str, mail: str) -> str:
    """The ``From:`` line git writes for an author (with its newline)."""
    out = "From: "
    max_length = _MAX_LENGTH
    if _needs_rfc2047(name):
        out = _add_rfc2047(out, name, address=True)
        max_length = _MAX_ENCODED
    elif any(c in _RFC822_SPECIAL for c in name):
        quoted = '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
        out += wrap_text(quoted, -6, 1, max_length)
    else:
        out += wrap_text(name, -6, 1, max_length)
    if max_length < _last_line_length(out) + len(" <") + len(mail) + len(">"):
        out += "\n"
    return out + f" <{mail}>\n"


def format_subject(subject: str, prefix: str = "[PATCH] ") -> str:
    """The ``Subject:`` line git writes for a commit's title (with its newline)."""
    out = "Subject: " + prefix
    if _needs_rfc2047(subject):
        return _add_rfc2047(out, subject, address=False) + "\n"
    return out + wrap_text(subject, -_last_line_length(out), 1, _MAX_LENGTH) + "\n"


def decode_words(value: str) -> str:
    """A header value with RFC 2047 encoded words decoded (folding already undone);
    ValueError if an encoded word cannot be read."""
    try:
        return str(email.header.make_header(email.header.decode_header(value)))
    except (LookupError, UnicodeError, email.errors.HeaderParseError) as e:
        raise ValueError(str(e)) from None


def cleanup_subject(subject: str) -> str:
    """git mailinfo's subject clean-up: leading ``Re:``, ``[...]`` blocks, blanks and colons
    go, runs of blanks become one space; the rest is the commit's title. One pass over the
    text (a subject of a million ``[x]`` blocks costs what reading it costs)."""
    at = 0
    n = len(subject)
    while at < n:
        c = subject[at]
        if c in "rR":
            if n > at + 3 and subject[at + 1] in "eE" and subject[at + 2] == ":":
                at += 3
                continue
            break
        if c in " \t:":
            at += 1
            continue
        if c == "[":
            end = subject.find("]", at)
            if end < 0:
                break
            at = end + 1
            continue
        break
    # then git's cleanup_space: each run of blanks (space, tab, CR, LF: git's isspace) is
    # one space, as in the commit title git am makes
    return re.sub(r"[ \t\r\n]+", " ", subject[at:].strip())


def sanitized_subject(subject: str) -> str:
    """git's ``format_sanitized_subject`` (the ``%f`` of a file name): runs of characters
    other than letters, digits, ``.`` and ``_`` become one ``-``; ``..`` becomes ``.``;
    no ``.`` or ``-`` at the end."""
    out: list[str] = []
    space = 2
    i = 0
    while i < len(subject):
        c = subject[i]
        if c.isascii() and (c.isalnum() or c in "._"):
            if space == 1:
                out.append("-")
            space = 0
            out.append(c)
            if c == ".":
                while i + 1 < len(subject) and subject[i + 1] == ".":
                    i += 1
        else:
            space |= 1
        i += 1
    return "".join(out).rstrip(".-")


def stripspace(text: str) -> str:
    """git's ``stripspace`` (no comments): trailing blanks cut from each line, runs of empty
    lines made one, none at the start or the end, a newline after the last line."""
    lines = [ln.rstrip() for ln in text.split("\n")]
    out: list[str] = []
    for ln in lines:
        if not ln:
            if out and out[-1]:
                out.append("")
            continue
        out.append(ln)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out) + "\n" if out else ""
