"""`patchkit refresh`: rebase the series onto a new upstream commit (upkeep.refresh)."""

from __future__ import annotations

from pathlib import Path

import click

from patchkit.cli._common import (
    DEFAULT_RECIPE,
    load_optional_recipe,
    repo_options,
    resolve_repo,
    select_patches,
)
from patchkit.core.errors import ConfigError
from patchkit.core.log import log
from patchkit.core.paths import cache_layout
from patchkit.upkeep.refresh import RefreshOptions, refresh_abort, refresh_continue, refresh_start

__all__ = ["COMMANDS"]


@click.command("refresh")
@click.argument("recipe", required=False)
@click.option("--onto", default=None, metavar="COMMIT", help="The upstream commit to rebase onto.")
@click.option("--continue", "cont", is_flag=True, help="Go on after fixing a conflict.")
@click.option("--abort", is_flag=True, help="Drop the refresh in progress.")
@click.option(
    "--from",
    "base",
    default=None,
    metavar="REF",
    help="Where the series applies today (default: the recipe's pinned commit).",
)
@click.option("--move-pin", is_flag=True, help="Also set the recipe's upstream.commit to COMMIT.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Scratch folder (default: in the cache, per recipe).",
)
@repo_options
@click.pass_context
def refresh_cmd(
    ctx: click.Context,
    recipe: str | None,
    onto: str | None,
    cont: bool,
    abort: bool,
    base: str | None,
    move_pin: bool,
    workdir: Path | None,
    repo: Path | None,
    upstream: str | None,
    all_: bool,
) -> None:
    """Rebase the series onto COMMIT (3-way), rewriting patch files and their hashes.

    The work happens in a scratch repo (--workdir, default in the cache). On a
    conflict it stops: fix the files there, `git add` them, then --continue.
    Patch headers are kept; only the diffs and the series' sha256 change, and the
    recipe's pin only with --move-pin.
    """
    if sum((bool(onto), cont, abort)) != 1:
        raise ConfigError("give exactly one of --onto COMMIT, --continue, --abort")
    label = recipe or DEFAULT_RECIPE
    if workdir is None:
        workdir = cache_layout().refresh(Path(label).stem)
    if abort:
        refresh_abort(workdir)
        log.info(f"refresh aborted; removed {workdir}")
        return
    if cont:
        with log.step("refresh: continue"):
            result = refresh_continue(workdir)
    else:
        need_recipe = not all_ or move_pin or (repo is None and upstream is None)
        _project, series, rec = load_optional_recipe(ctx, recipe, need_recipe)
        if move_pin and rec is None:
            raise ConfigError("--move-pin needs a recipe")
        patches = select_patches(series, rec, all_)
        repo_path = resolve_repo(repo=repo, upstream=upstream, recipe=rec)
        assert onto is not None
        with log.step(f"refresh {len(patches)} patches onto {onto}"):
            result = refresh_start(
                RefreshOptions(
                    repo=repo_path,
                    patches=patches,
                    patches_dir=series.directory,
                    onto=onto,
                    base=base or (rec.upstream.commit if rec else None),
                    workdir=workdir,
                    recipe_path=rec.path if rec else None,
                    move_pin=move_pin,
                )
            )
    for f in result.updated:
        log.info(f"updated   {f}")
    for f in result.unchanged:
        log.info(f"unchanged {f}")
    for f in result.skipped:
        log.info(f"skipped   {f} (outside its When range at {result.onto[:12]}; left as is)")
    if result.pin_moved:
        log.info(f"recipe pin moved to {result.onto}")


COMMANDS = [refresh_cmd]
