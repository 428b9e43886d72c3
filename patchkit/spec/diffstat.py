"""The diffstat ``git format-patch`` writes between ``---`` and the diff, computed from the
diff alone (no repository): the per-file lines, the totals line and the summary lines
(``create mode``, ``delete mode``, ``rename``, ``copy``, ``mode change``).

It follows git's ``diff.c`` (``show_stats``, ``pprint_rename``, ``diff_summary``) at the
width format-patch uses (72 columns), so a diff git wrote gets the block git wrote. The
one thing a diff does not say is whether a renamed or mode-changed file with no content
change is binary (git then prints ``Bin`` where this prints ``0``).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
import unicodedata
import zlib

from patchkit.spec.patchfile import FileDiff, parse_diff

__all__ = ["MAIL_STAT_WIDTH", "StatFile", "diffstat", "is_stat_line", "quote_path", "stat_files"]

MAIL_STAT_WIDTH = 72  # git's MAIL_DEFAULT_WRAP: format-patch's --stat width

# a diffstat block's lines, as git writes them (used to find a stale one in a patch file)
_STAT_LINE = re.compile(r"^ .+ \| +(\d+( [+-]+)?|Bin( \d+ -> \d+ bytes)?)$")
_TOTALS = re.compile(
    r"^ \d+ files? changed(, \d+ insertions?\(\+\))?(, \d+ deletions?\(-\))?$|^ 0 files changed$"
)
_SUMMARY = re.compile(
    r"^ ((create|delete) mode \d+ .+|(rename|copy|rewrite) .+ \(\d+%\)|mode change \d+ => \d+( .+)?)$"
)
_BIN_SIZE = re.compile(r"^(literal|delta) (\d+)$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class StatFile:
    print_name: str  # as git shows it: quoted if needed, a rename as "dir/{a => b}"
    added: int  # lines (binary: the new size in bytes)
    deleted: int  # lines (binary: the old size in bytes)
    binary: bool = False


def is_stat_line(line: str) -> str | None:
    """Which part of a diffstat block ``line`` (without its newline) looks like: "file",
    "totals", "summary", or None."""
    if _TOTALS.match(line):
        return "totals"
    if _SUMMARY.match(line):
        return "summary"
    if _STAT_LINE.match(line):
        return "file"
    return None


# -- names -------------------------------------------------------------------------------

_CQ = {0x07: "a", 0x08: "b", 0x09: "t", 0x0A: "n", 0x0B: "v", 0x0C: "f", 0x0D: "r", 0x22: '"', 0x5C: "\\"}


def quote_path(path: str) -> str:
    """git's ``quote_c_style`` with core.quotePath on (the default): a name with a control
    character, a quote, a backslash or a non-ASCII byte is written in double quotes with C
    escapes (octal for the bytes)."""
    raw = path.encode("utf-8", "surrogateescape")
    if not any(b < 0x20 or b == 0x7F or b >= 0x80 or b in (0x22, 0x5C) for b in raw):
        return path
    out = ['"']
    for b in raw:
        if b in _CQ:
            out.append("\\" + _CQ[b])
        elif b < 0x20 or b >= 0x7F:
            out.append(f"\\{b:03o}")
        else:
            out.append(chr(b))
    out.append('"')
    return "".join(out)


def pprint_rename(a: str, b: str) -> str:
    """git's ``pprint_rename``: ``dir/{old => new}/rest`` around the common prefix and suffix."""
    qa, qb = quote_path(a), quote_path(b)
    if qa != a or qb != b:
        return f"{qa} => {qb}"
    ab, bb = a.encode(), b.encode()
    la, lb = len(ab), len(bb)
    # the common prefix, up to and including its last '/'
    pfx = 0
    i = 0
    while i < la and i < lb and ab[i] == bb[i]:
        if ab[i] == 0x2F:
            pfx = i + 1
        i += 1
    # the common suffix, from its first '/'; with a prefix, the loop may run one into it
    # to see the same slash (the strings' ends are compared as NUL == NUL first)
    sfx = 0
    adjust = 1 if pfx else 0
    oa, ob = la, lb
    while pfx - adjust <= oa and pfx - adjust <= ob:
        ca = ab[oa] if oa < la else 0
        cb = bb[ob] if ob < lb else 0
        if ca != cb:
            break
        if ca == 0x2F:
            sfx = la - oa
        oa -= 1
        ob -= 1
    a_mid = max(la - pfx - sfx, 0)
    b_mid = max(lb - pfx - sfx, 0)
    out = b""
    if pfx + sfx:
        out += ab[:pfx] + b"{"
    out += ab[pfx : pfx + a_mid] + b" => " + bb[pfx : pfx + b_mid]
    if pfx + sfx:
        out += b"}" + ab[la - sfx :]
    return out.decode()


