"""``git apply``'s hunk matching, in Python, for `check`'s fast path.

`check --range` asks the same question thousands of times: does patch K apply to these
file contents, and with which offsets? A process per question is most of the time it
takes, so the common case is answered here, the way ``git apply`` (apply.c,
``apply_one_fragment`` / ``find_pos`` / ``match_fragment``) answers it without
``--unidiff-zero``, ``-C`` or whitespace options:

- a hunk's preimage (context and ``-`` lines, a line before ``\\ No newline at end of
  file`` without its newline) must match the file byte for byte;
- the search starts at the hunk's *new* start line (earlier hunks of the file already
  moved it) and tries that line, then one after, one before, two after, ...; the first
  match wins and its distance is the offset git reports;
- a hunk whose old start is 0 or 1 must match at the beginning, one without trailing
  context at the end; lines an earlier hunk of the same patch wrote are never matched
  again;
- a failing hunk leaves the file as it was (``--reject``), so every failing hunk of a
  patch is known; the patch applies only when none fails.

What this does not model (renames, copies, binary patches, mode changes, symlinks,
submodules, a path named twice, a diff it reads differently from :mod:`spec.patchfile`)
makes :func:`prepare` return None, and the caller asks ``git apply`` itself. A test
compares both on randomised edits (tests/integration/upkeep/test_textapply.py), and
``benchmarks/check_bench.py --verify`` on a real queue.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
from collections.abc import Mapping, Sequence

from patchkit.spec.patchfile import Conflict, Hunk, Offset, ParsedDiff, parse_diff

__all__ = [
    "FileCache",
    "FileContent",
    "PatchText",
    "Result",
    "TextHunk",
    "apply",
    "blob_id",
    "force",
    "prepare",
    "significant",
]


def blob_id(data: bytes) -> str:
    """git's object id of a blob with these bytes (so an unchanged file keeps its id)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclasses.dataclass(frozen=True, kw_only=True)
