"""The one diff model, and the one parser of patch files (the ``Key: value`` header and
the git diff after it).

A patch file is a header of ``Key: value`` lines, a blank line, free text, then a diff
in ``git diff`` format (``git apply`` skips everything before the first ``diff --git``).
``parse_diff`` reads it as ``git apply`` does, per file: its old and new path (C-quoted
names too), its modes (``new file mode``, ``new mode``, ``deleted file mode``, the mode on
the ``index`` line), renames and copies, its binary blocks, and its hunks with their line
ranges and the lines of both sides. Every reader of a diff in patchkit reads it here.
What ``git apply -v`` says about a patch (:mod:`patchkit.spec.applyout`) and why one is
refused (:mod:`patchkit.spec.diffsafety`) live beside it and are importable from here.
"""

from __future__ import annotations

import base64
import dataclasses
import re
import zlib
from collections.abc import Sequence

from patchkit.core.errors import PatchError
from patchkit.core.text import did_you_mean

# what git apply -v says, and why a patch is refused: their own modules, read from here too
from patchkit.spec.applyout import Conflict, Offset, parse_apply_output
from patchkit.spec.diffsafety import BINARY_MAX, refusals

__all__ = [
    "BINARY_MAX",
    "HEADER_KEYS",
    "SYMLINK_MODE",
    "BinaryBlock",
    "Conflict",
    "FileDiff",
    "Hunk",
    "Offset",
    "ParsedDiff",
    "parse_apply_output",
    "parse_diff",
    "parse_header",
    "refusals",
    "traditional_start",
]

HEADER_KEYS = ("Name", "Subject", "Why", "Upstream-Status", "When", "Default", "Experimental")
SYMLINK_MODE = "120000"
_S_IFMT, _S_IFLNK = 0o170000, 0o120000

_DIFF_GIT = "diff --git "
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# git reads a mode with strtoul(..., 8) after the keyword: extra spaces and leading zeros
# (0120000) are the same mode to it, so they must be to us
_MODE = re.compile(r"^(new file mode|deleted file mode|new mode|old mode) +([0-7]+)\s*$")
_INDEX = re.compile(r"^index [^.\s]*\.\.\S*?(?: +([0-7]+))?\s*$")
_NAME_LINE = re.compile(r"^(rename from|rename to|copy from|copy to|rename old|rename new) (.*)$")
_SIMILARITY = re.compile(r"^similarity index (\d+)%\s*$")
_BINARY_BLOCK = re.compile(r"^(literal|delta) (\d+)\s*$")
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"'}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Hunk:
    """One hunk: where it sits on each side and its lines as the diff has them."""

    file: str
    number: int  # 1-based within its file, as git counts
    old_start: int
    new_start: int
    header: str  # the whole "@@ -a,b +c,d @@ ..." line
    old_count: int = 1  # lines of the old side (",b"; 1 when the header leaves it out)
    new_count: int = 1
    # the body as the diff has it: " " context (an empty line too), "-", "+" lines and
    # "\ No newline at end of file" markers, each without its newline
    lines: tuple[str, ...] = ()
    complete: bool = True  # the body holds exactly the lines its header counts
    line: int = 0  # where the header is in the parsed text (1-based)

    @property
    def old_range(self) -> range:
        return range(self.old_start, self.old_start + self.old_count)

    @property
    def new_range(self) -> range:
        return range(self.new_start, self.new_start + self.new_count)

    @property
    def before(self) -> tuple[str, ...]:
        """The old side's lines (context and removed), without their prefix."""
        return tuple(ln[1:] for ln in self.lines if ln[:1] != "+" and ln[:1] != "\\")

    @property
    def after(self) -> tuple[str, ...]:
        """The new side's lines (context and added), without their prefix."""
        return tuple(ln[1:] for ln in self.lines if ln[:1] != "-" and ln[:1] != "\\")

    @property
    def added(self) -> tuple[str, ...]:
        return tuple(ln[1:] for ln in self.lines if ln[:1] == "+")

    @property
    def removed(self) -> tuple[str, ...]:
        return tuple(ln[1:] for ln in self.lines if ln[:1] == "-")

    @property
    def added_runs(self) -> tuple[tuple[str, ...], ...]:
        """The runs of consecutive added lines."""
        return _runs(self.lines, "+")

    @property
    def removed_runs(self) -> tuple[tuple[str, ...], ...]:
        return _runs(self.lines, "-")

    def image(self, side: str) -> tuple[str, ...]:
        """The ``"old"`` or ``"new"`` side as file lines: each with its newline, except a
        line the diff marks ``\\ No newline at end of file``."""
        drop = "+" if side == "old" else "-"
        out: list[str] = []
        last_kept = False
        for ln in self.lines:
            kind = ln[:1]
            if kind == "\\":
                if out and last_kept:
                    out[-1] = out[-1][:-1]
                continue
            last_kept = kind != drop
            if last_kept:
                out.append(ln[1:] + "\n")
        return tuple(out)


