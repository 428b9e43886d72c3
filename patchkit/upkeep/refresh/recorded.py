"""Recorded resolutions in a refresh (:mod:`patchkit.upkeep.rerere`): replayed when a
merge conflicts, saved at a stop (``WORKDIR/conflicts/``) and learned from what the
person staged at ``--continue``."""

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


def replay(workdir: Path, state: RefreshState, unmerged: list[str], folder: Path | None) -> bool:
    """Resolve the conflicts from recorded resolutions; True when every file was (then
    staged), else the known blocks are put in place and the rest left for the person
    (the conflicted files are saved to learn from at --continue)."""
    store = _store(state, folder)
    if store is None:
        return False
    tree = workdir / "tree"
    done: list[tuple[str, rerere.Replay]] = []
    saved: list[tuple[str, str]] = []
    for path in unmerged:
        text = read_text(tree / path)
        if text is None:
            return False
        rep = rerere.replay(text, store)
        saved.append((path, text))
        done.append((path, rep))
    # a file still holding a conflict marker after the replay is the person's to finish,
    # as --continue would refuse it
    complete = all(rep.complete and not rerere.marker_lines(rep.text) for _, rep in done)
    for path, rep in done:
        if rep.reused:
            (tree / path).write_bytes(rep.text.encode("utf-8", "surrogateescape"))
            state.reused += rep.reused
            log.info(
                f"{state.current.file}: {printable(path)}: reused a recorded resolution for "
                f"{rep.reused} of {rep.blocks} conflict(s)"
            )
    if complete:
        for path, _ in done:
            scratch_git(tree, "add", "--", path)
        return True
    _save_conflicts(workdir, state, saved)
    return False


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
            if store.put(block, lines):
                learned += 1
    if learned:
        log.info(f"recorded {learned} conflict resolution(s) in {store.root}")
    if lost:
        log.warning(f"{lost} conflict resolution(s) could not be recorded (the text around them changed)")
