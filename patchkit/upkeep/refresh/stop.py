"""Why a merge stopped, as a :class:`~patchkit.upkeep.refresh.options.RefreshStopped`:
each conflicted file's blocks (lines, the patch's hunk, a short excerpt), the upstream
commits in ``old..new`` that last touched those lines, the patches of this refresh whose
lines they are, and for a patch written on top of one that was left out, that it is a
cascade of it."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from patchkit.core.errors import SourceError
from patchkit.core.proc import RunResult
from patchkit.core.text import printable
from patchkit.git.repo import Git
from patchkit.spec.patchfile import parse_diff
from patchkit.upkeep.conflict import Block, describe_file, parse_conflicts
from patchkit.upkeep.refresh.hints import actions, outside_actions
from patchkit.upkeep.refresh.moved import gone_file
from patchkit.upkeep.refresh.options import RefreshStopped
from patchkit.upkeep.refresh.scratch import private_index, read_text, scratch_git, show
from patchkit.upkeep.refresh.state import RefreshState
from patchkit.upkeep.upstreamed import Upstreamed

__all__ = ["duplicate_stop", "empty_stop", "merge_stop", "patch_diff", "upstream_git"]


def _shown(line: str) -> str:
    """A line of a stop's detail, safe for a terminal (it quotes upstream's code and commit
    subjects): tabs kept, every other control or format character escaped."""
    return outside_actions(line, lambda part: "\t".join(map(printable, part.split("\t"))))


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
    review: Sequence[str] = (),
) -> NoReturn:
    """The stop of a merge that conflicted (``unmerged``) or did not apply; ``review``:
    what of its files that merged cleanly to look at too."""
    tree = workdir / "tree"
    p = state.patches[i]
    cmd = actions(workdir)
    quoted_tree = shlex.quote(str(tree))
    lines: list[str] = []
    upstreamed = state.upstreamed(p.file)
    if upstreamed is not None:
        lines.append(f"{p.file} is {upstreamed.describe()}: `{cmd('--skip')}` drops it")
    cascade = _cascade(workdir, state, i)
    if cascade:
        why = {d.file: d.reason for d in state.dropped}
        names = ", ".join(f"{c} ({why.get(c, 'outside its When range')})" for c in cascade)
        lines.append(
            f"a cascade: {p.file} was written on top of {names}, left out of this refresh; "
            "it does not apply without it on the old base either"
        )
    diff = patch_diff(workdir, state, i).decode("utf-8", "replace")
    git = upstream_git(state)
    named: list[str] = []
    gone_why: list[str] = []
    if unmerged:
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
                lines += gone.lines(path)
                if gone.commit is not None and gone.commit.short not in named:
                    named.append(gone.commit.short)
                gone_why.append(gone.summary() if len(unmerged) == 1 else f"{path}: {gone.summary()}")
                continue
            if text is None:
                lines.append(f"{path}: too big or unreadable to show here: see {tree / path}")
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
                blame_head=lambda path, first, count: _blame_head(workdir, state, path, first, count),
                removed_head=lambda path, gone: _removed_head(workdir, state, path, gone),
            )
            lines += flines
            for c in commits:
                if c.short not in named:
                    named.append(c.short)
        what = f"conflicts in {', '.join(unmerged)}"
        block_named = [c for c in named if not any(c in g for g in gone_why)]
        reasons = list(gone_why)
        if cascade:
            reasons.insert(0, f"a cascade of {', '.join(cascade)}")
        elif block_named:
            reasons.append(f"upstream {', '.join(block_named[:3])}")
        else:
            removed = [
                ln.split("the earlier patch ", 1)[1].split(" removed", 1)[0]
                for ln in lines
                if "the earlier patch " in ln and " removed these lines" in ln
            ]
            earlier = [
                ln.split("the earlier patch ", 1)[1].split(" did", 1)[0]
                for ln in lines
                if "the earlier patch " in ln and " did too" in ln
            ]
            if earlier:
                reasons.append(f"lines from the earlier patch {earlier[0]}")
            elif removed:
                reasons.append(f"lines the earlier patch {removed[0]} removed")
            elif not gone_why:
                reasons.append(
                    f"no commit of {state.upstream_base[:12] or 'the old base'}..{state.onto[:12]} "
                    "and no earlier patch touched these lines: the patch's own context differs"
                )
        if reasons:
            what += f" ({'; '.join(reasons)})"
        lines += [f"merged cleanly, review: {r}" for r in review]
        lines.append(f"the files with conflict markers are in {tree}")
        raise RefreshStopped(
            f"refresh stopped at {p.file}: {what}",
            kind="conflict",
            patch=p.file,
            workdir=workdir,
            files=tuple(unmerged),
            commits=tuple(named),
            cascade=tuple(cascade),
            upstreamed=upstreamed,
            detail="\n".join(map(_shown, lines)),
            hint=f"fix them, `git -C {quoted_tree} add` them, then `{cmd('--continue')}`; "
            f"`{cmd('--skip')}` drops {p.file}; `{cmd('--abort')}` stops the refresh",
        )
    text = proc.stdout + proc.stderr
    errors = [ln.removeprefix("error: ") for ln in text.splitlines() if ln.startswith("error: ")]
    # why: a patch that went in on its own base merges 3-way; one that did not was stale
    # before this sync (or its base is not known)
    stale = (
        f"it does not apply on its own base {state.upstream_base[:12]} either, not even with "
        "reduced context: it was stale before this sync"
        if state.old_root and state.upstream_base and not state.old_commits[i]
        else ""
    )
    raise RefreshStopped(
        f"refresh stopped at {p.file}: it does not apply and cannot be 3-way merged"
        + (f" ({'; '.join(x for x in (stale, errors[0] if errors else '') if x)})" if stale or errors else "")
        + (f" (a cascade of {', '.join(cascade)})" if cascade else ""),
        kind="apply",
        patch=p.file,
        workdir=workdir,
        cascade=tuple(cascade),
        errors=tuple(errors),
        upstreamed=upstreamed,
        detail="\n".join(map(_shown, [*lines, *errors[1:]])),
        hint=f"apply it by hand in {tree}, `git -C {quoted_tree} add` the files, then "
        f"`{cmd('--continue')}`; `{cmd('--skip')}` drops {p.file}; `{cmd('--abort')}` stops the refresh",
    )


def empty_stop(workdir: Path, state: RefreshState, i: int, upstreamed: Upstreamed) -> NoReturn:
    """The stop of a patch that merged to nothing."""
    p = state.patches[i]
    cmd = actions(workdir)
    raise RefreshStopped(
        f"refresh stopped at {p.file}: merged onto {state.onto[:12]} it changes nothing: "
        f"{printable(upstreamed.describe())}",
        kind="empty",
        patch=p.file,
        workdir=workdir,
        upstreamed=upstreamed,
        commits=(upstreamed.commit.short,) if upstreamed.commit else (),
        hint=f"`{cmd('--skip')}` drops it; `{cmd('--continue')}` goes on (an empty patch leaves "
        f"the series at the end); `{cmd('--abort')}` stops (a refresh started with "
        "--drop-upstreamed drops such patches without stopping)",
    )


def duplicate_stop(
    workdir: Path, state: RefreshState, i: int, dups: Sequence[str], files: Sequence[str]
) -> NoReturn:
    """The stop of a clean merge that adds lines upstream added meanwhile a second time
    (``dups``: what the lines are and where)."""
    tree = workdir / "tree"
    p = state.patches[i]
    known = state.upstreamed(p.file)
    cmd = actions(workdir)
    detail = [*((f"{p.file} is {known.describe()}",) if known else ()), *dups]
    raise RefreshStopped(
        f"refresh stopped at {p.file}: the 3-way merge was clean but adds lines upstream "
        "added meanwhile a second time",
        kind="duplicate",
        patch=p.file,
        workdir=workdir,
        files=tuple(files),
        upstreamed=known,
        detail="\n".join(map(_shown, [*detail, f"the merged files are in {tree} (staged)"])),
        hint=f"remove the second copy, `git -C {shlex.quote(str(tree))} add` the file, then "
        f"`{cmd('--continue')}`; `{cmd('--skip')}` drops {p.file}",
    )