def _char_width(c: str) -> int:
    if unicodedata.combining(c):
        return 0
    return 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1


def _width(text: str) -> int:
    return sum(_char_width(c) for c in text)


# -- sizes of binary files -------------------------------------------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while pos < len(data):
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    return value, pos


def _decode_binary_block(lines: list[str]) -> bytes:
    """The zlib stream of one ``literal``/``delta`` block (git's base85 lines)."""
    out = bytearray()
    for ln in lines:
        if not ln:
            break
        c = ln[0]
        n = ord(c) - ord("A") + 1 if "A" <= c <= "Z" else ord(c) - ord("a") + 27
        out += base64.b85decode(ln[1:])[:n]
    return bytes(out)


def _binary_sizes(f: FileDiff) -> tuple[int, int]:
    """(old size, new size) in bytes from a ``GIT binary patch``; (0, 0) when the diff
    does not say (``Binary files ... differ``)."""
    blocks: list[tuple[str, int, list[str]]] = []
    for ln in f.body:
        m = _BIN_SIZE.match(ln)
        if m:
            blocks.append((m.group(1), int(m.group(2)), []))
        elif blocks:
            blocks[-1][2].append(ln)

    def target(kind: str, size: int, data: list[str]) -> tuple[int | None, int]:
        """(source size or None, target size) of one block."""
        if kind == "literal":
            return None, size
        try:
            delta = zlib.decompressobj().decompress(_decode_binary_block(data), 32)
        except (zlib.error, ValueError, binascii.Error):
            return None, 0
        src, pos = _varint(delta, 0)
        dst, _ = _varint(delta, pos)
        return src, dst

    if not blocks:
        return 0, 0
    src, new = target(*blocks[0])
    if len(blocks) > 1:
        _, old = target(*blocks[1])
    else:
        old = src or 0
    return old, new


# -- the block ---------------------------------------------------------------------------------


def stat_files(diff: str) -> list[tuple[FileDiff, StatFile]]:
    """Each file of a diff with its diffstat numbers, in the diff's order."""
    out: list[tuple[FileDiff, StatFile]] = []
    for f in parse_diff(diff).files:
        if f.status in ("R", "C"):
            name = pprint_rename(f.old_path, f.new_path)
        else:
            name = quote_path(f.new_path if f.status != "D" else f.old_path)
        if f.binary:
            old, new = _binary_sizes(f)
            out.append((f, StatFile(print_name=name, added=new, deleted=old, binary=True)))
            continue
        added = sum(1 for ln in f.body if ln.startswith("+"))
        deleted = sum(1 for ln in f.body if ln.startswith("-"))
        out.append((f, StatFile(print_name=name, added=added, deleted=deleted)))
    return out


