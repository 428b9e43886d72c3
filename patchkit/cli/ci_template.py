"""`patchkit ci-template`."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import click

from patchkit.cli._common import load_project
from patchkit.core.errors import ConfigError, SourceError
from patchkit.core.fs import atomic_write_text
from patchkit.core.log import log
from patchkit.git.runner import git_out
from patchkit.release.ci import (
    DEFAULT_CRON,
    DEFAULT_CUDA,
    DEFAULT_REGISTRY,
    ActionPin,
    ImagePush,
    load_pins,
    matrix_from_recipes,
    parse_ci_cache,
    pins_path,
    pins_text,
    render_canary,
    render_workflow,
    tags_from_ls_remote,
    update_pins,
)
from patchkit.spec.recipe import list_recipes, load_recipe, resolve_recipe_path

__all__ = ["COMMANDS"]

GITHUB = "https://github.com"  # where --update-pins lists the actions' tags; PATCHKIT_GITHUB_URL


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
    "--push-images",
    "push_images",
    is_flag=True,
    help="Also release each Linux build as a container image (release --image) and, after "
    "publishing a tag, push it to --image-registry tagged with its release name.",
)
@click.option(
    "--image-registry",
    "image_registry",
    default=DEFAULT_REGISTRY,
    show_default=True,
    help="With --push-images: the registry (GitHub's takes the job's token; another one the "
    "secrets IMAGE_REGISTRY_USER and IMAGE_REGISTRY_TOKEN).",
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
@click.option(
    "--pins",
    "pins_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The actions' pins (OWNER/REPO -> release tag and commit sha) to render from or "
    "update (default: the file patchkit ships, release/templates/action-pins.toml).",
)
@click.option(
    "--update-pins",
    "update",
    is_flag=True,
    help="Instead: move every action's pin to the newest release of its line (`git ls-remote` "
    "on GitHub, or PATCHKIT_GITHUB_URL), rewrite the pins file, and say what moved.",
)
@click.pass_context
def ci_template_cmd(
    ctx: click.Context,
    recipes: tuple[str, ...],
    cuda_version: str,
    output: Path | None,
    cache_remote: str | None,
    launcher: str | None,
    push_images: bool,
    image_registry: str,
    canary: bool,
    branch: str,
    cron: str,
    upstream: str | None,
    pins_file: Path | None,
    update: bool,
) -> None:
    """A GitHub Actions workflow: check, build RECIPES (default: all), release, publish.

    Every action in it is pinned by a full commit sha with its release tag as a comment
    (`OWNER/REPO@SHA # vX.Y.Z`): --update-pins moves the pins. With --canary: the nightly
    upstream canary instead (docs/upstream.md)."""
    if update:
        others = recipes or output or cache_remote or launcher or canary or upstream or push_images
        if others or branch != "master" or cron != DEFAULT_CRON or cuda_version != DEFAULT_CUDA:
            raise ConfigError("--update-pins takes no other option but --pins")
        _update_pins(pins_file or pins_path())
        return
    pins = _pins(pins_file)
    if canary and (push_images or image_registry != DEFAULT_REGISTRY):
        raise ConfigError("--push-images and --image-registry are for the release workflow, not --canary")
    if canary:
        _canary(ctx, recipes, output, branch, cron, upstream, cache_remote or launcher, pins)
        return
    if branch != "master" or cron != DEFAULT_CRON or upstream is not None:
        raise ConfigError("--branch, --cron and --upstream are for --canary")
    images = None
    if push_images:
        try:
            images = ImagePush(registry=image_registry)
        except ValueError as e:
            raise ConfigError(f"--image-registry: {e}") from None
    elif image_registry != DEFAULT_REGISTRY:
        raise ConfigError("--image-registry needs --push-images")
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
    text = render_workflow(entries, cache=cache, pins=pins, images=images)
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
    pins: Mapping[str, ActionPin],
) -> None:
    if cache is not None:
        raise ConfigError("--cache-remote and --launcher are for the build workflow, not --canary")
    if len(recipes) > 1:
        raise ConfigError("--canary takes one RECIPE (it names the upstream; bump moves every recipe on it)")
    project, series = load_project(ctx)
    rec = load_recipe(resolve_recipe_path(recipes[0] if recipes else "cpu-rpc", project), project, series)
    try:
        text = render_canary(
            recipe=rec.name, upstream=upstream or rec.upstream.url, branch=branch, cron=cron, pins=pins
        )
    except ValueError as e:
        raise ConfigError(f"--canary: {e}") from None
    if output is None:
        click.echo(text, nl=False)
    else:
        atomic_write_text(output, text, follow_links=True)
        log.info(f"wrote {output} (canary for {upstream or rec.upstream.url} {branch})")


def _pins(path: Path | None) -> dict[str, ActionPin]:
    try:
        return load_pins(path)
    except ValueError as e:
        raise ConfigError(f"--pins: {e}" if path else str(e)) from None


def _github() -> str:
    base = os.environ.get("PATCHKIT_GITHUB_URL", GITHUB).rstrip("/")
    if not (re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", base) or Path(base).is_absolute()):
        raise ConfigError(
            f"PATCHKIT_GITHUB_URL {base!r} is neither a URL nor an absolute path",
            hint=f"unset it for {GITHUB}, or give a mirror's URL",
        )
    return base


def _update_pins(path: Path) -> None:
    """Each action's tags from `git ls-remote`, the pins moved (release.ci.update_pins),
    the file rewritten atomically when anything moved; one line per action on stdout."""
    pins = _pins(path)
    base = _github()

    def tags_of(action: str) -> dict[str, str]:
        url = f"{base}/{action}"
        try:
            listing = git_out(None, "ls-remote", "--tags", "--", url, what=f"listing the tags of {url}")
        except SourceError as e:
            raise SourceError(
                e.message,
                detail=e.detail,
                hint="--update-pins needs the network (or PATCHKIT_GITHUB_URL naming a mirror)",
            ) from None
        return tags_from_ls_remote(listing)

    try:
        new, lines = update_pins(pins, tags_of)
    except ValueError as e:
        raise SourceError(str(e), hint="is the action's track in the pins file right?") from None
    for line in lines:
        click.echo(line)
    if new == pins:
        log.info(f"{path}: every pin is the newest release of its line")
        return
    atomic_write_text(path, pins_text(new), follow_links=True)
    log.info(f"wrote {path}: review the diff, then render the workflows again")


COMMANDS = [ci_template_cmd]
