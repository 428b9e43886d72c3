"""`patchkit build [RECIPE]`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from patchkit.builder import compcache
from patchkit.builder.pipeline import BuildOptions, run_build
from patchkit.cli._common import DEFAULT_RECIPE, load_recipe_arg
from patchkit.core.errors import ConfigError
from patchkit.core.log import log
from patchkit.core.paths import cache_dir, default_out_dir

if TYPE_CHECKING:
    from patchkit.spec.buildinfo import CheckResult

__all__ = ["COMMANDS"]

MAX_JOBS = 4096
_PARALLEL_ENV = "CMAKE_BUILD_PARALLEL_LEVEL"  # what `cmake --build` uses without -j


def _check_parallel_env(jobs: int | None) -> None:
    """Without -j, cmake takes its job count from CMAKE_BUILD_PARALLEL_LEVEL: a bad value
    there is a bad command line too (exit 2), not a build failure after the configure."""
    raw = os.environ.get(_PARALLEL_ENV)
    if jobs is not None or raw is None or raw == "":
        return
    value = raw.strip()
    if not value.isdigit() or not 1 <= int(value) <= MAX_JOBS:
        raise ConfigError(
            f"{_PARALLEL_ENV}={raw[:40]!r} is not a job count (1-{MAX_JOBS})",
            hint=f"unset it, or pass -j N (1-{MAX_JOBS}), which wins over it",
        )


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
    help=f"Parallel build jobs (1-{MAX_JOBS}; default: ${_PARALLEL_ENV}, else ninja's).",
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
    _check_parallel_env(jobs)
    project, _, rec = load_recipe_arg(ctx, recipe)
    # checked before anything runs: a bad URL is one line (exit 2), never its password
    settings = compcache.resolve(
        remote_flag=cache_remote,
        launcher_flag=launcher,
        recipe_remote=rec.build.cache_remote,
        recipe_launcher=rec.build.launcher,
        recipe_label=_label(rec.path, project),
        dist_flag=dist,
    )
    log.info(
        f"recipe {rec.name}: upstream {rec.upstream.commit[:12]}, "
        f"{len(rec.patches)} patch(es), targets {', '.join(rec.build.targets)}"
    )
    result = run_build(
        BuildOptions(
            recipe=rec,
            project=project,
            cache=cache_dir(),
            out=out or default_out_dir(rec.name),
            compile_cache=settings,
            env=dict(os.environ),
            upstream=upstream,
            jobs=jobs,
            clean=clean,
            smoke=not no_smoke,
            resmoke=resmoke,
            cuda_root=cuda_root,
            on_check=_print_check,
            configure_only=configure_only,
        )
    )
    total = sum(result.timings.values())
    if configure_only:
        log.info(f"configured in {total:.1f}s: {result.out_dir}/ (nothing built)")
        return
    log.info(f"done in {total:.1f}s: {result.out_dir}/")


def _print_check(r: CheckResult) -> None:
    """`patchkit smoke`'s line per check (imported when a check ran: a build that reuses
    the smoke verdict does not load the checks)."""
    from patchkit.cli.smoke import print_check

    print_check(r)


def _label(path: Path, project: Path) -> str:
    try:
        return path.resolve().relative_to(project.resolve()).as_posix()
    except ValueError:
        return str(path)


build_cmd.help = (
    f"Build RECIPE: a bare NAME is recipes/NAME.toml (always); anything with a "
    f"/ or a .toml suffix is a path to a recipe file. Default: {DEFAULT_RECIPE}."
)

COMMANDS = [build_cmd]