def _scale(it: int, width: int, max_change: int) -> int:
    return 0 if not it else 1 + (it * (width - 1) // max_change)


def _summary(f: FileDiff) -> list[str]:
    def mode_change(show_name: bool) -> list[str]:
        if f.old_mode and f.new_mode and f.old_mode != f.new_mode:
            return [
                f" mode change {f.old_mode} => {f.new_mode}"
                + (f" {quote_path(f.new_path)}" if show_name else "")
            ]
        return []

    if f.status == "D":
        return [
            f" delete mode {f.old_mode} {quote_path(f.old_path)}"
            if f.old_mode
            else f" delete {quote_path(f.old_path)}"
        ]
    if f.status == "A":
        return [
            f" create mode {f.new_mode} {quote_path(f.new_path)}"
            if f.new_mode
            else f" create {quote_path(f.new_path)}"
        ]
    if f.status in ("R", "C"):
        what = "rename" if f.status == "R" else "copy"
        return [
            f" {what} {pprint_rename(f.old_path, f.new_path)} ({f.similarity or 0}%)",
            *mode_change(False),
        ]
    return mode_change(True)


def diffstat(diff: str, width: int = MAIL_STAT_WIDTH) -> str:
    """The diffstat block of ``diff`` as ``git format-patch`` prints it (every line ending
    in a newline), or "" for a diff without files."""
    files = stat_files(diff)
    if not files:
        return ""
    stats = [s for _, s in files]
    max_len = max(_width(s.print_name) for s in stats)
    bin_width = number_width = max_change = 0
    for s in stats:
        if s.binary:
            bin_width = max(bin_width, 14 + len(str(s.added)) + len(str(s.deleted)))
            number_width = 3
            continue
        max_change = max(max_change, s.added + s.deleted)
    number_width = max(len(str(max_change)), number_width)
    width = max(width, 16 + 6 + number_width)
    graph_width = max_change if max_change + 4 > bin_width else bin_width - 4
    name_width = max_len
    if name_width + number_width + 6 + graph_width > width:
        if graph_width > width * 3 // 8 - number_width - 6:
            graph_width = max(width * 3 // 8 - number_width - 6, 6)
        if name_width > width - number_width - 6 - graph_width:
            name_width = width - number_width - 6 - graph_width
        else:
            graph_width = width - number_width - 6 - name_width
    lines: list[str] = []
    for s in stats:
        name, prefix, room = s.print_name, "", name_width
        name_len = _width(name)
        if name_width < name_len:
            prefix, room = "...", max(room - 3, 0)
            while name_len > room:
                name_len -= _char_width(name[0])
                name = name[1:]
            slash = name.find("/")
            if slash >= 0:
                name = name[slash:]
        padding = " " * max(room - _width(name), 0)
        if s.binary:
            line = f" {prefix}{name}{padding} | {'Bin':>{number_width}}"
            if s.added or s.deleted:
                line += f" {s.deleted} -> {s.added} bytes"
            lines.append(line)
            continue
        add, dele = s.added, s.deleted
        if graph_width <= max_change:
            total = _scale(add + dele, graph_width, max_change)
            if total < 2 and add and dele:
                total = 2
            if add < dele:
                add = _scale(add, graph_width, max_change)
                dele = total - add
            else:
                dele = _scale(dele, graph_width, max_change)
                add = total - dele
        change = s.added + s.deleted
        graph = (" " if change else "") + "+" * add + "-" * dele
        lines.append(f" {prefix}{name}{padding} | {change:>{number_width}}{graph}")
    nfiles = len(stats)
    adds = sum(s.added for s in stats if not s.binary)
    dels = sum(s.deleted for s in stats if not s.binary)
    totals = f" {nfiles} file{'s' if nfiles != 1 else ''} changed"
    if adds or dels == 0:
        totals += f", {adds} insertion{'s' if adds != 1 else ''}(+)"
    if dels or adds == 0:
        totals += f", {dels} deletion{'s' if dels != 1 else ''}(-)"
    lines.append(totals)
    for f, _ in files:
        lines += _summary(f)
    return "".join(ln + "\n" for ln in lines)