def _runs(lines: Sequence[str], kind: str) -> tuple[tuple[str, ...], ...]:
    runs: list[tuple[str, ...]] = []
    cur: list[str] = []
    for ln in lines:
        if ln[:1] == kind:
            cur.append(ln[1:])
            continue
        if cur:
            runs.append(tuple(cur))
            cur = []
    if cur:
        runs.append(tuple(cur))
    return tuple(runs)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BinaryBlock:
    """One ``literal N`` / ``delta N`` block of a ``GIT binary patch``: N is the size of
    the inflated data (the file itself, or the delta), ``lines`` its base85 lines."""

    kind: str  # "literal" | "delta"
    size: int
    lines: tuple[str, ...]

    def result_size(self) -> int | None:
        """The size of the file a block makes: a literal's N; a delta's target size from
        its header (the first bytes inflated alone); None when that cannot be read."""
        if self.kind == "literal":
            return self.size
        data = bytearray()
        try:
            for ln in self.lines[:4]:  # the header is in the first few bytes of the stream
                if not ln:
                    break
                c = ln[0]
                n = ord(c) - ord("A") + 1 if "A" <= c <= "Z" else ord(c) - ord("a") + 27
                data += base64.b85decode(ln[1:])[:n]
            head = zlib.decompressobj().decompress(bytes(data), 32)
        except (ValueError, zlib.error):
            return None
        pos = 0
        for _ in range(2):  # source size, then target size: little-endian base-128
            value = shift = 0
            while True:
                if pos >= len(head):
                    return None
                b = head[pos]
                pos += 1
                value |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
        return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class FileDiff:
    old_path: str
    new_path: str
    old_mode: str | None = None  # None: unchanged / not said
    new_mode: str | None = None  # the file's mode after the patch, when the diff says it
    hunks: tuple[Hunk, ...] = ()
    body: tuple[str, ...] = ()  # the lines after the headers (hunks, binary data)
    deleted: bool = False  # "deleted file mode": the patch removes the file
    binary: bool = False  # "GIT binary patch" / "Binary files ... differ"
    names: tuple[str, ...] = ()  # every other path the headers name (---/+++, rename, copy)
    # what git's summary says of the file: "A" created, "D" deleted, "R" renamed, "C"
    # copied, "M" otherwise (changed content and/or mode); similarity: of a rename or copy
    status: str = "M"
    similarity: int | None = None
    line: int = 0  # where its ``diff --git`` line is in the parsed text (1-based)
    # a hunk follows a line that is neither a hunk nor a header (git apply stops reading
    # the file's hunks at such a line, and calls what comes after it a fragment without
    # a header)
    loose: bool = False

    @property
    def binary_blocks(self) -> tuple[BinaryBlock, ...]:
        """The ``literal``/``delta`` blocks of a ``GIT binary patch`` (forward, then the
        reverse one git writes after it)."""
        blocks: list[tuple[str, int, list[str]]] = []
        for ln in self.body:
            if m := _BINARY_BLOCK.match(ln):
                digits = m.group(2)  # git reads it with strtoul: a long number is huge
                blocks.append((m.group(1), int(digits) if len(digits) <= 20 else 1 << 64, []))
            elif blocks:
                blocks[-1][2].append(ln)
        return tuple(BinaryBlock(kind=k, size=n, lines=tuple(lines)) for k, n, lines in blocks)

    @property
    def makes_symlink(self) -> bool:
        """The file is a symlink after the patch (git: any mode whose type bits are S_IFLNK)."""
        return not self.deleted and self.new_mode is not None and int(self.new_mode, 8) & _S_IFMT == _S_IFLNK

    @property
    def symlink_target(self) -> str | None:
        """The link's target as the patch writes it (a symlink's content is its target), or
        None when the patch does not state it (a mode change alone, binary data, a partial
        hunk): then it cannot be checked and is refused."""
        if not self.makes_symlink or self.binary or len(self.hunks) != 1:
            return None
        new_side = [ln[1:] for ln in self.body[1:] if ln[:1] in ("+", " ")]
        if len(new_side) != 1 or self.hunks[0].new_start > 1:
            return None
        return new_side[0]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParsedDiff:
    files: tuple[FileDiff, ...]
    # what git would read as (part of) a diff but patchkit cannot check: an unreadable
    # `diff --git` line, a diff without one; each "line N: ..."
    problems: tuple[str, ...] = ()
    # parsed from bytes: the hunks' lines encode back to the patch's bytes exactly
    # (``str.encode("utf-8", "surrogateescape")``); the paths and headers are decoded
    # with U+FFFD for what is not UTF-8, as from text
    exact: bool = False

    @property
    def targets(self) -> tuple[str, ...]:
        """The paths the patch writes, in order, each once."""
        return tuple(dict.fromkeys(f.new_path for f in self.files))

    @property
    def paths(self) -> tuple[str, ...]:
        """Every path the patch reads or writes, in order, each once."""
        return tuple(dict.fromkeys(p for f in self.files for p in (f.old_path, f.new_path)))

    @property
    def hunks(self) -> tuple[Hunk, ...]:
        return tuple(h for f in self.files for h in f.hunks)


