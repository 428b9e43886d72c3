"""What a refresh says when it stops: the conflict blocks of a file, trimmed, located in
the patch and blamed on the upstream commits that last touched those lines.

A conflicted file (``git cherry-pick`` with ``merge.conflictStyle=diff3``) is read into
text segments and :class:`Block` s (ours = upstream plus the patches before, base = the
patch's old context, theirs = the patch). :func:`describe_file` turns the blocks of one
file into a few lines for the stop message: where the block is (file, lines, the patch's
hunk), the upstream commit(s) in ``old..new`` that last touched the ours side (``git
blame`` on that range, through :mod:`patchkit.git.runner`), and a short excerpt of each
side (at most :data:`MAX_SIDE_LINES` lines, the rest counted, with the file's path for the
whole of it: real blocks reach thousands of lines).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from patchkit.core.errors import SourceError
from patchkit.git.repo import CommitInfo, Git
from patchkit.spec.patchfile import Hunk, parse_diff

__all__ = [
    "MAX_SIDE_LINES",
    "Block",
    "Culprit",
    "added_runs",
    "describe_file",
    "find_run",
    "hunk_headers",
    "last_touched",
    "parse_conflicts",
    "removed_in",
]

MAX_SIDE_LINES = 6  # lines shown of each side of a block
MAX_BLOCKS_SHOWN = 4  # blocks described per file (the rest are counted)
_BLAME_LINES = 400  # the most lines blamed for one block (the range is capped)

_OURS_MARKER = "<<<<<<< "
_BASE_MARKER = "||||||| "
_SIDES_MARKER = "======="
_THEIRS_MARKER = ">>>>>>> "


@dataclasses.dataclass(frozen=True, kw_only=True)
class Block:
    """One conflict block; line numbers are 1-based in the conflicted file."""

    start: int  # the ``<<<<<<<`` line
    end: int  # the ``>>>>>>>`` line
    ours: tuple[str, ...]
    base: tuple[str, ...] | None  # None: no diff3 base section
    theirs: tuple[str, ...]

    @property
    def size(self) -> int:
        return self.end - self.start + 1


def parse_conflicts(text: str) -> list[str | Block]:
    """The file as text lines (``str``, newline kept) and blocks; ``[text]``-only when
    there is no complete block (an unterminated marker is text)."""
    lines = text.splitlines(keepends=True)
    out: list[str | Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(_OURS_MARKER) or line.rstrip("\r\n") == "<<<<<<<":
            block = _read_block(lines, i)
            if block is not None:
                out.append(block)
                i = block.end
                continue
        out.append(line)
        i += 1
    return out


def _read_block(lines: list[str], at: int) -> Block | None:
    ours: list[str] = []
    base: list[str] | None = None
    theirs: list[str] = []
    part = "ours"
    for j in range(at + 1, len(lines)):
        raw = lines[j]
        bare = raw.rstrip("\r\n")
        if part == "ours" and (raw.startswith(_BASE_MARKER) or bare == "|||||||"):
            part, base = "base", []
            continue
        if part in ("ours", "base") and bare == _SIDES_MARKER:
            part = "theirs"
            continue
        if part == "theirs" and (raw.startswith(_THEIRS_MARKER) or bare == ">>>>>>>"):
            return Block(
                start=at + 1,
                end=j + 1,
                ours=tuple(ours),
                base=None if base is None else tuple(base),
                theirs=tuple(theirs),
            )
        if raw.startswith(_OURS_MARKER):
            return None  # a nested or broken block: leave it as text
        if part == "ours":
            ours.append(raw)
        elif part == "base":
            assert base is not None
            base.append(raw)
        else:
            theirs.append(raw)
    return None


# -- the patch's side -------------------------------------------------------------------------
def _hunks(diff: str, path: str) -> list[Hunk]:
    """The hunks of the file ``diff`` writes at ``path`` (its new path)."""
    return [h for f in parse_diff(diff).files if f.new_path == path for h in f.hunks]


def hunk_headers(diff: str, path: str) -> list[tuple[str, list[str]]]:
    """(``@@`` header, added lines) of each hunk of ``path`` in ``diff``."""
    return [(h.header, list(h.added)) for h in _hunks(diff, path)]


def added_runs(diff: str, path: str) -> list[list[str]]:
    """The runs of consecutive added lines of ``path`` in ``diff`` (without the ``+``)."""
    return [list(run) for h in _hunks(diff, path) for run in h.added_runs]


def find_run(lines: Sequence[str], run: Sequence[str]) -> list[int]:
    """0-based starts of every occurrence of ``run`` in ``lines`` (compared without
    trailing whitespace)."""
    if not run:
        return []
    want = [r.rstrip() for r in run]
    have = [ln.rstrip() for ln in lines]
    first = want[0]
    return [
        i for i in range(len(have) - len(want) + 1) if have[i] == first and have[i : i + len(want)] == want
    ]


def _which_hunk(block: Block, hunks: list[tuple[str, list[str]]]) -> str:
    theirs = {ln.strip() for ln in block.theirs if ln.strip()}
    best, score = "", 0
    for n, (header, added) in enumerate(hunks, 1):
        s = sum(1 for a in added if a.strip() and a.strip() in theirs)
        if s > score:
            best, score = f"hunk #{n} of {len(hunks)} `{header.split('@@')[1].strip()}`", s
    return best


# -- who touched it upstream ------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class Culprit:
    commit: CommitInfo
    lines: int  # how many of the blamed lines it last touched


def last_touched(git: Git, old: str, new: str, path: str, first: int, count: int) -> list[Culprit]:
    """The commits in ``old..new`` that last touched lines ``first..first+count-1`` (1-based)
    of ``path`` at ``new``, most lines first (``git blame --porcelain old..new``); [] when
    none did or the file is not there."""
    if count <= 0 or first <= 0:
        return []
    count = min(count, _BLAME_LINES)
    try:
        out = git.run(
            "blame",
            "--porcelain",
            "-L",
            f"{first},+{count}",
            f"{old}..{new}",
            "--",
            path,
        )
    except SourceError:
        return []
    per: dict[str, int] = {}
    boundary: set[str] = set()
    cur = ""
    for line in out.splitlines():
        m = re.match(r"^([0-9a-f]{40}) \d+ \d+", line)
        if m:
            cur = m.group(1)
            continue
        if line == "boundary":
            boundary.add(cur)
        elif line.startswith("\t") and cur:
            per[cur] = per.get(cur, 0) + 1
    shas = [s for s in per if s not in boundary]
    if not shas:
        return []
    infos = git.commit_infos(shas)
    return sorted(
        (Culprit(commit=infos[s], lines=per[s]) for s in shas), key=lambda c: (-c.lines, c.commit.sha)
    )


def removed_in(git: Git, old: str, new: str, path: str, lines: Sequence[str]) -> CommitInfo | None:
    """The latest commit of ``old..new`` that changed how often the most distinctive of
    ``lines`` occurs in ``path`` (``git log -S``): the one that removed it, when the
    lines are gone; None when none did."""
    picks = sorted((ln.strip() for ln in lines if len(ln.strip()) >= 4), key=len, reverse=True)
    if not picks:
        return None
    try:
        sha = git.run(
            "log", "--no-show-signature", "--format=%H", "-1", "-S", picks[0], f"{old}..{new}", "--", path
        ).strip()
    except SourceError:
        return None
    return git.commit_infos([sha])[sha] if sha else None


def _new_lines(new_text: str, block: Block, before: Sequence[str], after: Sequence[str]) -> tuple[int, int]:
    """Where the block's ours side (or, when empty, its surroundings) lies in upstream's new
    file: (first line, count), 1-based; (0, 0) when it cannot be found."""
    lines = new_text.splitlines(keepends=True)
    if block.ours:
        hits = find_run(lines, block.ours)
        if hits:
            return hits[0] + 1, len(block.ours)
        # the first and last lines, then what lies between
        head, tail = find_run(lines, block.ours[:1]), find_run(lines, block.ours[-1:])
        for h in head:
            for t in tail:
                if h <= t <= h + len(block.ours) * 2:
                    return h + 1, t - h + 1
    if before[-2:]:
        hits = find_run(lines, before[-2:])
        if hits:
            return hits[0] + 1, len(before[-2:]) + len(after[:2])
    if after[:2]:
        hits = find_run(lines, after[:2])
        if hits:
            return hits[0] + 1, len(after[:2])
    return 0, 0


def _side(label: str, lines: Sequence[str]) -> list[str]:
    if not lines:
        return [f"    {label}: (nothing)"]
    shown = [f"    {label} | {ln.rstrip()[:160]}" for ln in lines[:MAX_SIDE_LINES]]
    if len(lines) > MAX_SIDE_LINES:
        shown.append(f"    {label} | … {len(lines) - MAX_SIDE_LINES} more lines")
    return shown


def describe_file(
    *,
    git: Git | None,
    old: str,
    new: str,
    path: str,
    full_path: Path,
    text: str,
    new_text: str | None,
    patch_diff: str,
    head_text: str | None = None,
    blame_head: Callable[[str, int, int], list[str]] | None = None,
    removed_head: Callable[[str, Sequence[str]], list[str]] | None = None,
) -> tuple[list[str], list[CommitInfo]]:
    """The stop message's lines for one conflicted file, and the upstream commits named.

    Where no upstream commit in ``old..new`` touched a block's lines, ``blame_head(path,
    first, count)`` (lines of ``head_text``, the file the merge started from) names what
    did: the earlier patches of this refresh (their commits carry the patch's name).
    Where the upstream side is empty (the lines the patch changes are gone) and nothing
    touched what is there, what removed them is named: ``removed_head(path, lines)``
    (the earlier patches of this refresh, as resolved), else the upstream commit."""
    parts = parse_conflicts(text)
    blocks = [(n, p) for n, p in enumerate(parts) if isinstance(p, Block)]
    hunks = hunk_headers(patch_diff, path)
    lines: list[str] = []
    named: list[CommitInfo] = []
    if not blocks:
        return [f"{path}: not merged (no conflict markers: deleted or added on one side)"], []
    for k, (n, block) in enumerate(blocks[:MAX_BLOCKS_SHOWN], 1):
        before = [p for p in parts[max(0, n - 3) : n] if isinstance(p, str)]
        after = [p for p in parts[n + 1 : n + 4] if isinstance(p, str)]
        where = _which_hunk(block, hunks)
        head = f"{path}:{block.start}-{block.end} (conflict {k} of {len(blocks)}, {block.size} lines"
        head += f"; the patch's {where})" if where else ")"
        lines.append(head)
        culprits: list[Culprit] = []
        if git is not None and new_text is not None:
            first, count = _new_lines(new_text, block, before, after)
            culprits = last_touched(git, old, new, path, first, count)
        for c in culprits[:3]:
            lines.append(
                f"  upstream {c.commit.short} {c.commit.subject[:100]} "
                f"(last touched {c.lines} of these lines)"
            )
            named.append(c.commit)
        if len(culprits) > 3:
            lines.append(f"  … and {len(culprits) - 3} more upstream commits")
        who: list[str] = []
        if blame_head is not None and head_text is not None and block.ours:
            first, count = _new_lines(head_text, block, before, after)
            who = blame_head(path, first, count) if count else []
        if who:
            lines.append(f"  the earlier patch {', '.join(who[:3])} did too (as refreshed here)")
        gone = [ln for ln in (block.base or ()) if ln.strip() and ln not in block.ours]
        if not culprits and not who and gone:
            removers = removed_head(path, gone) if removed_head is not None else []
            remover = None if removers or git is None or not old else removed_in(git, old, new, path, gone)
            if removers:
                lines.append(
                    f"  the earlier patch {', '.join(removers[:3])} removed these lines (as resolved here)"
                )
            elif remover is not None:
                lines.append(f"  upstream {remover.short} {remover.subject[:100]} removed these lines")
                named.append(remover)
                culprits = [Culprit(commit=remover, lines=len(gone))]
        if not culprits:
            lines.append(f"  no upstream commit in {old[:12]}..{new[:12]} last touched these lines")
        lines += _side("upstream", block.ours)
        lines += _side("patch   ", block.theirs)
        if block.size > 2 * MAX_SIDE_LINES + 3:
            lines.append(f"    (the whole block: {full_path}:{block.start})")
    if len(blocks) > MAX_BLOCKS_SHOWN:
        lines.append(f"{path}: … {len(blocks) - MAX_BLOCKS_SHOWN} more conflicts in {full_path}")
    return lines, named
