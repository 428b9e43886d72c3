"""`patchkit ci-template`."""

from __future__ import annotations

from pathlib import Path

import click

from patchkit.cli._common import load_project
from patchkit.core.errors import ConfigError
from patchkit.core.fs import atomic_write_text
from patchkit.core.log import log
from patchkit.model.recipe import list_recipes, load_recipe, resolve_recipe_path
from patchkit.release.ci import DEFAULT_CUDA, matrix_from_recipes, parse_ci_cache, render_workflow

__all__ = ["COMMANDS"]


@click.command("ci-template")
@click.argument("recipes", nargs=-1)
@click.option("--cuda", "cuda_version", default=DEFAULT_CUDA, show_default=True,
              help="CUDA toolkit version the CUDA recipes' jobs install.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write here (e.g. .github/workflows/release.yml) instead of stdout.")
@click.option("--cache-remote", "cache_remote", metavar="gha|secret:NAME", default=None,
              help="Share compiled objects between the build jobs: sccache's GitHub Actions "
                   "cache backend, or the redis:// / http:// URL in secret NAME (docs/cache.md).")
@click.option("--launcher", type=click.Choice(["ccache", "sccache"]), default=None,
              help="Compiler launcher of the build jobs with --cache-remote secret:NAME "
                   "(default ccache; gha is always sccache).")
@click.pass_context
def ci_template_cmd(ctx: click.Context, recipes: tuple[str, ...], cuda_version: str,
                    output: Path | None, cache_remote: str | None, launcher: str | None) -> None:
    """A GitHub Actions workflow: check, build RECIPES (default: all), release, publish."""
    cache = None
    if cache_remote is not None:
        try:
            cache = parse_ci_cache(cache_remote, launcher)
        except ValueError as e:
            raise ConfigError(f"--cache-remote: {e}",
                              hint="--cache-remote gha, or --cache-remote secret:NAME") from None
    elif launcher is not None:
        raise ConfigError("--launcher needs --cache-remote", hint="--cache-remote secret:NAME")
    project, series = load_project(ctx)
    paths = ([resolve_recipe_path(r, project) for r in recipes] if recipes
             else list_recipes(project))
    if not paths:
        raise ConfigError(f"no recipes in {project / 'recipes'}")
    entries = matrix_from_recipes([load_recipe(p, project, series) for p in paths],
                                  cuda=cuda_version)
    text = render_workflow(entries, cache=cache)
    if output is None:
        click.echo(text, nl=False)
    else:
        atomic_write_text(output, text)
        log.info(f"wrote {output} ({len(entries)} recipe(s))")


COMMANDS = [ci_template_cmd]
