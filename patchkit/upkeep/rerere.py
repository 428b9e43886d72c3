"""Recorded resolutions: a conflict resolved by hand once is resolved the same way again.

A conflict block is keyed by the file it is in, the patch whose merge made it, and its
content: the sha256 of the path, the patch's file name and its two sides (upstream's and
the patch's, in sorted order so that a swapped merge finds it too; trailing blanks and the
diff3 base section left out, as are the markers' labels). Unlike git's rerere, which keys
by content alone, the same two sides in another file or another patch are another
conflict: a resolution is replayed only where it was made (:func:`replay` may carry one
through from the earlier patches it is given, and says so). A :class:`Store` keeps one
small JSON record per key in the cache (``<cache>/rerere/``): the path, the patch, the
sides and the text the block became; records of version 1 (keyed by content alone: they
do not say where they were made) are never replayed, and are trimmed as any other.
Records are written atomically, each at most :data:`MAX_RECORD` bytes, at most
:data:`MAX_RECORDS` of them (the oldest go first); a damaged or foreign record is
ignored, never trusted.

:func:`learn` finds what each block of a conflicted file became in the file the person
staged (the text around the blocks anchors them); :func:`replay` puts known resolutions
in place of the blocks they match.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

from patchkit.core.fs import atomic_write_json
from patchkit.upkeep.conflict import Block, parse_conflicts

__all__ = ["MAX_RECORD", "MAX_RECORDS", "Replay", "Store", "block_key", "learn", "marker_lines", "replay"]

MAX_RECORD = 1 << 20  # bytes of one record
MAX_RECORDS = 2000  # records kept; the oldest are removed beyond that
_VERSION = 2


def marker_lines(text: str | Sequence[str]) -> list[int]:
    """The (1-based) lines that are conflict markers as ``git diff --check`` sees them:
    seven ``<``, ``=``, ``>`` or ``|`` followed by a blank or the end of the line."""
    lines = text.splitlines(keepends=True) if isinstance(text, str) else text
    out: list[int] = []
    for n, line in enumerate(lines, 1):
        if len(line) >= 8 and line[0] in "<=>|" and line[:7] == line[0] * 7 and line[7].isspace():
            out.append(n)
        elif len(line) == 7 and line == line[0] * 7 and line[0] in "<=>|":
            out.append(n)  # the last line, without its newline
    return out


def _norm(lines: Sequence[str]) -> str:
    return "\n".join(ln.rstrip() for ln in lines)


def block_key(block: Block, path: str, patch: str) -> str:
    a, b = sorted((_norm(block.ours), _norm(block.theirs)))
    return hashlib.sha256(
        f"patchkit-rerere-{_VERSION}\0{path}\0{patch}\0{a}\0{b}".encode("utf-8", "surrogateescape")
    ).hexdigest()


class Store:
    """The recorded resolutions under ``root`` (created on the first record)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def _usable(self) -> bool:
        """The store's folder is a real folder (or not there yet): a link planted in its
        place (or as any record) never redirects a read, a write or the trimming."""
        return not self.root.is_symlink() and (self.root.is_dir() or not self.root.exists())

    def get(self, block: Block, path: str, patch: str) -> list[str] | None:
        """The resolution recorded for ``block`` in ``path`` at ``patch``'s merge."""
        key = block_key(block, path, patch)
        record = self._path(key)
        try:
            if (
                not self._usable()
                or record.is_symlink()
                or not record.is_file()
                or record.stat().st_size > MAX_RECORD
            ):
                return None
            data = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError, RecursionError):
            return None
        if (
            not isinstance(data, dict)
            or data.get("version") != _VERSION
            or data.get("key") != key
            or data.get("path") != path
            or data.get("patch") != patch
        ):
            return None
        sides, res = data.get("sides"), data.get("resolution")
        if (
            not isinstance(sides, list)
            or len(sides) != 2
            or not all(isinstance(s, str) for s in sides)
            or not isinstance(res, list)
            or not all(isinstance(r, str) for r in res)
        ):
            return None
        if sorted((_norm(block.ours), _norm(block.theirs))) != sides:
            return None  # another conflict with the same hash: never
        if marker_lines(res):
            return None  # a resolution that is still a conflict is none
        try:
            os.utime(record)  # recently used: kept longest
        except OSError:
            pass
        return list(res)

    def put(self, block: Block, resolution: Sequence[str], path: str, patch: str) -> bool:
        """Record ``resolution`` for ``block`` in ``path`` at ``patch``'s merge; False when it
        is too big to keep."""
        key = block_key(block, path, patch)
        record = {
            "version": _VERSION,
            "key": key,
            "path": path,
            "patch": patch,
            "sides": sorted((_norm(block.ours), _norm(block.theirs))),
            "resolution": list(resolution),
        }
        if len(json.dumps(record).encode("utf-8", "surrogateescape")) > MAX_RECORD or marker_lines(
            resolution
        ):
            return False
        if not self._usable():
            return False
        self.root.mkdir(parents=True, exist_ok=True)
        if not self._usable():
            return False
        atomic_write_json(self._path(key), record)
        self._trim()
        return True

    def _trim(self) -> None:
        try:
            if not self._usable():
                return
            records = [
                p for p in self.root.iterdir() if p.suffix == ".json" and p.is_file() and not p.is_symlink()
            ]
            if len(records) <= MAX_RECORDS:
                return
            records.sort(key=lambda p: p.stat().st_mtime)
            for p in records[: len(records) - MAX_RECORDS]:
                p.unlink(missing_ok=True)
        except OSError:
            pass


