"""A failed build's compile errors mapped to the patches (:func:`compile_errors`): the
GCC/Clang ``FILE:LINE:COL: error:`` lines of its log that point into lines a patch's hunks
cover, per patch, with each hunk's lines moved by the later patches' hunks; and, for a
patch the refresh listed as "merged cleanly, review" because it calls functions whose
declaration upstream changed, an error in a file it patches that names one of them."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from patchkit.spec.patchfile import parse_diff
from patchkit.spec.series import Patch

__all__ = ["CompileError", "PatchErrors", "compile_errors"]

_DIAG = re.compile(
    r"^(?P<file>[^\s:][^:\n]*?):(?P<line>\d+):(?:(?P<col>\d+):)? (?:fatal )?error: (?P<msg>.*)$"
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompileError:
    file: str  # relative to the source tree
    line: int
    col: int | None
    message: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class PatchErrors:
    patch: str
    errors: tuple[CompileError, ...]


def _moved(line: int, hunks: Sequence[tuple[int, int, int, int]]) -> int:
    """Where line ``line`` of a file is after hunks (old start, count, new start, count)."""
    delta = 0
    for os_, oc, ns, nc in hunks:
        if line >= os_ + oc:
            delta = (ns + nc) - (os_ + oc)
        elif line >= os_:
            return min(ns + (line - os_), ns + max(nc - 1, 0))
        else:
            break
    return line + delta


def _owned_lines(patches: Sequence[Patch]) -> dict[str, list[tuple[str, int, int]]]:
    """Per file, the line ranges (first, last, in the tree after every patch) that each
    patch's hunks cover (their post-image: context and added lines), moved by the later
    patches' hunks. The series is refreshed: each hunk sits where its header says."""
    owned: dict[str, list[tuple[str, int, int]]] = {}
    for p in patches:
        parsed = parse_diff(p.read_verified().decode("utf-8", "replace"))
        for f in parsed.files:
            hunks = [(h.old_start, h.old_count, h.new_start, h.new_count) for h in f.hunks]
            if f.old_path != f.new_path and f.old_path in owned:
                owned[f.new_path] = owned.pop(f.old_path)
            ranges = owned.setdefault(f.new_path, [])
            ranges[:] = [(name, _moved(a, hunks), _moved(b, hunks)) for name, a, b in ranges]
            ranges += [(p.name, ns, ns + nc - 1) for _os, _oc, ns, nc in hunks if nc > 0]
    return owned


def compile_errors(
    log: str,
    patches: Sequence[Patch],
    *,
    src: Path,
    build: Path | None = None,
    review: Mapping[str, Sequence[str]] | None = None,
) -> tuple[PatchErrors, ...]:
    """The compiler errors (``FILE:LINE:COL: error: ...``, GCC's and Clang's form) of a
    failed build's ``log`` that point into a line a patch's hunk covers, per patch (series
    order). FILE is taken relative to ``src`` (the source tree; a relative FILE is read
    from ``build``, where the compiler ran). ``review``: per patch file, the functions it
    calls whose declaration upstream changed; an error in a file that patch changes whose
    message names one of them is that patch's too (the call may lie outside its hunks)."""
    owned = _owned_lines(patches)
    by_file = {p.filename: p.name for p in patches}
    watch = [
        (by_file[f], [re.compile(rf"(?<![\w]){re.escape(n)}(?![\w])") for n in names])
        for f, names in (review or {}).items()
        if f in by_file and names
    ]
    found: dict[str, list[CompileError]] = {}
    seen: set[tuple[str, int, int | None, str]] = set()
    for raw in log.splitlines():
        m = _DIAG.match(raw.strip())
        if m is None:
            continue
        rel = _relative(m.group("file"), src, build)
        if rel is None or rel not in owned:
            continue
        line = int(m.group("line"))
        col = int(m.group("col")) if m.group("col") else None
        key = (rel, line, col, m.group("msg"))
        if key in seen:
            continue
        seen.add(key)
        err = CompileError(file=rel, line=line, col=col, message=m.group("msg").strip())
        mine = [n for n, a, b in owned[rel] if a <= line <= b]
        touching = {n for n, _a, _b in owned[rel]}
        mine += [n for n, pats in watch if n in touching and any(p.search(err.message) for p in pats)]
        for name in dict.fromkeys(mine):
            found.setdefault(name, []).append(err)
    return tuple(PatchErrors(patch=p.name, errors=tuple(found[p.name])) for p in patches if p.name in found)


def _relative(file: str, src: Path, build: Path | None) -> str | None:
    """``file`` relative to the source tree, or None when it lies outside."""
    path = Path(file)
    if not path.is_absolute():
        if build is None:
            return Path(os.path.normpath(path)).as_posix()
        path = build / path
    try:
        return Path(os.path.normpath(path)).relative_to(Path(os.path.normpath(src))).as_posix()
    except ValueError:
        return None
