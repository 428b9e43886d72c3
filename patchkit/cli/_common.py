"""What most commands need: the project folder, its series, a recipe; and the result
printer (``out``, ``out_styled``, ``out_table``, ``out_json``).

Results go to stdout, progress and diagnostics to stderr (``core.log``): `patchkit list
| grep cuda` and `patchkit doctor > report.txt` get the result, a terminal still shows
both. Results are plain text off a terminal (a pipe, a file, a CI log) and styled only on
one; ``--json`` prints one JSON object (sorted keys) instead of the text.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click
from rich.console import Console

from patchkit.core.errors import ConfigError, RecipeError
from patchkit.core.log import log
from patchkit.core.paths import cache_dir, find_project_dir
from patchkit.core.record import encode
from patchkit.git.cache import open_upstream
from patchkit.spec.recipe import Recipe, load_recipe, resolve_recipe_path
from patchkit.spec.series import Patch, Series, load_series

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

__all__ = [
    "DEFAULT_RECIPE",
    "TABLE_WIDTH",
    "load_optional_recipe",
    "load_project",
    "load_recipe_arg",
    "out",
    "out_json",
    "out_record",
    "out_styled",
    "out_table",
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


# -- the result printer --------------------------------------------------------------------

TABLE_WIDTH = 4096  # off a terminal: no cell wraps, a row is one line (grep finds it whole)


def out(text: str = "", *, err: bool = False) -> None:
    """One result line (or several) on stdout, as is. ``err``: on stderr with the log
    instead (the text of a command whose stdout holds its ``--json``)."""
    if err:
        log.info(text)
        return
    try:
        click.echo(text)
    except UnicodeEncodeError:  # a pipe in a legacy code page (Windows): never a crash
        enc = getattr(sys.stdout, "encoding", None) or "ascii"
        click.echo(text.encode(enc, "backslashreplace").decode(enc))


def out_styled(text: Text, *, err: bool = False) -> None:
    """One result line with styles (a rich Text): styled on a terminal, elsewhere its plain
    text through :func:`out` (``err``: on stderr with the log, which does the same)."""
    if err:
        log.console.print(text)
        return
    console = Console(file=sys.stdout, highlight=False, soft_wrap=True)
    if console.is_terminal:
        console.print(text)
    else:
        out(text.plain)


def out_table(table: Table, *, err: bool = False) -> None:
    """A rich table on stdout (``err``: on stderr with the log): styled on a terminal;
    elsewhere plain text as wide as its cells (never squeezed to 80 columns: a row stays
    one line), trailing blanks cut."""
    console = log.console if err else Console(file=sys.stdout, highlight=False)
    if console.is_terminal:
        console.print(table)
        return
    buf = io.StringIO()
    Console(file=buf, width=TABLE_WIDTH, color_system=None, highlight=False).print(table)
    text = "\n".join(ln.rstrip() for ln in buf.getvalue().splitlines())
    if err:
        log.console.out(text, highlight=False)
    else:
        out(text)


def out_json(obj: object) -> None:
    """The ``--json`` result: one JSON document on stdout, keys sorted, 2-space indent."""
    click.echo(json.dumps(obj, indent=2, sort_keys=True))


def out_record(record: object) -> None:
    """A record's JSON form (:func:`patchkit.core.record.encode`) as the ``--json`` result."""
    out_json(encode(record))
