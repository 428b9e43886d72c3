"""Golden words of the file-format problems (patchkit/spec/problems.py)."""

from __future__ import annotations

from pathlib import Path

from patchkit.core.errors import ConfigError, FatalError, RecipeError, ReleaseError
from patchkit.spec.problems import BuildInfoUnusable, NoFinishedBuild, RecipeNotFound

__all__ = ["GOLDEN"]

R = Path("/p/recipes")

GOLDEN: list[tuple[FatalError, str, str]] = [
    (
        ConfigError(problem=BuildInfoUnusable(found="out/x/build-info.json: schema is missing")),
        "out/x/build-info.json: schema is missing",
        "rebuild with `patchkit build <recipe>`",
    ),
    (
        ReleaseError(problem=NoFinishedBuild(out_dir=Path("out/x"), exists=False)),
        "no finished build: out/x does not exist",
        "run `patchkit build RECIPE` first",
    ),
    (
        ConfigError(problem=NoFinishedBuild(out_dir=Path("out/x"), exists=True)),
        "no finished build: out/x holds no build-info.json",
        "run `patchkit build RECIPE` first",
    ),
    (
        RecipeError(problem=RecipeNotFound(arg="cpu-rcp", by="name", recipes=R, known=("cpu", "cpu-rpc"))),
        "no recipe named 'cpu-rcp' in /p/recipes (did you mean \"cpu-rpc\"?)",
        "`patchkit list` shows the recipes",
    ),
    (
        RecipeError(problem=RecipeNotFound(arg="mine", by="name", recipes=R, file_here=True)),
        "no recipe named 'mine' in /p/recipes",
        "a bare name is looked up in /p/recipes only; for the file 'mine' here, write ./mine",
    ),
    (
        RecipeError(
            problem=RecipeNotFound(arg="nowhere/fixture.toml", by="path", recipes=R, known=("fixture",))
        ),
        "recipe file nowhere/fixture.toml does not exist",
        "the recipe 'fixture' in recipes/ is `patchkit build fixture`",
    ),
    (
        RecipeError(problem=RecipeNotFound(arg="nowhere/x.toml", by="path", recipes=R)),
        "recipe file nowhere/x.toml does not exist",
        "",
    ),
]
