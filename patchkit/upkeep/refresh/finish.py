"""The end of a refresh: every patch file's diff replaced by its commit's (header, message
and signature kept; the diffstat is git's own, from the scratch repository), dropped
patches out of ``patches/series`` (their files removed), the series' sha256 lines updated,
and with ``move_pin`` each recipe's ``upstream.commit`` moved. Every new patch file is
checked as the series loader checks it, then all files are written together or none."""

from __future__ import annotations

import os
import re
from pathlib import Path

from patchkit.core.errors import PatchError, RecipeError
from patchkit.core.fs import atomic_write_many, sha256_bytes, sha256_file
from patchkit.spec.diffstat import diffstat
from patchkit.spec.patchdoc import replace_diff, split_parts
from patchkit.spec.series import parse_patch, rewrite_series
from patchkit.upkeep.refresh.options import RefreshResult
from patchkit.upkeep.refresh.problems import SourceChanged
from patchkit.upkeep.refresh.scratch import rmtree, scratch_git
from patchkit.upkeep.refresh.state import DropRecord, RefreshState
from patchkit.upkeep.upstreamed import Upstreamed

__all__ = ["check_sources_unchanged", "finish", "move_recipe_pin", "toml_string"]

# the diff a patch file gets: the same whatever the user's diff configuration says
_DIFF = (
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--no-renames",
    "--src-prefix=a/",
    "--dst-prefix=b/",
)
MAIL_STAT_WIDTH = 72  # git format-patch's --stat width (MAIL_DEFAULT_WRAP)


def check_sources_unchanged(state: RefreshState, workdir: Path) -> None:
    dropped = state.dropped_files
    for p in state.patches:
        if p.file in dropped:
            continue  # it leaves the series: its bytes do not matter
        path = Path(state.patches_dir) / p.file
        if not path.is_file() or sha256_file(path) != p.sha256:
            raise PatchError(problem=SourceChanged(path=path, workdir=workdir))


def _remove(workdir: Path) -> None:
    """The work folder goes in one step (renamed to a hidden name beside it, then removed):
    a kill while its many files are deleted leaves no half folder at ``workdir`` that would
    stop the next refresh there; until the rename, ``--continue`` finishes (again)."""
    gone = workdir.with_name(f".{workdir.name}.removed-{os.getpid()}")
    try:
        workdir.rename(gone)
    except OSError:  # a mount point, say: removed where it is
        gone = workdir
    rmtree(gone)


def _holds(path: Path, data: bytes) -> bool:
    try:
        return path.read_bytes() == data
    except OSError:
        return False


def _git_stat(tree: Path, prev: str, commit: str) -> bytes:
    """git's diffstat block of ``prev..commit`` as format-patch writes it (file lines,
    totals, summary lines)."""
    return scratch_git(
        tree, "diff", *_DIFF, f"--stat={MAIL_STAT_WIDTH}", "--summary", prev, commit, "--", binary=True
    ).data


