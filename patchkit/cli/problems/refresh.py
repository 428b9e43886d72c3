"""The words of a refresh's stop (:class:`~patchkit.upkeep.refresh.options.RefreshStop`):
its one line, the detail under it (each conflicted file's blocks, a deleted file's new
homes, the lines a clean merge doubled, what to review) and the next steps. The next
steps name the refresh's actions as placeholders (:func:`~patchkit.upkeep.refresh.hints.action`);
``patchkit/cli/refresh.py`` writes them as the command lines the user types."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from patchkit.core.errors import Problem
from patchkit.core.text import printable
from patchkit.upkeep.refresh.hints import action, outside_actions
from patchkit.upkeep.refresh.options import ConflictedFile, Duplicate, GoneFile, RefreshStop
from patchkit.upkeep.refresh.problems import (
    DropAloneLater,
    DropRefreshedAlready,
    ForeignInWorkdir,
    MarkersLeft,
    NoRefreshHere,
    NotStaged,
    RefreshBusy,
    RefreshInProgress,
    RefreshJustFinished,
    ResolutionRefused,
    SourceChanged,
    StateUnusable,
    StillUnmerged,
    TreeMoved,
    WorkdirNotEmpty,
)

__all__ = ["RENDERERS", "refresh_words", "stop_detail", "stop_words"]


def _shown(line: str) -> str:
    """A line of a stop's detail, safe for a terminal (it quotes upstream's code and commit
    subjects): tabs kept, every other control or format character escaped."""
    return outside_actions(line, lambda part: "\t".join(map(printable, part.split("\t"))))


def _duplicate(d: Duplicate) -> list[str]:
    c = d.commit
    who = f" (upstream {c.short} {c.subject[:80]} added them)" if c else ""
    where = ", ".join(str(n) for n in d.at)
    return [
        f"{d.path}:{d.at[0]}: {len(d.lines)} lines the patch adds are there twice now (lines {where}){who}",
        *(f"    | {r.rstrip()[:160]}" for r in d.lines[:6]),
    ]


def stop_detail(p: RefreshStop) -> str:
    """The lines under the stop's one line."""
    lines: list[str] = []
    if p.kind == "duplicate":
        if p.upstreamed is not None:
            lines.append(f"{p.patch} is {p.upstreamed.describe()}")
        for d in p.duplicates:
            lines += _duplicate(d)
        lines.append(f"the merged files are in {p.tree} (staged)")
        return "\n".join(map(_shown, lines))
    if p.kind not in ("conflict", "apply"):
        return ""
    if p.upstreamed is not None:
        lines.append(f"{p.patch} is {p.upstreamed.describe()}: `{action('--skip')}` drops it")
    if p.cascade:
        names = ", ".join(f"{c.file} ({c.dropped or 'outside its When range'})" for c in p.cascade)
        lines.append(
            f"a cascade: {p.patch} was written on top of {names}, left out of this refresh; "
            "it does not apply without it on the old base either"
        )
    if p.kind == "apply":
        return "\n".join(map(_shown, [*lines, *p.errors[1:]]))
    for report in p.reports:
        if isinstance(report, GoneFile):
            lines += report.gone.lines(report.path)
        elif isinstance(report, ConflictedFile):
            lines += report.blocks
        else:
            lines.append(f"{report.path}: too big or unreadable to show here: see {p.tree / report.path}")
    lines += [f"merged cleanly, review: {f.text}" for f in p.review]
    lines.append(f"the files with conflict markers are in {p.tree}")
    return "\n".join(map(_shown, lines))


def _hint(p: RefreshStop) -> str:
    tree = shlex.quote(str(p.tree))
    cont, skip, abort = action("--continue"), action("--skip"), action("--abort")
    if p.kind == "conflict":
        return (
            f"fix them, `git -C {tree} add` them, then `{cont}`; `{skip}` drops {p.patch}; "
            f"`{abort}` stops the refresh"
        )
    if p.kind == "apply":
        return (
            f"apply it by hand in {p.tree}, `git -C {tree} add` the files, then `{cont}`; "
            f"`{skip}` drops {p.patch}; `{abort}` stops the refresh"
        )
    if p.kind == "empty":
        return (
            f"`{skip}` drops it; `{cont}` goes on (an empty patch leaves the series at the end); "
            f"`{abort}` stops (a refresh started with --drop-upstreamed drops such patches "
            "without stopping)"
        )
    return f"remove the second copy, `git -C {tree} add` the file, then `{cont}`; `{skip}` drops {p.patch}"


def _stop(p: RefreshStop) -> tuple[str, str]:
    return p.summary, _hint(p)


