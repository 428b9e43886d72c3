"""The words of the file-safety problems (``patchkit/core/fs.py``): a folder patchkit will
not replace because it holds what patchkit did not write."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from patchkit.core.errors import Problem
from patchkit.core.fs import ForeignEntry

__all__ = ["RENDERERS"]


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


RENDERERS: dict[type[Problem], Callable[[Any], tuple[str, str]]] = {
    ForeignEntry: _foreign_entry,
}
