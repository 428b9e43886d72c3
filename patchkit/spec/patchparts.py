"""A patch file's parts as byte slices (:class:`Parts`: head, message, diffstat, diff,
signature), found as ``git mailinfo`` and ``git apply`` find them, and the mails of an
mbox. Nothing is decoded or checked here: :mod:`patchkit.spec.patchread` reads the parts."""

from __future__ import annotations

import dataclasses
import re

from patchkit.spec.diffstat import is_stat_line
from patchkit.spec.mailfmt import is_from_line
from patchkit.spec.patchfile import parse_diff, traditional_start

__all__ = [
    "Parts",
    "header_block",
    "is_blank",
    "is_patchbreak",
    "lines_of",
    "split_mbox",
    "split_parts",
    "stat_run",
]

_INBODY = re.compile(rb"^(From|Date|Subject):", re.IGNORECASE)
_HEADER_NAME = re.compile(rb"^([!-9;-~]+):")


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


def lines_of(data: bytes) -> list[bytes]:
    """Lines with their ``\\n`` (only ``\\n`` ends a line, as for git)."""
    out = data.split(b"\n")
    last = out.pop()
    lines = [ln + b"\n" for ln in out]
    if last:
        lines.append(last)
    return lines


def is_blank(line: bytes) -> bool:
    return not line.strip(b" \t\r\n")


def is_patchbreak(line: bytes) -> bool:
    """git mailinfo's end of the message: ``diff -``, ``Index: ``, ``--- name``, ``---``."""
    if line.startswith((b"diff -", b"Index: ")):
        return True
    body = line.rstrip(b"\n")
    if len(line) < 4 or not body.startswith(b"---"):
        return False
    if body[3:4] == b" " and body[4:5] and not body[4:5].isspace():
        return True
    return not body[3:].strip(b" \t\r\v\f")


def header_block(lines: list[bytes], start: int) -> int:
    """The index after a mail header block starting at ``start`` (its blank line excluded)."""
    i = start
    while i < len(lines) and not is_blank(lines[i]):
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
    block = lines[start : header_block(lines, start)]
    names = {m.group(1).lower() for ln in block if (m := _HEADER_NAME.match(ln))}
    if b"from" not in names or not names & {b"date", b"subject"}:
        return False
    if start == 0:
        return True
    sender = next(ln for ln in block if ln[:5].lower() == b"from:")
    return _names_address(sender)


def _names_address(sender: bytes) -> bool:
    """A ``From:`` line that ends in ``<address>`` (no blank, ``<`` or ``>`` inside) or is
    a bare ``user@host``. By hand, not a regex: a regex tried at every ``@`` of a line of
    them costs the line's length squared."""
    text = sender.rstrip()
    if text.endswith(b">"):
        lt = text.rfind(b"<", 0, len(text) - 1)
        inner = text[lt + 1 : -1]
        if lt >= 0 and b">" not in inner and len(inner.split()) <= 1 and inner.strip() == inner:
            return True
    rest = text[5:].strip()
    return len(rest.split()) == 1 and b"@" in rest[1:-1]


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
    if i < len(lines) and is_blank(lines[i]):
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


def stat_run(lines: list[bytes], lo: int, hi: int) -> tuple[int, int] | None:
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


def _diff_starts(lines: list[bytes], i: int) -> bool:
    """A ``diff --git`` line, or the ``---``/``+++``/``@@`` start of a traditional diff."""
    return lines[i].startswith(b"diff --git ") or traditional_start(lines, i)


def split_parts(data: bytes) -> Parts:
    """The parts of a patch file (no field is read or checked here)."""
    lines = lines_of(data)
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
        while k < n and is_blank(lines[k]):
            k += 1
        if _looks_like_mail(lines, k):
            mail_at = k

    header_end: int | None = None
    if mail_at is not None:
        k = mail_at + (1 if is_from_line(lines[mail_at]) else 0)
        k = header_block(lines, k)
        k = min(k + 1, n)  # the blank line
        header_end = k
        if k < n and _INBODY.match(lines[k]):  # in-body From:/Date:/Subject: lines
            k = min(header_block(lines, k) + 1, n)
        head_end = k
        while k < n and not is_patchbreak(lines[k]):
            k += 1
        msg_end = k
    else:
        head_end = native_end or 0
        msg_end = head_end
        while msg_end < n and not _diff_starts(lines, msg_end):
            msg_end += 1
    diff_at = msg_end
    while diff_at < n and not _diff_starts(lines, diff_at):
        diff_at += 1
    if mail_at is None:
        # a diffstat block at the end of the free text (blank lines after it) is a stat part
        end = msg_end
        while end > head_end and is_blank(lines[end - 1]):
            end -= 1
        run = stat_run(lines, head_end, end)
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
    for ln in lines_of(data):
        if is_from_line(ln):
            if any(not is_blank(c) for c in cur):
                mails.append(b"".join(cur))
            cur = []  # blank lines before a From line belong to no mail
        elif mboxrd and re.match(rb"^>+From ", ln):
            ln = ln[1:]
        cur.append(ln)
    if any(not is_blank(c) for c in cur):
        mails.append(b"".join(cur))
    return mails
