"""The words of structured errors: one renderer per :class:`~patchkit.core.errors.Problem`.

Engines raise a ``FatalError`` carrying a problem (typed fields); the CLI's error handler
(``patchkit/cli/__init__.py``) asks :func:`render` for the one line and the hint, so the
advice (which flag to pass, which command to run) is written here, beside the commands,
not in the engines. An error without a problem keeps the message and hint it was raised
with. Golden tests: tests/unit/cli/test_problems.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from patchkit.cli.problems_fs import RENDERERS as FS_RENDERERS
from patchkit.core.errors import FatalError, Problem
from patchkit.core.fs import ForeignEntry
from patchkit.release.release import ImportCheckFailed

__all__ = ["RENDERERS", "render"]


def _foreign_entry(p: ForeignEntry) -> tuple[str, str]:
    e = p.entry
    if p.owner == "bench":
        kind = " (a link)" if e.link else ""
        return (
            f"{p.folder} holds {e.name}{kind}, which patchkit bench did not write there",
            "give an empty or new folder, or one a previous bench wrote",
        )
    why = f" ({e.why})" if e.why else " (a symlink)" if e.link else ""
    return (
        f"{p.folder} holds {e.name}{why}, which patchkit did not write there: not replacing the folder",
        "pick another --out, or move that folder's contents away",
    )


_IMPORT_STAGES = {
    "unreadable": "the import check cannot read the artifacts",
    "runtime": "the CUDA runtime bundle's own imports do not resolve",
    "build": "the import check failed",
}


def _import_check(p: ImportCheckFailed) -> tuple[str, str]:
    shown = "; ".join(p.problems[:3]) + (f" (and {len(p.problems) - 3} more)" if len(p.problems) > 3 else "")
    return (
        f"{_IMPORT_STAGES[p.stage]}: {shown}",
        "every library a binary loads must be in bin/, in the CUDA runtime "
        "bundle, or an allowed system library (docs/release.md)",
    )


RENDERERS: dict[type[Problem], Callable[[Any], tuple[str, str]]] = {
    ForeignEntry: _foreign_entry,
    ImportCheckFailed: _import_check,
    **FS_RENDERERS,
}


def render(e: FatalError) -> tuple[str, str]:
    """(message, hint) of ``e``: its problem's words when it has one, else its own."""
    if e.problem is not None:
        renderer = RENDERERS.get(type(e.problem))
        if renderer is not None:
            message, hint = renderer(e.problem)
            return message, e.hint or hint
    return e.message, e.hint
