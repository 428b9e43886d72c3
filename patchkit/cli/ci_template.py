"""`patchkit ci-template`."""

from __future__ import annotations

from pathlib import Path

import click

from patchkit.cli._common import load_project
from patchkit.core.errors import ConfigError
from patchkit.core.fs import atomic_write_text
from patchkit.core.log import log
from patchkit.release.ci import (
    DEFAULT_CRON,
    DEFAULT_CUDA,
    matrix_from_recipes,
    parse_ci_cache,
    render_canary,
    render_workflow,
)
from patchkit.spec.recipe import list_recipes, load_recipe, resolve_recipe_path

__all__ = ["COMMANDS"]


@click.command("ci-template")
@click.argument("recipes", nargs=-1)
@click.option(
    "--cuda",
    "cuda_version",
    default=DEFAULT_CUDA,
    show_default=True,
    help="CUDA toolkit version the CUDA recipes' jobs install.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write here (e.g. .github/workflows/release.yml) instead of stdout.",
)
@click.option(
    "--cache-remote",
    "cache_remote",
    metavar="gha|secret:NAME",
    default=None,
    help="Share compiled objects between the build jobs: sccache's GitHub Actions "
    "cache backend, or the redis:// / http:// URL in secret NAME (docs/cache.md).",
)
@click.option(
    "--launcher",
    type=click.Choice(["ccache", "sccache"]),
    default=None,
    help="Compiler launcher of the build jobs with --cache-remote secret:NAME "
    "(default ccache; gha is always sccache).",
)
@click.option(
    "--canary",
    is_flag=True,
    help="Instead: the nightly upstream canary (check against upstream's newest "
    "commit; one issue when a patch breaks; `bump` and one pull request when "
    "all apply). RECIPE (one, default cpu-rpc) names the upstream.",
)
@click.option(
    "--branch", default="master", show_default=True, help="With --canary: the upstream branch to follow."
)
@click.option(
    "--cron",
    default=DEFAULT_CRON,
    show_default=True,
    help="With --canary: when it runs (UTC, five cron fields).",
)
@click.option(
    "--upstream",
    "upstream",
    default=None,
    metavar="URL",
    help="With --canary: the git URL it clones (default: the recipe's upstream.url).",
)
@click.pass_context
def ci_template_cmd(
    ctx: click.Context,
    recipes: tuple[str, ...],
    cuda_version: str,
    output: Path | None,
    cache_remote: str | None,
    launcher: str | None,
    canary: bool,
    branch: str,
    cron: str,
    upstream: str | None,
) -> None:
    """A GitHub Actions workflow: check, build RECIPES (default: all), release, publish.

    With --canary: the nightly upstream canary instead (docs/upstream.md)."""
    if canary:
        _canary(ctx, recipes, output, branch, cron, upstream, cache_remote or launcher)
        return
    if branch != "master" or cron != DEFAULT_CRON or upstream is not None:
        raise ConfigError("--branch, --cron and --upstream are for --canary")
    cache = None
    if cache_remote is not None:
        try:
            cache = parse_ci_cache(cache_remote, launcher)
        except ValueError as e:
            raise ConfigError(
                f"--cache-remote: {e}", hint="--cache-remote gha, or --cache-remote secret:NAME"
            ) from None
    elif launcher is not None:
        raise ConfigError("--launcher needs --cache-remote", hint="--cache-remote secret:NAME")
    project, series = load_project(ctx)
    paths = [resolve_recipe_path(r, project) for r in recipes] if recipes else list_recipes(project)
    if not paths:
        raise ConfigError(f"no recipes in {project / 'recipes'}")
    entries = matrix_from_recipes([load_recipe(p, project, series) for p in paths], cuda=cuda_version)
    text = render_workflow(entries, cache=cache)
    if output is None:
        click.echo(text, nl=False)
    else:
        atomic_write_text(output, text, follow_links=True)
        log.info(f"wrote {output} ({len(entries)} recipe(s))")


def _canary(
    ctx: click.Context,
    recipes: tuple[str, ...],
    output: Path | None,
    branch: str,
    cron: str,
    upstream: str | None,
    cache: str | None,
) -> None:
    if cache is not None:
        raise ConfigError("--cache-remote and --launcher are for the build workflow, not --canary")
    if len(recipes) > 1:
        raise ConfigError("--canary takes one RECIPE (it names the upstream; bump moves every recipe on it)")
    project, series = load_project(ctx)
    rec = load_recipe(resolve_recipe_path(recipes[0] if recipes else "cpu-rpc", project), project, series)
    try:
        text = render_canary(recipe=rec.name, upstream=upstream or rec.upstream.url, branch=branch, cron=cron)
    except ValueError as e:
        raise ConfigError(f"--canary: {e}") from None
    if output is None:
        click.echo(text, nl=False)
    else:
        atomic_write_text(output, text, follow_links=True)
        log.info(f"wrote {output} (canary for {upstream or rec.upstream.url} {branch})")


COMMANDS = [ci_template_cmd]
