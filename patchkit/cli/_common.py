"""What most commands need: the project folder, its series, a recipe."""

from __future__ import annotations

from pathlib import Path

import click

from patchkit.core.paths import find_project_dir
from patchkit.model.recipe import Recipe, load_recipe, resolve_recipe_path
from patchkit.model.series import Series, load_series

__all__ = ["DEFAULT_RECIPE", "load_project", "load_recipe_arg"]

DEFAULT_RECIPE = "cpu-rpc"


def load_project(ctx: click.Context) -> tuple[Path, Series]:
    project = find_project_dir(ctx.find_root().obj.get("project"))
    return project, load_series(project / "patches")


def load_recipe_arg(ctx: click.Context, arg: str | None) -> tuple[Path, Series, Recipe]:
    project, series = load_project(ctx)
    path = resolve_recipe_path(arg or DEFAULT_RECIPE, project)
    return project, series, load_recipe(path, project, series)
