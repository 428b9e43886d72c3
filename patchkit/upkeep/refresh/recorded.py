"""Recorded resolutions in a refresh (:mod:`patchkit.upkeep.rerere`): replayed when a
merge conflicts (the resolution recorded for this patch's conflict in this file, or the
one of an earlier patch of this refresh for the same conflict in the same file, carried
through: each replay says which), saved at a stop (``WORKDIR/conflicts/``) and learned
from what the person staged at ``--continue``."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Sequence
from pathlib import Path

from patchkit.core.fs import atomic_write_bytes
from patchkit.core.log import log
from patchkit.core.text import printable
from patchkit.upkeep import rerere
from patchkit.upkeep.refresh.scratch import read_text, scratch_git, show
from patchkit.upkeep.refresh.state import RefreshState

__all__ = ["clear_stop", "learn", "replay"]


def _store(state: RefreshState, folder: Path | None) -> rerere.Store | None:
    """The store the caller names, when this refresh keeps records (never a folder the
    state file names: a tampered state cannot send records or deletions elsewhere)."""
    return rerere.Store(folder) if state.rerere and folder is not None else None


def _carry_from(state: RefreshState) -> list[str]:
    """The earlier patches of this refresh (merged, in series order) whose resolution of
    the same conflict in the same file may be carried through to the current one."""
    return [p.file for p, c in zip(state.patches, state.commits, strict=False) if c]


def replay(workdir: Path, state: RefreshState, unmerged: list[str], folder: Path | None) -> list[str]:
    """Resolve the conflicts from recorded resolutions (this patch's in this file, or an
    earlier patch's of the same conflict there); the files still unmerged. A file every
    block of which is resolved is staged (it is no conflict any more); the others get
    the known blocks in place and are left for the person (saved to learn from at
    --continue)."""
    store = _store(state, folder)
    if store is None:
        return unmerged
    tree = workdir / "tree"
    patch = state.current.file
    carry = _carry_from(state)
    left: list[str] = []
    saved: list[tuple[str, str]] = []
    for path in unmerged:
        text = read_text(tree / path)
        if text is None:
            left.append(path)
            continue
        rep = rerere.replay(text, store, path=path, patch=patch, carry_from=carry)
        if rep.reused or rep.carried:
            (tree / path).write_bytes(rep.text.encode("utf-8", "surrogateescape"))
            state.reused += rep.reused + rep.carried
            where = f"{printable(patch)}: {printable(path)}"
            if rep.reused:
                log.info(
                    f"{where}: reused a recorded resolution for {rep.reused} of {rep.blocks} conflict(s) "
                    f"(recorded for {printable(patch)}'s {printable(path)})"
                )
            if rep.carried:
                log.info(
                    f"{where}: carried the resolution of {printable(', '.join(rep.carried_from))}'s same "
                    f"conflict through ({rep.carried} of {rep.blocks} conflict(s))"
                )
        # a file still holding a conflict marker after the replay is the person's to finish,
        # as --continue would refuse it
        if rep.complete and not rerere.marker_lines(rep.text):
            scratch_git(tree, "add", "--", path)
        else:
            left.append(path)
            saved.append((path, text))
    if left:
        _save_conflicts(workdir, state, saved)
    return left


def _save_conflicts(workdir: Path, state: RefreshState, files: Sequence[tuple[str, str]]) -> None:
    """Keep each conflicted file as the merge left it, to learn its resolution from at
    --continue (conflicts/<sha256 of the path>.txt: first line the path)."""
    cdir = workdir / "conflicts"
    cdir.mkdir(exist_ok=True)
    state.conflicts = []
    for path, text in files:
        name = hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest() + ".txt"
        atomic_write_bytes(cdir / name, (path + "\n" + text).encode("utf-8", "surrogateescape"))
        state.conflicts.append(name)


def clear_stop(state: RefreshState, workdir: Path) -> None:
    state.stop_kind = ""
    state.conflicts = []
    shutil.rmtree(workdir / "conflicts", ignore_errors=True)


def learn(state: RefreshState, workdir: Path, folder: Path | None) -> None:
    """Record how the person resolved each saved conflict (from the staged files)."""
    store = _store(state, folder)
    if store is None or not state.conflicts:
        return
    tree = workdir / "tree"
    learned = lost = 0
    for name in state.conflicts:
        raw = read_text(workdir / "conflicts" / name)
        if raw is None or "\n" not in raw:
            continue
        path, conflicted = raw.split("\n", 1)
        resolved = show(tree, f":{path}")
        if resolved is None:
            continue
        placed, missed = rerere.learn(conflicted, resolved)
        lost += missed
        for block, lines in placed:
            if store.put(block, lines, path, state.current.file):
                learned += 1
    if learned:
        log.info(f"recorded {learned} conflict resolution(s) in {store.root}")
    if lost:
        log.warning(f"{lost} conflict resolution(s) could not be recorded (the text around them changed)")