def _unquote(text: str) -> tuple[str, str] | None:
    """A C-quoted name at the start of ``text`` (git's quoting) and what follows it."""
    assert text.startswith('"')
    out: list[str] = []
    raw = bytearray()
    i = 1
    while i < len(text):
        c = text[i]
        if c == '"':
            out.append(raw.decode("utf-8", "replace"))
            return "".join(out), text[i + 1 :]
        if c == "\\" and i + 1 < len(text):
            n = text[i + 1]
            if n in "01234567" and re.match(r"[0-7]{3}", text[i + 1 : i + 4]):
                raw.append(int(text[i + 1 : i + 4], 8))
                i += 4
                continue
            if n in _ESCAPES:
                raw += _ESCAPES[n].encode()
                i += 2
                continue
            return None
        raw += c.encode("utf-8", "surrogateescape")
        i += 1
    return None


def _strip_prefix(name: str) -> str | None:
    """``a/src/x.c`` -> ``src/x.c``: git apply -p1 drops the first component, whatever it is."""
    head, sep, rest = name.partition("/")
    return rest if sep and head and rest else None


def _git_names(rest: str) -> tuple[str, str] | None:
    """The two names of a ``diff --git`` line (after the keyword), as git reads them."""
    names: list[str] = []
    if rest.startswith('"'):
        first = _unquote(rest)
        if first is None or not first[1].startswith(" "):
            return None
        names.append(first[0])
        second = first[1][1:]
        if second.startswith('"'):
            quoted = _unquote(second)
            if quoted is None or quoted[1].strip():
                return None
            names.append(quoted[0])
        else:
            names.append(second)
    elif ' "' in rest:
        a, _, b = rest.partition(' "')
        quoted = _unquote('"' + b)
        if quoted is None or quoted[1].strip():
            return None
        names += [a, quoted[0]]
    else:
        # unquoted: the same name twice (a rename names itself in `rename from/to`), split
        # where both halves agree after their prefix; one space only: split there
        splits = [i for i, c in enumerate(rest) if c == " "]
        same = _same_name_splits(rest, splits)
        if len(same) == 1:
            i = same[0]
        elif len(splits) == 1:
            i = splits[0]
        else:
            return None
        names += [rest[:i], rest[i + 1 :]]
    old, new = (_strip_prefix(n) for n in names)
    if old is None or new is None:
        return None
    return old, new


def _same_name_splits(rest: str, splits: Sequence[int]) -> list[int]:
    """The spaces of ``rest`` where it splits into two names that are the same after their
    first component (``a/x b/x``), in one pass: the first name (after the first "/")
    grows with the split and the second only shrinks, so their lengths agree at one
    split at most and only that one is compared."""
    first = rest.find("/")
    if first <= 0:
        return []
    n = len(rest)
    slash_at = [-1] * (n + 1)  # slash_at[i]: the first "/" at or after i
    for i in range(n - 1, -1, -1):
        slash_at[i] = i if rest[i] == "/" else slash_at[i + 1]
    out: list[int] = []
    for i in splits:
        q = slash_at[i + 1]
        if i <= first + 1 or q <= i + 1 or q >= n - 1:
            continue
        if i - first - 1 == n - q - 1 and rest[first + 1 : i] == rest[q + 1 :]:
            out.append(i)
    return out


