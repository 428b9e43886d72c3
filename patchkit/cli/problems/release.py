"""The words of the release problems (``patchkit/release/``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from patchkit.core.errors import Problem
from patchkit.release.release import ImportCheckFailed

__all__ = ["RENDERERS"]

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
    ImportCheckFailed: _import_check,
}
