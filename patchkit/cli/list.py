"""`patchkit list`: the recipes and patches this project knows."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

from patchkit.cli._common import DEFAULT_RECIPE, load_project
from patchkit.core.errors import FatalError, RecipeError
from patchkit.core.log import log
from patchkit.spec.recipe import Recipe, list_recipes, load_recipe

__all__ = ["COMMANDS"]


@click.command("list")
@click.pass_context
def list_cmd(ctx: click.Context) -> None:
    """List recipes and patches, with their status."""
    project, series = load_project(ctx)
    patches = Table(title="patches (patches/series, in order)", title_justify="left")
    for col in ("#", "name", "upstream status", "when", "default", "sha256"):
        patches.add_column(col)
    for i, p in enumerate(series.patches, 1):
        flag = "yes" if p.default else "no"
        # patch headers and recipe files are data: never read as rich markup
        name = escape(p.name) + (" [yellow](experimental)[/yellow]" if p.experimental else "")
        patches.add_row(str(i), name, escape(p.upstream_status), escape(p.when), flag, p.sha256[:12])
    recipes = Table(title="recipes (recipes/)", title_justify="left")
    for col in ("name", "os", "gpu", "upstream", "patches", "targets", "status"):
        recipes.add_column(col)
    bad = 0
    for path in list_recipes(project):
        try:
            r = load_recipe(path, project, series)
            gpu = _gpu(r)
        except FatalError as e:
            bad += 1
            recipes.add_row(escape(path.stem), "", "", "", "", "", f"[red]invalid: {escape(e.message)}[/red]")
            continue
        name = r.name + (" (default)" if path.stem == DEFAULT_RECIPE else "")
        exp = any(p.experimental for p in r.patches)
        recipes.add_row(
            escape(name),
            escape(r.os),
            gpu,
            r.upstream.commit[:12],
            escape(", ".join(r.patch_names)) or "-",
            escape(", ".join(r.build.targets)),
            "[yellow]experimental[/yellow]" if exp else "ok",
        )
    log.console.print(patches)
    log.console.print(recipes)
    if bad:
        raise click.exceptions.Exit(RecipeError.exit_code)


def _gpu(recipe: Recipe) -> str:
    """'CUDA sm_60,61,75,86' for a CUDA recipe (names checked, no toolkit needed), else '-'."""
    if recipe.cuda is None:
        return "-"
    return "CUDA sm_" + ",".join(str(s) for s in recipe.cuda.archs.sms)


COMMANDS = [list_cmd]
