"""`patchkit ci-template`: a GitHub Actions workflow that builds, releases and publishes.

The shipped template (patchkit/templates/release.yml) has two slots: ``@@RECIPES@@``
(the names `patchkit check` runs over first) and ``@@MATRIX@@`` (one build job per
recipe: runner from the recipe's platform.os, CUDA toolkit when it has [cuda]).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from importlib import resources

from patchkit.model.recipe import Recipe

__all__ = ["DEFAULT_CUDA", "RUNNERS", "MatrixEntry", "matrix_from_recipes", "render_workflow"]

DEFAULT_CUDA = "12.4.1"
RUNNERS = {"linux": "ubuntu-22.04", "windows": "windows-2022", "macos": "macos-14"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class MatrixEntry:
    recipe: str
    runner: str
    cuda: str  # toolkit version for Jimver/cuda-toolkit, "" for none
    cross: str = ""  # "mingw": a Windows recipe cross-built on Linux (apt mingw-w64 + wine)


def _entry(r: Recipe, cuda: str) -> MatrixEntry:
    # a Windows recipe with a CMake toolchain file is a cross build: it runs on Linux
    cross = "mingw" if r.os == "windows" and r.build.toolchain is not None else ""
    return MatrixEntry(recipe=r.name, runner=RUNNERS["linux" if cross else r.os],
                       cuda=cuda if r.cuda else "", cross=cross)


def matrix_from_recipes(recipes: Sequence[Recipe], *, cuda: str = DEFAULT_CUDA) -> list[MatrixEntry]:
    return [_entry(r, cuda) for r in sorted(recipes, key=lambda r: r.name)]


def _q(value: str) -> str:
    # recipe names and versions are [a-z0-9._-]; quote anyway so YAML never retypes them
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_workflow(entries: Sequence[MatrixEntry]) -> str:
    if not entries:
        raise ValueError("a workflow needs at least one recipe")
    template = resources.files("patchkit.release").joinpath("templates/release.yml").read_text("utf-8")
    pad = " " * 10
    matrix = "\n".join(f"{pad}- recipe: {_q(e.recipe)}\n{pad}  runner: {_q(e.runner)}\n"
                       f"{pad}  cuda: {_q(e.cuda)}\n{pad}  cross: {_q(e.cross)}"
                       for e in entries)
    return (template.replace("@@MATRIX@@", matrix)
            .replace("@@RECIPES@@", " ".join(e.recipe for e in entries)))
