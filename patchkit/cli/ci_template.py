"""`patchkit ci-template`."""

from __future__ import annotations

from pathlib import Path

import click

from patchkit.cli._common import load_project
from patchkit.core.errors import ConfigError
from patchkit.core.fs import atomic_write_text
from patchkit.core.log import log
from patchkit.model.recipe import list_recipes, load_recipe, resolve_recipe_path
from patchkit.release.ci import DEFAULT_CUDA, matrix_from_recipes, render_workflow

__all__ = ["COMMANDS"]


@click.command("ci-template")
@click.argument("recipes", nargs=-1)
@click.option("--cuda", "cuda_version", default=DEFAULT_CUDA, show_default=True,
              help="CUDA toolkit version the CUDA recipes' jobs install.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write here (e.g. .github/workflows/release.yml) instead of stdout.")
@click.pass_context
def ci_template_cmd(ctx: click.Context, recipes: tuple[str, ...], cuda_version: str,
                    output: Path | None) -> None:
    """A GitHub Actions workflow: check, build RECIPES (default: all), release, publish."""
    project, series = load_project(ctx)
    paths = ([resolve_recipe_path(r, project) for r in recipes] if recipes
             else list_recipes(project))
    if not paths:
        raise ConfigError(f"no recipes in {project / 'recipes'}")
    entries = matrix_from_recipes([load_recipe(p, project, series) for p in paths],
                                  cuda=cuda_version)
    text = render_workflow(entries)
    if output is None:
        click.echo(text, nl=False)
    else:
        atomic_write_text(output, text)
        log.info(f"wrote {output} ({len(entries)} recipe(s))")


COMMANDS = [ci_template_cmd]