class FileContent:
    mode: str  # "100644" / "100755"
    oid: str  # blob_id(data)
    data: bytes


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextHunk:
    number: int  # 1-based within its file
    header: str
    old_start: int
    new_start: int
    pre: tuple[bytes, ...]  # preimage lines (context and "-"), with their newlines
    post: tuple[bytes, ...]  # postimage lines (context and "+")
    leading: int  # context lines before the first change
    trailing: int  # context lines after the last change
    added: tuple[bytes, ...]  # the "+" lines alone

    def reversed(self) -> TextHunk:
        return dataclasses.replace(
            self, old_start=self.new_start, new_start=self.old_start, pre=self.post, post=self.pre
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextFile:
    path: str
    status: str  # "M", "A" (created), "D" (deleted)
    new_mode: str  # the mode a created file gets
    hunks: tuple[TextHunk, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PatchText:
    files: tuple[TextFile, ...]

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Result:
    ok: bool
    offsets: tuple[Offset, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    # the files after the patch (ok only): path -> content, None = deleted
    post: Mapping[str, FileContent | None] = dataclasses.field(default_factory=dict)


def _text_hunk(h: Hunk) -> TextHunk | None:
    """The model's hunk as bytes (from an exact parse); None when git would not read it
    as it stands (its lines do not match its counts, or it starts with a marker)."""
    if not h.complete or (h.lines and h.lines[0][:1] == "\\"):
        return None
    kinds = [ln[:1] or " " for ln in h.lines if ln[:1] != "\\"]
    changed = [j for j, k in enumerate(kinds) if k != " "]
    leading = changed[0] if changed else len(kinds)
    trailing = len(kinds) - 1 - changed[-1] if changed else len(kinds)
    new_kinds = [k for k in kinds if k != "-"]
    return TextHunk(
        number=h.number,
        header=h.header,
        old_start=h.old_start,
        new_start=h.new_start,
        pre=tuple(_bytes(ln) for ln in h.image("old")),
        post=tuple(_bytes(ln) for ln in h.image("new")),
        leading=leading,
        trailing=trailing,
        added=tuple(_bytes(ln) for ln, k in zip(h.image("new"), new_kinds) if k == "+"),
    )


def _bytes(line: str) -> bytes:
    return line.encode("utf-8", "surrogateescape")


def prepare(data: bytes, parsed: ParsedDiff | None = None) -> PatchText | None:
    """The patch's text hunks as bytes, when every file is a plain text change (modified,
    created or deleted, no mode change) this module models; else None (ask git).
    ``parsed``: ``parse_diff(data)`` when the caller has it (a parse from text is read
    again from ``data``, for its exact bytes)."""
    if parsed is None or not parsed.exact:
        parsed = parse_diff(data)
    if parsed.problems or not parsed.files:
        return None
    files = parsed.files
    if len({f.new_path for f in files} | {f.old_path for f in files}) != len(files):
        return None  # a rename, or a path named twice
    out: list[TextFile] = []
    for f in files:
        if f.binary or f.loose or f.status not in ("M", "A", "D") or f.old_path != f.new_path:
            return None
        if f.status == "M" and f.old_mode is not None and f.new_mode != f.old_mode:
            return None
        mode = f.new_mode if f.status == "A" else f.old_mode
        if mode is not None and mode not in ("100644", "100755"):
            return None
        hunks = [_text_hunk(h) for h in f.hunks]
        if any(h is None for h in hunks):
            return None
        kept = [h for h in hunks if h is not None]
        if f.status == "A" and any(h.pre for h in kept):
            return None
        out.append(
            TextFile(path=f.new_path, status=f.status, new_mode=f.new_mode or "100644", hunks=tuple(kept))
        )
    return PatchText(files=tuple(out))


def _lines(data: bytes) -> list[bytes]:
    """The file's lines as git splits them: at ``\\n`` only (not ``\\r``), each with its
    newline (the last may have none)."""
    return io.BytesIO(data).readlines()


def _find(
    img: list[bytes],
    patched: Sequence[bool],
    pre: Sequence[bytes],
    line: int,
    match_beginning: bool,
    match_end: bool,
) -> int:
    """find_pos + match_fragment: the line where ``pre`` applies, -1 if nowhere."""
    nr, npre = len(img), len(pre)
    if npre > nr:
        return -1

    def fits(i: int) -> bool:
        if i < 0 or i + npre > nr or (match_beginning and i) or (match_end and i + npre != nr):
            return False
        if npre == 0:
            return True
        if any(patched[i : i + npre]):
            return False
        for j in range(npre - 1):
            if img[i + j] != pre[j]:
                return False
        last, want = img[i + npre - 1], pre[-1]
        if last == want:
            return True
        # git compares whitespace-blind line hashes, then memcmp over the preimage's bytes:
        # a last line without its newline matches a line that only adds blanks to it,
        # except where the hunk must end the file
        return not match_end and last.startswith(want) and last[len(want) :].isspace()

    if match_beginning or match_end:  # git starts there, and only there can it match
        cand = 0 if match_beginning else nr - npre
        return cand if fits(cand) else -1
    if line > nr:
        line = nr
    if not npre:
        return line
    first = pre[0]
    if npre == 1 and not first.endswith(b"\n"):
        # a lone last line without its newline also matches a line that adds blanks
        cands = [i for i, x in enumerate(img) if x.startswith(first)]
        cands.sort(key=lambda i: (abs(i - line), i < line))
        return next((i for i in cands if fits(i)), -1)
    # walk out from `line` as git does (after before before at the same distance), jumping
    # with list.index (C speed) between the places of the preimage's longest full line
    a = max((j for j in range(npre) if pre[j].endswith(b"\n")), key=lambda j: len(pre[j]))
    anchor = pre[a]
    top = min(line + a, nr)
    before = img[:top][::-1]  # before[j] is img[top - 1 - j]
    fwd = _next(img, anchor, line + a)
    back = _next(before, anchor, 0)
    while fwd >= 0 or back >= 0:
        f = fwd - a if fwd >= 0 else -1
        b = top - 1 - back - a if back >= 0 else -1
        if b < 0:
            back = -1
        if f >= 0 and (b < 0 or f - line <= line - b):
            if fits(f):
                return f
            fwd = _next(img, anchor, fwd + 1)
        elif b >= 0:
            if fits(b):
                return b
            back = _next(before, anchor, back + 1)
    return -1


def _next(seq: list[bytes], item: bytes, start: int) -> int:
    try:
        return seq.index(item, start)
    except ValueError:
        return -1


def _apply_hunks(
    data: bytes, path: str, hunks: Sequence[TextHunk]
) -> tuple[bytes, list[Offset], list[Conflict]]:
    if any(not h.pre or not h.post or (not h.pre[-1].endswith(b"\n") and len(h.pre) == 1) for h in hunks):
        return _apply_hunks_walk(data, path, hunks)
    return _apply_hunks_indexed(data, path, hunks)


_BLOCK = 8192
_INDEX: dict[bytes, list[int]] = {}  # a file's newline counts at each block start
_INDEX_KEPT = 64


def _line_index(data: bytes) -> list[int]:
    """How many newlines precede each ``_BLOCK``-byte block of ``data`` (and the total,
    last): a byte offset's line number then costs a count within one block."""
    got = _INDEX.get(data)
    if got is None:
        got = [0]
        for i in range(0, len(data), _BLOCK):
            got.append(got[-1] + data.count(b"\n", i, i + _BLOCK))
        if len(_INDEX) >= _INDEX_KEPT:
            del _INDEX[next(iter(_INDEX))]
        _INDEX[data] = got
    return got


def _apply_hunks_indexed(
    data: bytes, path: str, hunks: Sequence[TextHunk]
) -> tuple[bytes, list[Offset], list[Conflict]]:
    """The same as :func:`_apply_hunks_walk`, on the file's bytes in its own line numbers.

    Lines an applied hunk wrote can never match again, and every hunk here keeps at least
    one line, so a hunk can only match lines of the file as it was, none of them consumed
    by an earlier hunk: candidates are the places of the preimage's longest line in the
    original bytes (bytes.find), each mapped to where it is now; a candidate is compared
    with bytes.startswith. Nothing is split into lines, nothing copied but the result.
    """
    nl = 0x0A
    index = _line_index(data)
    nr0 = index[-1] + (1 if data and not data.endswith(b"\n") else 0)
    nr = nr0
    # (first line, end line) in the original, (first byte, end byte), the lines put there
    edits: list[tuple[int, int, int, int, bytes, int]] = []
    offsets: list[Offset] = []
    conflicts: list[Conflict] = []

    def now(q: int) -> int:  # where original line q is now
        return q + sum(npost - (qe - qs) for qs, qe, _s, _e, _p, npost in edits if qe <= q)

    for h in hunks:
        pre, npre = h.pre, len(h.pre)
        pos = h.new_start - 1 if h.new_start else 0
        match_beginning, match_end = h.old_start <= 1, h.trailing == 0
        line = min(pos, nr)
        # the longest full line of the preimage is the likeliest to be rare
        a = max((j for j in range(npre) if pre[j].endswith(b"\n")), key=lambda j: len(pre[j]))
        anchor, before = pre[a], sum(len(pre[j]) for j in range(a))
        partial = not pre[-1].endswith(b"\n")
        head = b"".join(pre[:-1]) if partial else b"".join(pre)
        found: list[tuple[int, bool, int, int, int]] = []  # (distance, before, now, q, byte)
        at = data.find(anchor)
        while at >= 0:
            if at == 0 or data[at - 1] == nl:
                block = at // _BLOCK
                q = index[block] + data.count(b"\n", block * _BLOCK, at) - a
                off = at - before
                if q >= 0 and off >= 0 and q + npre <= nr0:
                    c = now(q)
                    if not ((match_beginning and c) or (match_end and c + npre != nr)):
                        found.append((abs(c - line), c < line, c, q, off))
            at = data.find(anchor, at + 1)
        found.sort()
        hit = None
        for _d, _b, c, q, off in found:
            if any(qs < q + npre and q < qe for qs, qe, _s, _e, _p, _n in edits):
                continue  # an earlier hunk wrote some of these lines
            if (off and data[off - 1] != nl) or not data.startswith(head, off):
                continue
            stop = off + len(head)
            if partial:  # the file's last line, or one that only adds blanks to it
                eol = data.find(b"\n", stop)
                stop = len(data) if eol < 0 else eol + 1
                last, want = data[off + len(head) : stop], pre[-1]
                if last != want and (
                    match_end or not last.startswith(want) or not last[len(want) :].isspace()
                ):
                    continue
            hit = (c, q, off, stop)
            break
        if hit is None:
            conflicts.append(
                Conflict(file=path, hunk=h.number, header=h.header, reason="context does not match")
            )
            continue
        c, q, off, stop = hit
        if c != pos:
            offsets.append(Offset(file=path, hunk=h.number, lines=c - pos))
        edits.append((q, q + npre, off, stop, b"".join(h.post), len(h.post)))
        nr += len(h.post) - npre
    parts: list[bytes] = []
    prev = 0
    for _qs, _qe, first, stop, post, _n in sorted(edits, key=lambda e: e[2]):
        parts += (data[prev:first], post)
        prev = stop
    parts.append(data[prev:])
    return b"".join(parts), offsets, conflicts


def _apply_hunks_walk(
    data: bytes, path: str, hunks: Sequence[TextHunk]
) -> tuple[bytes, list[Offset], list[Conflict]]:
    """Hunk after hunk on the file's lines, searched as git's find_pos walks."""
    img = _lines(data)
    patched = [False] * len(img)
    offsets: list[Offset] = []
    conflicts: list[Conflict] = []
    for h in hunks:
        pos = h.new_start - 1 if h.new_start else 0
        at = _find(img, patched, h.pre, pos, h.old_start <= 1, h.trailing == 0)
        if at < 0:
            conflicts.append(
                Conflict(file=path, hunk=h.number, header=h.header, reason="context does not match")
            )
            continue
        if at != pos:
            offsets.append(Offset(file=path, hunk=h.number, lines=at - pos))
        img[at : at + len(h.pre)] = h.post
        patched[at : at + len(h.pre)] = [True] * len(h.post)
    return b"".join(img), offsets, conflicts


# what one file of a patch gave on one content: (path, blob id, reverse) -> post, offsets,
# conflicts; a caller keeps one per patch, so that a file that did not change since the
# patch's last check is not matched again
FileCache = dict[tuple[str, str, bool], tuple[FileContent | None, list[Offset], list[Conflict]]]


def apply(
    patch: PatchText,
    files: Mapping[str, FileContent | None],
    *,
    reverse: bool = False,
    cache: FileCache | None = None,
) -> Result:
    """``git apply [-R]`` of ``patch`` to ``files`` (path -> content, None = absent)."""
    offsets: list[Offset] = []
    conflicts: list[Conflict] = []
    post: dict[str, FileContent | None] = {}
    for f in patch.files:
        cur = files.get(f.path)
        status = {"A": "D", "D": "A"}.get(f.status, "M") if reverse else f.status
        hunks = [h.reversed() for h in f.hunks] if reverse else list(f.hunks)
        if status == "A":
            if cur is not None:
                conflicts.append(
                    Conflict(file=f.path, hunk=None, header="", reason="already exists in working directory")
                )
                continue
            data = b"".join(ln for h in hunks for ln in h.post)
            post[f.path] = FileContent(mode=f.new_mode, oid=blob_id(data), data=data)
            continue
        if cur is None:
            conflicts.append(Conflict(file=f.path, hunk=None, header="", reason="No such file or directory"))
            continue
        if status == "D":
            want = b"".join(ln for h in hunks for ln in h.pre)
            if cur.data != want:
                if not hunks:
                    conflicts.append(
                        Conflict(
                            file=f.path, hunk=None, header="", reason="removal patch leaves file contents"
                        )
                    )
                else:
                    h = hunks[0]
                    conflicts.append(
                        Conflict(file=f.path, hunk=h.number, header=h.header, reason="context does not match")
                    )
                continue
            post[f.path] = None
            continue
        key = (f.path, cur.oid, reverse)
        got = cache.get(key) if cache is not None else None
        if got is None:
            data, offs, confl = _apply_hunks(cur.data, f.path, hunks)
            after = None if confl else FileContent(mode=cur.mode, oid=blob_id(data), data=data)
            got = (after, offs, confl)
            if cache is not None:
                if len(cache) >= 4 * len(patch.files) + 8:
                    del cache[next(iter(cache))]
                cache[key] = got
        after, offs, confl = got
        if not reverse:
            offsets += offs
        conflicts += confl
        if after is not None:
            post[f.path] = dataclasses.replace(after, mode=cur.mode)
    if conflicts:
        return Result(ok=False, conflicts=tuple(conflicts))
    return Result(ok=True, offsets=tuple(offsets), post=post)


_FUZZ = 3  # context lines a forced hunk may leave unmatched at each end


def _fuzzed(h: TextHunk, cut: int) -> TextHunk | None:
    """The hunk with up to ``cut`` context lines dropped at each end (GNU patch's fuzz);
    None when nothing of it would be left to place."""
    top, bot = min(cut, h.leading), min(cut, h.trailing)
    if not top and not bot:
        return None
    pre = h.pre[top : len(h.pre) - bot]
    post = h.post[top : len(h.post) - bot]
    if not pre:
        return None
    return dataclasses.replace(
        h,
        pre=pre,
        post=post,
        old_start=h.old_start if h.old_start <= 1 else max(2, h.old_start + top),
        new_start=h.new_start + top,
        leading=h.leading - top,
        trailing=h.trailing if h.trailing == 0 else max(1, h.trailing - bot),
    )


def force(patch: PatchText, files: Mapping[str, FileContent | None]) -> dict[str, FileContent | None]:
    """The files as far as ``patch`` can be put in: each hunk where it applies, else with
    up to :data:`_FUZZ` lines of its context unmatched at each end, else left out (a file
    to change that is absent stays absent). What a patch that conflicts would most likely
    leave once refreshed, so that a later patch can be tried on top of it."""
    post: dict[str, FileContent | None] = {}
    for f in patch.files:
        cur = files.get(f.path)
        if f.status == "A":
            if cur is None:
                data = b"".join(ln for h in f.hunks for ln in h.post)
                post[f.path] = FileContent(mode=f.new_mode, oid=blob_id(data), data=data)
            continue
        if cur is None:
            continue
        if f.status == "D":
            post[f.path] = None
            continue
        # every hunk that applies, at once; then each that did not, with fuzz
        data, _offs, failed = _apply_hunks(cur.data, f.path, f.hunks)
        left = [h for h in f.hunks if h.number in {c.hunk for c in failed}]
        for cut in range(1, _FUZZ + 1):
            tries = [t for h in left if (t := _fuzzed(h, cut)) is not None]
            if not tries:
                break
            data, _offs, failed = _apply_hunks(data, f.path, tries)
            still = {c.hunk for c in failed}
            left = [h for h in left if h.number in still]
        if data != cur.data:
            post[f.path] = FileContent(mode=cur.mode, oid=blob_id(data), data=data)
    return post


def significant(line: bytes) -> bytes | None:
    """A line as a cascade test compares it (without its indentation and newline), or None
    when it is too common to tell anything (blank, a brace, a lone keyword)."""
    s = line.strip()
    return s if len(s) >= 4 else None
