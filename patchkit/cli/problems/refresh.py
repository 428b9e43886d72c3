"""The words of a refresh's stop (:class:`~patchkit.upkeep.refresh.options.RefreshStop`):
its one line, the detail under it (each conflicted file's blocks, a deleted file's new
homes, the lines a clean merge doubled, what to review) and the next steps. The next
steps name the refresh's actions as placeholders (:func:`~patchkit.upkeep.refresh.hints.action`);
``patchkit/cli/refresh.py`` writes them as the command lines the user types."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

from patchkit.core.errors import Problem
from patchkit.core.text import printable
from patchkit.upkeep.refresh.hints import action, outside_actions
from patchkit.upkeep.refresh.options import ConflictedFile, Duplicate, GoneFile, RefreshStop

__all__ = ["RENDERERS", "stop_detail", "stop_words"]


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