def _with_stat(old: bytes, diff: bytes, stat: bytes) -> bytes:
    """``old`` with its diff replaced and, where it has a diffstat block, git's ``stat``
    in its place (:func:`patchkit.spec.patchdoc.replace_diff` writes one computed from
    the diff alone, wrong for binary files)."""
    new = replace_diff(old, diff)
    computed = diffstat(diff.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
    if not computed or computed == stat:
        return new
    parts = split_parts(new)
    if parts.stat.count(computed) != 1:
        return new
    return parts.head + parts.message + parts.stat.replace(computed, stat) + parts.diff + parts.tail


def finish(workdir: Path, state: RefreshState, *, again: bool = False) -> RefreshResult:
    """Write the refreshed series (and the pins) all at once, then remove the work folder.

    ``again``: a ``--continue`` found every patch done, so an earlier run was killed while
    writing the result. patches/ and the recipes are then as before (core.fs put a batch
    that was cut short back) or already the result (the kill came after the writes): then
    the same result is computed, nothing needs writing, and only the folder goes."""
    try:
        check_sources_unchanged(state, workdir)
        changed: PatchError | None = None
    except PatchError as e:
        if not again:
            raise
        changed = e
    tree = workdir / "tree"
    pdir = Path(state.patches_dir)
    prev = state.base
    writes: dict[Path, bytes] = {}
    updated: list[str] = []
    unchanged: list[str] = []
    outside_when: list[str] = []
    new_hashes: dict[str, str] = {}
    for p, commit in zip(state.patches, state.commits, strict=True):
        if commit is None:
            if p.file not in state.dropped_files:
                outside_when.append(p.file)
            continue
        diff = scratch_git(tree, "diff", *_DIFF, "--binary", "-U3", prev, commit, binary=True).data
        stat = _git_stat(tree, prev, commit)
        if not state.independent:  # each independent patch is its diff from the new base
            prev = commit
        if not diff.strip():
            state.dropped.append(_empty_drop(p.file, state.onto, state.upstreamed(p.file)))
            continue
        old = (pdir / p.file).read_bytes()
        new = _with_stat(old, diff, stat)
        if new == old:
            unchanged.append(p.file)
            continue
        # what the next `series` / `build` reads: checked as the loader checks it (fields,
        # paths, symlinks) before anything is written
        parse_patch(new, pdir / p.file, sha256_bytes(new), where=f"the refreshed {p.file}")
        updated.append(p.file)
        writes[pdir / p.file] = new
        new_hashes[p.file] = sha256_bytes(new)
    dropped_files = state.dropped_files
    if new_hashes or dropped_files:
        series = pdir / "series"
        writes[series] = rewrite_series(series.read_text(encoding="utf-8"), new_hashes, dropped_files).encode(
            "utf-8"
        )
    pin_moved = False
    if state.move_pin:
        for recipe in state.recipes:  # every recipe's pin or none: one atomic_write_many
            rpath = Path(recipe)
            text = rpath.read_text(encoding="utf-8")
            new_text = move_recipe_pin(text, state.onto, where=str(rpath))
            if new_text != text:
                writes[rpath] = new_text.encode("utf-8")
                pin_moved = True
    if changed is not None and any(not _holds(path, data) for path, data in writes.items()):
        raise changed  # neither the sources the refresh started from nor its result
    atomic_write_many(writes)
    for f in sorted(dropped_files):  # out of the series now: their files go too
        (pdir / f).unlink(missing_ok=True)
    _remove(workdir)
    return RefreshResult(
        onto=state.onto,
        updated=tuple(updated),
        unchanged=tuple(unchanged),
        outside_when=tuple(outside_when),
        pin_moved=pin_moved,
        dropped=tuple(d.dropped() for d in state.dropped),
        upstream=tuple(f.upstreamed() for f in state.found if f.file not in dropped_files),
        reused=state.reused,
        review=state.reviews(),
    )


def _empty_drop(file: str, onto: str, u: Upstreamed | None) -> DropRecord:
    """A patch whose diff on top of ``onto`` is empty: it leaves the series."""
    c = u.commit if u else None
    return DropRecord(
        file=file,
        reason=f"empty on top of {onto[:12]}" + (f": {u.describe()}" if u else ": upstream has the change"),
        sha=c.sha if c else "",
        date=c.date if c else "",
        subject=c.subject if c else "",
    )


# -- the recipe's pin ----------------------------------------------------------------------
_TABLE = re.compile(r"^\s*\[\s*([A-Za-z0-9_.\"-]+)\s*\]")
_COMMIT_LINE = re.compile(r"^(\s*commit\s*=\s*)([\"'])([0-9a-f]{40})\2(.*)$", re.DOTALL)
_COMMIT = re.compile(r"[0-9a-f]{40}")
_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string: quoted, with every quote, backslash and control
    character escaped (a value can never end the line or start a table)."""
    out = []
    for c in value:
        if c in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[c])
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def move_recipe_pin(text: str, commit: str, *, where: str = "recipe") -> str:
    """The recipe text with ``[upstream] commit`` set to ``commit`` (40 hex digits);
    every other byte kept."""
    if not _COMMIT.fullmatch(commit):
        raise RecipeError(f"{where}: the pin can only move to a commit's 40 hex digits, not {commit[:60]!r}")
    lines = text.splitlines(keepends=True)
    table = None
    for n, line in enumerate(lines):
        m = _TABLE.match(line)
        if m:
            table = m.group(1).strip('"')
            continue
        if table == "upstream":
            c = _COMMIT_LINE.match(line)
            if c:
                # a literal string stays one (the same bytes); the value goes through the writer
                value = f"'{commit}'" if c.group(2) == "'" else toml_string(commit)
                lines[n] = c.group(1) + value + c.group(4)
                return "".join(lines)
    raise RecipeError(f'{where}: no `commit = "<40 hex>"` line in [upstream] to move')