def _header_name(value: str) -> str:
    """A name on a ---/+++/rename/copy line, unquoted; ``/dev/null`` stays as it is."""
    value = value.split("\t", 1)[0].rstrip("\n")
    if value.startswith('"'):
        quoted = _unquote(value)
        return quoted[0] if quoted is not None else value
    return value


def traditional_start(lines: Sequence[str] | Sequence[bytes], i: int) -> bool:
    """Whether ``lines[i]`` starts a traditional diff's section: ``--- OLD``, ``+++ NEW``,
    then a hunk header (what git apply takes without a ``diff --git`` line)."""
    if i + 2 >= len(lines):
        return False
    a, b, c = lines[i], lines[i + 1], lines[i + 2]
    if isinstance(a, bytes):
        return a.startswith(b"--- ") and b.startswith(b"+++ ") and c.startswith(b"@@ -")  # type: ignore[arg-type]
    return a.startswith("--- ") and b.startswith("+++ ") and c.startswith("@@ -")  # type: ignore[arg-type]


def parse_diff(text: str | bytes) -> ParsedDiff:
    """Every ``diff --git`` section of a patch, with its modes and hunks, and every
    section of a traditional (``diff -u``, quilt) diff read as git apply reads it (-p1).

    Reads the way ``git apply`` does: any ``diff --git`` line starts a section (names
    quoted or not, any one-component prefix), hunk lines are counted, and what comes after
    a section's last hunk is prose again, where a ``---``/``+++``/``@@`` triple would be a
    traditional diff. What cannot be read that way lands in ``problems``. From bytes, the
    hunks keep the patch's bytes exactly (see :attr:`ParsedDiff.exact`).
    """
    if isinstance(text, bytes):
        read = parse_diff(text.decode("utf-8", "surrogateescape"))
        return dataclasses.replace(
            read,
            files=tuple(_replaced(f) for f in read.files),
            problems=tuple(_text(p) for p in read.problems),
            exact=True,
        )
    files: list[FileDiff] = []
    problems: list[str] = []
    cur: dict[str, object] | None = None
    hunks: list[Hunk] = []
    body: list[str] = []
    names: list[str] = []
    at: Hunk | None = None  # the hunk being read (its header's fields)
    hunk_body: list[str] = []
    stray = False  # a line since the last hunk (or the headers) that ends git's hunks

    def end_hunk() -> None:
        nonlocal at
        if at is not None:
            complete = not broken and not old_left and not new_left
            hunks.append(dataclasses.replace(at, lines=tuple(hunk_body), complete=complete))
            at = None

    def close() -> None:
        end_hunk()
        if cur is not None:
            files.append(FileDiff(hunks=tuple(hunks), body=tuple(body), names=tuple(names), **cur))  # type: ignore[arg-type]

    # git splits lines at "\n" only; str.splitlines() would also split at \r, \x1c, \x85...
    # and could read a symlink target shorter than the one git writes
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    state = "prose"  # prose | headers | hunk | after | binary
    old_left = new_left = 0
    broken = False
    for n, line in enumerate(lines, 1):
        if line.startswith(_DIFF_GIT) and state != "hunk":
            close()
            cur, hunks, body, names, stray = None, [], [], [], False
            parsed = _git_names(line[len(_DIFF_GIT) :])
            if parsed is None:
                problems.append(f"line {n}: cannot read the file names of {line[:120]!r}")
                state = "prose"
                continue
            cur = {"old_path": parsed[0], "new_path": parsed[1], "line": n}
            state = "headers"
            continue
        if state == "hunk":
            kind = line[:1]
            if kind in (" ", "") and (old_left or new_left):
                old_left, new_left = old_left - 1, new_left - 1
            elif kind == "-" and old_left:
                old_left -= 1
            elif kind == "+" and new_left:
                new_left -= 1
            elif kind == "\\":
                pass
            else:
                state = "after"
            if state == "hunk":
                body.append(line)
                hunk_body.append(line)
                broken = broken or old_left < 0 or new_left < 0
                if old_left <= 0 and new_left <= 0:
                    state = "after"
                continue
        if state == "after" and line.startswith("\\") and body and body[-1][:1] != "\\":
            body.append(line)  # "\ No newline at end of file" after a hunk's last line
            if stray:
                continue
            hunk_body.append(line)
            continue
        if state in ("headers", "after") and (h := _HUNK.match(line)):
            assert cur is not None
            end_hunk()
            if stray:
                cur["loose"] = True
            old_left = 1 if h.group(2) is None else int(h.group(2))
            new_left = 1 if h.group(4) is None else int(h.group(4))
            at = Hunk(
                file=str(cur["new_path"]),
                number=len(hunks) + 1,
                old_start=int(h.group(1)),
                new_start=int(h.group(3)),
                header=line.rstrip(),
                old_count=old_left,
                new_count=new_left,
                line=n,
            )
            hunk_body = []
            body.append(line)
            broken = False
            state = "hunk" if old_left or new_left else "after"
            continue
        if state == "after" or (state == "headers" and line.startswith("@@ ")):
            stray = True
        if state == "headers":
            assert cur is not None
            if mm := _MODE.match(line):
                kind, mode = mm.group(1), f"{int(mm.group(2), 8):06o}"
                if kind in ("new file mode", "new mode"):
                    cur["new_mode"] = mode
                    if kind == "new file mode":
                        cur["status"] = "A"
                else:
                    cur["old_mode"] = mode
                    if kind == "deleted file mode":
                        cur["deleted"] = True
                        cur["status"] = "D"
                continue
            if mi := _INDEX.match(line):
                if mi.group(1):
                    mode = f"{int(mi.group(1), 8):06o}"
                    cur.setdefault("new_mode", mode)
                    cur.setdefault("old_mode", mode)
                continue
            if mn := _NAME_LINE.match(line):
                names.append(_header_name(mn.group(2)))
                cur["status"] = "C" if mn.group(1).startswith("copy") else "R"
                continue
            if ms := _SIMILARITY.match(line):
                cur["similarity"] = int(ms.group(1))
                continue
            if line.startswith(("--- ", "+++ ")):
                value = _header_name(line[4:])
                if value != "/dev/null":
                    stripped = _strip_prefix(value)
                    names.append(stripped if stripped is not None else value)
                continue
            if line.startswith(("GIT binary patch", "Binary files")):
                cur["binary"] = True
                body.append(line)
                state = "binary"
                continue
            continue  # similarity lines, and prose git would stop at (conservative: go on)
        if state == "binary":
            body.append(line)
            continue
        # prose (before the first section, or after a section's hunks): a traditional diff
        # (``diff -u``, quilt) starts here, as git apply reads one (-p1)
        if traditional_start(lines, n - 1):
            old_name = _header_name(line[4:])
            new_name = _header_name(lines[n][4:])
            old_path = None if old_name == "/dev/null" else _strip_prefix(old_name)
            new_path = None if new_name == "/dev/null" else _strip_prefix(new_name)
            unreadable = (old_path is None and old_name != "/dev/null") or (
                new_path is None and new_name != "/dev/null"
            )
            if unreadable:
                problems.append(f"line {n}: cannot read the file names of {line[:120]!r} (a -p1 diff)")
                continue
            if old_path is None and new_path is None:
                problems.append(f"line {n}: a diff from /dev/null to /dev/null")
                continue
            close()
            cur, hunks, body, stray = None, [], [], False
            names = [old_path] if old_path is not None else []  # the +++ line adds the new one
            # git apply takes the new name (the old one for a deletion)
            cur = {"old_path": old_path or new_path, "new_path": new_path or old_path, "line": n}
            if old_path is None:
                cur["status"] = "A"
            elif new_path is None:
                cur["deleted"] = True
                cur["status"] = "D"
            state = "headers"  # its +++ line is a header line
    close()
    return ParsedDiff(files=tuple(files), problems=tuple(problems))


def _text(value: str) -> str:
    """A name read from bytes as it reads from text decoded with U+FFFD."""
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _replaced(f: FileDiff) -> FileDiff:
    return dataclasses.replace(
        f,
        old_path=_text(f.old_path),
        new_path=_text(f.new_path),
        names=tuple(_text(n) for n in f.names),
        hunks=tuple(dataclasses.replace(h, file=_text(h.file), header=_text(h.header)) for h in f.hunks),
    )


def parse_header(text: str, where: str) -> dict[str, str]:
    """``Key: value`` lines up to the first blank line or diff."""
    header: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith(("diff --git", "---", "From ")):
            break
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep or " " in key:
            break
        if key not in HEADER_KEYS:
            raise PatchError(f"{where}: unknown header key {key!r}{did_you_mean(key, HEADER_KEYS)}")
        header[key] = value.strip()
    return header
