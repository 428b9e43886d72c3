"""The words of the file-format problems (``patchkit/spec/problems.py``): the message is
each problem's own line of facts, the advice names the command that helps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from patchkit.core.errors import Problem
from patchkit.spec.problems import BuildInfoUnusable, NoFinishedBuild, RecipeNotFound

__all__ = ["RENDERERS"]


def _build_info(p: BuildInfoUnusable) -> tuple[str, str]:
    return str(p), "rebuild with `patchkit build <recipe>`"


def _no_build(p: NoFinishedBuild) -> tuple[str, str]:
    return str(p), "run `patchkit build RECIPE` first"


def _recipe_not_found(p: RecipeNotFound) -> tuple[str, str]:
    if p.by == "path":
        stem = p.known[0] if p.known else ""
        return str(p), (f"the recipe {stem!r} in recipes/ is `patchkit build {stem}`" if stem else "")
    if p.file_here:
        return str(p), (
            f"a bare name is looked up in {p.recipes} only; for the file {p.arg!r} here, write ./{p.arg}"
        )
    return str(p), "`patchkit list` shows the recipes"


RENDERERS: dict[type[Problem], Callable[[Any], tuple[str, str]]] = {
    BuildInfoUnusable: _build_info,
    NoFinishedBuild: _no_build,
    RecipeNotFound: _recipe_not_found,
}
