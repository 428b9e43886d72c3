"""What most commands need: the project folder, its series, a recipe."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click

from patchkit.core.errors import ConfigError, RecipeError
from patchkit.core.paths import cache_dir, find_project_dir
from patchkit.git.cache import open_upstream
from patchkit.spec.recipe import Recipe, load_recipe, resolve_recipe_path
from patchkit.spec.series import Patch, Series, load_series

__all__ = [
    "DEFAULT_RECIPE",
    "load_optional_recipe",
    "load_project",
    "load_recipe_arg",
    "repo_options",
    "resolve_repo",
    "select_patches",
]

F = TypeVar("F", bound=Callable[..., object])

DEFAULT_RECIPE = "cpu-rpc"


def load_project(ctx: click.Context) -> tuple[Path, Series]:
    project = find_project_dir(ctx.find_root().obj.get("project"))
    return project, load_series(project / "patches")


def load_recipe_arg(ctx: click.Context, arg: str | None) -> tuple[Path, Series, Recipe]:
    project, series = load_project(ctx)
    path = resolve_recipe_path(arg or DEFAULT_RECIPE, project)
    return project, series, load_recipe(path, project, series)


def resolve_repo(*, repo: Path | None, upstream: str | None, recipe: Recipe | None) -> Path:
    """The local git repository to check against: ``--repo`` (used as is, read-only), else
    ``--upstream`` or the recipe's upstream.url (git.cache.open_upstream)."""
    if repo is not None:
        if not repo.exists():
            raise ConfigError(f"--repo {repo} does not exist")
        return repo.resolve()
    url = upstream or (recipe.upstream.url if recipe else None)
    if url is None:
        raise ConfigError("no upstream repository: pass --repo PATH or --upstream URL_OR_PATH")
    return open_upstream(url, cache_dir())


def load_optional_recipe(
    ctx: click.Context, recipe_arg: str | None, need_recipe: bool
) -> tuple[Path, Series, Recipe | None]:
    project, series = load_project(ctx)
    if recipe_arg is None and not need_recipe:
        try:
            path = resolve_recipe_path(DEFAULT_RECIPE, project)
        except RecipeError:
            return project, series, None
    else:
        path = resolve_recipe_path(recipe_arg or DEFAULT_RECIPE, project)
    return project, series, load_recipe(path, project, series)


def select_patches(series: Series, recipe: Recipe | None, all_: bool) -> tuple[Patch, ...]:
    if all_:
        return series.patches
    assert recipe is not None
    return recipe.patches


_REPO_OPTS = [
    click.option(
        "--repo",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="An existing local clone or mirror of upstream (used read-only).",
    ),
    click.option(
        "--upstream",
        "upstream",
        default=None,
        metavar="URL_OR_PATH",
        help="Upstream repository: a local clone/mirror (used read-only) or a URL "
        "(cloned into the cache, partial); default: the recipe's.",
    ),
    click.option(
        "--all", "all_", is_flag=True, help="Check the whole series, not just the recipe's patches."
    ),
]


def repo_options(f: F) -> F:
    """--repo, --upstream, --all (check, refresh)."""
    for opt in reversed(_REPO_OPTS):
        f = opt(f)
    return f
