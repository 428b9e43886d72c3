"""Why a merge stopped, as a :class:`~patchkit.upkeep.refresh.options.RefreshStop` record
(raised in a :class:`~patchkit.upkeep.refresh.options.RefreshStopped`): each conflicted
file's blocks (lines, the patch's hunk, a short excerpt), the upstream commits in
``old..new`` that last touched those lines, the patches of this refresh whose lines they
are, and for a patch written on top of one that was left out, that it is a cascade of it.
The CLI says it in words (``patchkit/cli/problems/refresh.py``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from patchkit.core.errors import SourceError
from patchkit.core.proc import RunResult
from patchkit.git.repo import Git
from patchkit.spec.patchfile import parse_diff
from patchkit.upkeep.conflict import Block, describe_file, parse_conflicts
from patchkit.upkeep.refresh.moved import Gone, gone_file
from patchkit.upkeep.refresh.options import (
    CascadeOf,
    ConflictedFile,
    Duplicate,
    EarlierAdded,
    EarlierRemoved,
    FileGone,
    FileReport,
    GoneFile,
    LeftOut,
    OwnContext,
    RefreshStop,
    RefreshStopped,
    StaleBefore,
    StopReason,
    UnreadableFile,
    UpstreamTouched,
)
from patchkit.upkeep.refresh.review import Finding
from patchkit.upkeep.refresh.scratch import private_index, read_text, scratch_git, show
from patchkit.upkeep.refresh.state import RefreshState
from patchkit.upkeep.upstreamed import Upstreamed

__all__ = ["duplicate_stop", "empty_stop", "merge_stop", "patch_diff", "upstream_git"]


def patch_diff(workdir: Path, state: RefreshState, i: int) -> bytes:
    """Patch ``i``'s diff as it was made (on the old base), or its file's bytes."""
    tree = workdir / "tree"
    old = state.old_commits[i]
    if old:
        return scratch_git(
            tree,
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--binary",
            "--no-renames",
            f"{old}^",
            old,
            binary=True,
        ).data
    return (workdir / "patches" / f"{i:04d}.patch").read_bytes()


def upstream_git(state: RefreshState) -> Git | None:
    try:
        return Git(Path(state.repo)) if state.upstream_base else None
    except SourceError:
        return None


def _cascade(workdir: Path, state: RefreshState, i: int) -> list[str]:
    """The left-out patches (dropped, or outside When) patch ``i`` was written on top of and
    does not apply without: it conflicts because of them. [] when it applies on the old
    base without them (its conflicts are its own) or nothing is known."""
    if state.independent or not state.old_root or not state.old_commits[i]:
        return []  # an independent patch was written on the base alone: no cascades
    pdir = workdir / "patches"

    def files(j: int) -> set[str]:
        return set(parse_diff((pdir / f"{j:04d}.patch").read_bytes().decode("utf-8", "replace")).paths)

    mine = files(i)
    out_idx = [
        j
        for j in range(i)
        if state.commits[j] is None and state.old_commits[j] is not None and files(j) & mine
    ]
    if not out_idx:
        return []
    index = private_index(workdir / "tree", workdir / "cascade.index")

    def applies_without(left_out: set[int]) -> bool:
        index.read_tree(state.old_root)
        for j in range(i):
            if state.old_commits[j] is None or j in left_out:
                continue
            index.apply(pdir / f"{j:04d}.patch")
        return index.apply(pdir / f"{i:04d}.patch", check_only=True).ok

    try:
        if applies_without(set(out_idx)):
            return []
        culprits = [j for j in out_idx if applies_without(set(out_idx) - {j})]
        return [state.patches[j].file for j in (culprits or out_idx)]
    finally:
        index.index.unlink(missing_ok=True)


def _blame_head(workdir: Path, state: RefreshState, path: str, first: int, count: int) -> list[str]:
    """The patches of this refresh (their commits' names) that last touched those lines of
    ``path`` at the scratch HEAD, most lines first; the new base's lines are upstream's."""
    tree = workdir / "tree"
    proc = scratch_git(
        tree, "blame", "--porcelain", "-L", f"{first},+{min(count, 400)}", "HEAD", "--", path, check=False
    )
    if not proc.ok:
        return []
    per: dict[str, int] = {}
    names: dict[str, str] = {}
    cur = ""
    for line in proc.stdout.splitlines():
        m = re.match(r"^([0-9a-f]{40}) \d+ \d+", line)
        if m:
            cur = m.group(1)
        elif line.startswith("summary ") and cur:
            names[cur] = line.removeprefix("summary ")
        elif line.startswith("\t") and cur:
            per[cur] = per.get(cur, 0) + 1
    files = {p.name: p.file for p in state.patches} | {p.file: p.file for p in state.patches}
    ranked = sorted((c for c in per if names.get(c) in files), key=lambda c: -per[c])
    return list(dict.fromkeys(files[names[c]] for c in ranked))


def _removed_head(workdir: Path, state: RefreshState, path: str, lines: Sequence[str]) -> list[str]:
    """The patches of this refresh (as merged or resolved here) that removed the most
    distinctive of ``lines`` from ``path`` (``git log -S`` from the new base to HEAD)."""
    picks = sorted((ln.strip() for ln in lines if len(ln.strip()) >= 4), key=len, reverse=True)
    if not picks:
        return []
    proc = scratch_git(
        workdir / "tree",
        "log",
        "--format=%s",
        "-S",
        picks[0],
        f"{state.base}..HEAD",
        "--",
        path,
        check=False,
    )
    if not proc.ok:
        return []
    files = {p.name: p.file for p in state.patches} | {p.file: p.file for p in state.patches}
    return list(dict.fromkeys(files[s] for s in proc.stdout.splitlines() if s in files))


def merge_stop(
    workdir: Path,
    state: RefreshState,
    i: int,
    proc: RunResult,
    unmerged: list[str],
    *,
    review: Sequence[Finding] = (),
) -> NoReturn:
    """The stop of a merge that conflicted (``unmerged``) or did not apply; ``review``:
    what of its files that merged cleanly to look at too."""
    tree = workdir / "tree"
    p = state.patches[i]
    upstreamed = state.upstreamed(p.file)
    cascade = _cascade(workdir, state, i)
    why = {d.file: d.reason for d in state.dropped}
    left_out = tuple(LeftOut(file=c, dropped=why.get(c)) for c in cascade)
    diff = patch_diff(workdir, state, i).decode("utf-8", "replace")
    git = upstream_git(state)
    if not unmerged:
        said = proc.stdout + proc.stderr
        errors = [ln.removeprefix("error: ") for ln in said.splitlines() if ln.startswith("error: ")]
        # why: a patch that went in on its own base merges 3-way; one that did not was stale
        # before this sync (or its base is not known)
        stale = bool(state.old_root and state.upstream_base and not state.old_commits[i])
        raise RefreshStopped(
            RefreshStop(
                kind="apply",
                patch=p.file,
                tree=tree,
                onto=state.onto,
                cascade=left_out,
                upstreamed=upstreamed,
                errors=tuple(errors),
                reasons=(
                    *((StaleBefore(base=state.upstream_base),) if stale else ()),
                    *((CascadeOf(files=tuple(cascade)),) if cascade else ()),
                ),
            ),
            workdir=workdir,
        )
    named: list[str] = []
    gone_shown: set[str] = set()  # the commits the deleted files' reasons name already
    reports: list[FileReport] = []
    gones: list[tuple[str, Gone]] = []
    added: list[tuple[str, ...]] = []  # per block, the earlier patches that added its lines
    removed: list[tuple[str, ...]] = []  # per block, those that removed them

    def blame_head(path: str, first: int, count: int) -> list[str]:
        who = _blame_head(workdir, state, path, first, count)
        if who:
            added.append(tuple(who[:3]))
        return who

    def removed_head(path: str, lines: Sequence[str]) -> list[str]:
        who = _removed_head(workdir, state, path, lines)
        if who:
            removed.append(tuple(who[:3]))
        return who

    for path in unmerged:
        text = read_text(tree / path)
        if (text is None and not (tree / path).exists()) or (
            text is not None and not any(isinstance(b, Block) for b in parse_conflicts(text))
        ):
            # no markers: one side deleted (or renamed, or split) the file
            gone = gone_file(
                git,
                state.upstream_base,
                state.onto,
                path,
                diff,
                upstream_has=show(tree, f"{state.base}:{path}") is not None,
            )
            reports.append(GoneFile(path=path, gone=gone))
            gones.append((path, gone))
            if gone.commit is not None:
                if gone.commit.short not in named:
                    named.append(gone.commit.short)
                if gone.side != "unknown":
                    gone_shown.add(gone.commit.short)
            continue
        if text is None:
            reports.append(UnreadableFile(path=path))
            continue
        flines, commits = describe_file(
            git=git,
            old=state.upstream_base,
            new=state.onto,
            path=path,
            full_path=tree / path,
            text=text,
            new_text=show(tree, f"{state.base}:{path}"),
            patch_diff=diff,
            head_text=show(tree, f"HEAD:{path}"),
            blame_head=blame_head,
            removed_head=removed_head,
        )
        reports.append(ConflictedFile(path=path, blocks=tuple(flines)))
        for c in commits:
            if c.short not in named:
                named.append(c.short)
    block_named = [c for c in named if c not in gone_shown]
    reasons: list[StopReason] = [
        FileGone(path=None if len(unmerged) == 1 else path, gone=gone) for path, gone in gones
    ]
    if cascade:
        reasons.insert(0, CascadeOf(files=tuple(cascade)))
    elif block_named:
        reasons.append(UpstreamTouched(commits=tuple(block_named[:3])))
    elif added:
        reasons.append(EarlierAdded(patches=added[0]))
    elif removed:
        reasons.append(EarlierRemoved(patches=removed[0]))
    elif not gones:
        reasons.append(OwnContext(old=state.upstream_base, new=state.onto))
    raise RefreshStopped(
        RefreshStop(
            kind="conflict",
            patch=p.file,
            tree=tree,
            onto=state.onto,
            files=tuple(unmerged),
            commits=tuple(named),
            cascade=left_out,
            upstreamed=upstreamed,
            reports=tuple(reports),
            reasons=tuple(reasons),
            review=tuple(review),
        ),
        workdir=workdir,
    )


def empty_stop(workdir: Path, state: RefreshState, i: int, upstreamed: Upstreamed) -> NoReturn:
    """The stop of a patch that merged to nothing."""
    raise RefreshStopped(
        RefreshStop(
            kind="empty",
            patch=state.patches[i].file,
            tree=workdir / "tree",
            onto=state.onto,
            upstreamed=upstreamed,
            commits=(upstreamed.commit.short,) if upstreamed.commit else (),
        ),
        workdir=workdir,
    )


def duplicate_stop(workdir: Path, state: RefreshState, i: int, dups: Sequence[Duplicate]) -> NoReturn:
    """The stop of a clean merge that adds lines upstream added meanwhile a second time."""
    p = state.patches[i]
    raise RefreshStopped(
        RefreshStop(
            kind="duplicate",
            patch=p.file,
            tree=workdir / "tree",
            onto=state.onto,
            files=tuple(dict.fromkeys(d.path for d in dups)),
            upstreamed=state.upstreamed(p.file),
            duplicates=tuple(dups),
        ),
        workdir=workdir,
    )
