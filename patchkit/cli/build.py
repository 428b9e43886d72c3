"""`patchkit build [RECIPE]`."""

from __future__ import annotations

import os
from pathlib import Path

import click

from patchkit.builder import compcache
from patchkit.cli._build_opts import MAX_JOBS, PARALLEL_ENV, build_options, check_parallel_env, run_logged
from patchkit.cli._common import DEFAULT_RECIPE, load_recipe_arg

__all__ = ["COMMANDS"]


@click.command("build")
@click.argument("recipe", required=False)
@click.option(
    "--upstream",
    metavar="URL_OR_PATH",
    help="Build from this llama.cpp URL or local clone/mirror instead of the recipe's url "
    "(the pinned commit must be in it).",
)
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), help="Output folder (default: out/<recipe>)."
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1, max=MAX_JOBS),
    help=f"Parallel build jobs (1-{MAX_JOBS}; default: ${PARALLEL_ENV}, else ninja's).",
)
@click.option("--clean", is_flag=True, help="Start fresh: new worktree, new build dir.")
@click.option("--no-smoke", is_flag=True, help="Do not run the smoke checks after building.")
@click.option(
    "--resmoke",
    is_flag=True,
    help="Run the smoke checks even when nothing they depend on changed since they last "
    "passed (the artifacts, smoke tools, real model, checks).",
)
@click.option(
    "--configure-only",
    is_flag=True,
    help="Stop after the CMake configure (source, patches, CUDA preflight): checks "
    "that a recipe configures at its pin without compiling it.",
)
@click.option(
    "--cuda-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="CUDA toolkit to use (beats cuda.toolkit_root, CUDA_PATH, PATH).",
)
@click.option(
    "--cache-remote",
    metavar="URL",
    help=f"Shared compile cache: redis://, http:// (ccache or sccache); s3://, gcs://, "
    f"gha, rediss://, https://, memcached:// (sccache); `off` for none. Beats "
    f"{compcache.ENV_REMOTE} and build.cache_remote (docs/cache.md).",
)
@click.option(
    "--launcher",
    type=click.Choice(compcache.LAUNCHERS),
    help=f"Compiler launcher (beats {compcache.ENV_LAUNCHER} and build.launcher; "
    "default: ccache when on PATH).",
)
@click.option(
    "--dist",
    metavar="URL",
    help=f"Compile on sccache-dist build servers: the scheduler as "
    f"http://TOKEN@HOST:PORT (beats {compcache.ENV_DIST}; implies sccache).",
)
@click.pass_context
def build_cmd(
    ctx: click.Context,
    recipe: str | None,
    upstream: str | None,
    out: Path | None,
    jobs: int | None,
    clean: bool,
    no_smoke: bool,
    cuda_root: Path | None,
    cache_remote: str | None,
    launcher: str | None,
    dist: str | None,
    configure_only: bool = False,
    resmoke: bool = False,
) -> None:
    env = dict(os.environ)  # what cmake and the compilers run with: this process's, now
    check_parallel_env(jobs, env)  # before the recipe: a bad environment is exit 2 whatever it holds
    project, _, rec = load_recipe_arg(ctx, recipe)
    run_logged(
        build_options(
            recipe=rec,
            project=project,
            env=env,
            out=out,
            upstream=upstream,
            jobs=jobs,
            clean=clean,
            smoke=not no_smoke,
            resmoke=resmoke,
            configure_only=configure_only,
            cuda_root=cuda_root,
            cache_remote=cache_remote,
            launcher=launcher,
            dist=dist,
        )
    )


build_cmd.help = (
    f"Build RECIPE: a bare NAME is recipes/NAME.toml (always); anything with a "
    f"/ or a .toml suffix is a path to a recipe file. Default: {DEFAULT_RECIPE}."
)

COMMANDS = [build_cmd]
