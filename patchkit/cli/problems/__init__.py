"""The words of structured errors: one renderer per :class:`~patchkit.core.errors.Problem`.

Engines raise a ``FatalError`` carrying a problem (typed fields); the CLI's error handler
(``patchkit/cli/__init__.py``) asks :func:`render` for the one line and the hint, so the
advice (which flag to pass, which command to run) is written here, beside the commands,
not in the engines. An error without a problem keeps the message and hint it was raised
with. One module per area, each with its ``RENDERERS``: ``files`` (core/fs's folder
ownership), ``fs`` (core/fs's file problems), ``build`` (builder/), ``rebuild`` (rebuild/),
``release`` (release/), ``rpc`` (rpc/), ``spec``
(spec/), ``git`` (git/), ``bench``
(bench/), ``weights`` (weights/), ``refresh`` (upkeep/refresh's stops). Golden tests:
tests/unit/cli/test_problems*.py, tests/integration/upkeep/test_refresh_golden.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from patchkit.cli.problems import bench, build, files, fs, git, rebuild, refresh, release, rpc, spec, weights
from patchkit.core.errors import FatalError, Problem

__all__ = ["RENDERERS", "render", "said", "words"]

RENDERERS: dict[type[Problem], Callable[[Any], tuple[str, str]]] = {
    **files.RENDERERS,
    **release.RENDERERS,
    **build.RENDERERS,
    **rebuild.RENDERERS,
    **fs.RENDERERS,
    **rpc.RENDERERS,
    **spec.RENDERERS,
    **git.RENDERERS,
    **bench.RENDERERS,
    **weights.RENDERERS,
    **refresh.RENDERERS,
}


def render(e: FatalError) -> tuple[str, str]:
    """(message, hint) of ``e``: its problem's words when it has one, else its own."""
    if e.problem is not None:
        renderer = RENDERERS.get(type(e.problem))
        if renderer is not None:
            message, hint = renderer(e.problem)
            return message, e.hint or hint
    return e.message, e.hint


def words(problem: Problem) -> tuple[str, str] | None:
    """(message, hint) of ``problem``; None when no renderer knows it."""
    renderer = RENDERERS.get(type(problem))
    return renderer(problem) if renderer is not None else None


def said(e: FatalError) -> str:
    """The one line the CLI prints for ``e`` (its message, rendered), for a command that
    quotes an error inside its own output (a report, a table row)."""
    return render(e)[0]