def learn(conflicted: str, resolved: str) -> tuple[list[tuple[Block, list[str]]], int]:
    """What each block of ``conflicted`` became in ``resolved``: (block, its lines) for
    those the unchanged text around them places, and how many could not be placed."""
    parts = parse_conflicts(conflicted)
    if not any(isinstance(p, Block) for p in parts):
        return [], 0
    b = resolved.splitlines(keepends=True)
    # the text lines of ``conflicted`` with a token per block; matched against ``resolved``
    seq: list[str] = [p if isinstance(p, str) else f"\0block{n}\0" for n, p in enumerate(parts)]
    # common prefix and suffix first: the matcher only sees what lies between
    lo = 0
    while lo < len(seq) and lo < len(b) and seq[lo] == b[lo]:
        lo += 1
    hi = 0
    while hi < len(seq) - lo and hi < len(b) - lo and seq[-1 - hi] == b[-1 - hi]:
        hi += 1
    where: dict[int, int] = {i: i for i in range(lo)}
    where.update({len(seq) - 1 - k: len(b) - 1 - k for k in range(hi)})
    sm = difflib.SequenceMatcher(None, seq[lo : len(seq) - hi], b[lo : len(b) - hi], autojunk=False)
    for m in sm.get_matching_blocks():
        for k in range(m.size):
            where[lo + m.a + k] = lo + m.b + k
    found: list[tuple[Block, list[str]]] = []
    lost = 0
    for n, p in enumerate(parts):
        if not isinstance(p, Block):
            continue
        if n > 0 and (not isinstance(parts[n - 1], str) or n - 1 not in where):
            lost += 1
            continue
        if n + 1 < len(parts) and (not isinstance(parts[n + 1], str) or n + 1 not in where):
            lost += 1
            continue
        start = where[n - 1] + 1 if n > 0 else 0
        end = where[n + 1] if n + 1 < len(parts) else len(b)
        if end < start:
            lost += 1
            continue
        found.append((p, b[start:end]))
    return found, lost


@dataclasses.dataclass(frozen=True, kw_only=True)
class Replay:
    text: str  # the file with every known resolution in place
    reused: int  # blocks resolved from the store (recorded for this file and patch)
    blocks: int  # blocks in the file
    carried: int = 0  # blocks resolved as an earlier patch's same conflict was
    carried_from: tuple[str, ...] = ()  # those earlier patches

    @property
    def complete(self) -> bool:
        return self.blocks > 0 and self.reused + self.carried == self.blocks


def replay(conflicted: str, store: Store, *, path: str, patch: str, carry_from: Sequence[str] = ()) -> Replay:
    """``conflicted`` (the file ``path`` as ``patch``'s merge left it) with the resolutions
    recorded for its blocks in place; a block with none recorded at ``patch`` takes the one
    recorded for the same block in the same file at the latest of ``carry_from`` (the
    earlier patches the caller allows) that has one."""
    parts = parse_conflicts(conflicted)
    out: list[str] = []
    reused = blocks = carried = 0
    sources: list[str] = []
    lines = conflicted.splitlines(keepends=True)
    for p in parts:
        if isinstance(p, str):
            out.append(p)
            continue
        blocks += 1
        res = store.get(p, path, patch)
        if res is not None:
            reused += 1
            out.extend(res)
            continue
        for earlier in reversed(carry_from):
            res = store.get(p, path, earlier)
            if res is not None:
                carried += 1
                sources.append(earlier)
                out.extend(res)
                break
        else:
            out.extend(lines[p.start - 1 : p.end])
    return Replay(
        text="".join(out),
        reused=reused,
        blocks=blocks,
        carried=carried,
        carried_from=tuple(dict.fromkeys(sources)),
    )