def stop_words(p: RefreshStop) -> tuple[str, str, str]:
    """(message, detail, hint) of a stop, the next steps as placeholders."""
    return p.summary, stop_detail(p), _hint(p)


RENDERERS: dict[type[Problem], Callable[[Any], tuple[str, str]]] = {
    RefreshStop: _stop,
}


def _resolve_steps(tree: Path) -> str:
    return f"git -C {shlex.quote(str(tree))}"


def _words(p: Problem) -> tuple[str, str]:
    cont, skip, abort = action("--continue"), action("--skip"), action("--abort")
    abort_hint = f"run `{abort}` and start again"
    match p:
        case RefreshJustFinished(workdir=w):
            return f"another refresh just finished in {w}", "run the command again"
        case RefreshBusy(workdir=w):
            return (
                f"another patchkit refresh is working in {w}",
                "wait for it to finish, or use another --workdir",
            )
        case RefreshInProgress(workdir=w):
            return (
                f"a refresh is already in progress in {w}",
                f"finish it with `{cont}` or drop it with `{abort}`",
            )
        case WorkdirNotEmpty(workdir=w):
            return f"work folder {w} is not empty", "remove it, or pass --workdir with an empty or new folder"
        case DropAloneLater(current=current, name=name):
            return (
                f"the refresh stands at {current}: --drop alone drops that one; "
                "a later patch goes with --continue or --skip",
                f"e.g. `{action('--continue --drop ' + shlex.quote(name))}`",
            )
        case DropRefreshedAlready(file=file, name=name, current=current):
            return (
                f"--drop {file}: it is refreshed already (the refresh stands at {current})",
                f"`{abort}`, then start again with --drop {name}",
            )
        case StillUnmerged(patch=patch, files=files, tree=tree):
            return (
                f"{patch}: still unmerged: {', '.join(files)}",
                f"fix them in {tree}, `{_resolve_steps(tree)} add` them, then `{cont}` "
                f"(or `{skip}` to drop {patch})",
            )
        case NotStaged(patch=patch, files=files, tree=tree):
            g = _resolve_steps(tree)
            return (
                f"{patch}: changes not staged: {', '.join(files)}",
                f"`{g} add` them (or `{g} checkout` them away), then `{cont}`",
            )
        case MarkersLeft(patch=patch, file=file, tree=tree):
            return (
                f"{patch}: conflict markers left: {file}",
                f"edit the file in {tree}, `git add` it, then `{cont}`",
            )
        case TreeMoved(workdir=w, patch=patch):
            return (
                f"{w}: the scratch tree moved since the refresh stopped at {patch}",
                f"drop the refresh with `{abort}` and start again",
            )
        case ResolutionRefused(patch=patch, refusal=refusal, more=more, tree=tree):
            extra = f" (and {more} more)" if more else ""
            return (
                f"{patch}: the staged resolution would be refused as a patch: {printable(refusal)}{extra}",
                f"unstage it in {tree} (`{_resolve_steps(tree)} reset -q -- PATH`), then `{cont}`",
            )
        case ForeignInWorkdir(workdir=w, name=name, link=link):
            return (
                f"{w} holds {name}{' (a link)' if link else ''}, which a refresh did not write: "
                "not removing it",
                "remove the folder by hand",
            )
        case StateUnusable(path=path, why=why):
            return f"{path} {why}", abort_hint
        case NoRefreshHere(workdir=w):
            return (
                f"no refresh in progress in {w}",
                "start one with `patchkit refresh --onto COMMIT` (a refresh started with "
                "--workdir DIR is found with the same --workdir)",
            )
        case SourceChanged(path=path):
            return f"{path} changed since the refresh started", abort_hint
    raise TypeError(type(p).__name__)


RENDERERS.update(
    dict.fromkeys(
        (
            RefreshJustFinished,
            RefreshBusy,
            RefreshInProgress,
            WorkdirNotEmpty,
            DropAloneLater,
            DropRefreshedAlready,
            StillUnmerged,
            NotStaged,
            MarkersLeft,
            TreeMoved,
            ResolutionRefused,
            ForeignInWorkdir,
            StateUnusable,
            NoRefreshHere,
            SourceChanged,
        ),
        _words,
    )
)


def refresh_words(p: Problem) -> tuple[str, str, str] | None:
    """(message, detail, hint) of a refresh problem, the next steps as placeholders; None
    for another area's problem."""
    if isinstance(p, RefreshStop):
        return stop_words(p)
    renderer = RENDERERS.get(type(p))
    if renderer is None:
        return None
    message, hint = renderer(p)
    return message, "", hint
