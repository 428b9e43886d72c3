"""The one place the CLI turns build flags into builder.pipeline.BuildOptions, and runs
the build engine with the lines every CLI build prints (`patchkit build`, `bump --build`).

The flags, the process environment (a snapshot: what cmake and the compilers run with)
and the recipe are resolved here, before anything runs: the compile-cache settings (flag >
environment > recipe; a bad URL is one line, exit 2, never its password), the output folder
(``--out``, else core.paths.default_out_dir), the cache (core.paths.cache_dir). A bad
``CMAKE_BUILD_PARALLEL_LEVEL`` is a bad command line too (:func:`check_parallel_env`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.builder import compcache
from patchkit.builder.pipeline import BuildOptions, BuildResult, run_build
from patchkit.core.errors import ConfigError
from patchkit.core.log import log
from patchkit.core.paths import cache_dir, default_out_dir, relative_label
from patchkit.spec.recipe import Recipe

if TYPE_CHECKING:
    from patchkit.spec.buildinfo import CheckResult

__all__ = ["MAX_JOBS", "PARALLEL_ENV", "build_options", "check_parallel_env", "run_logged"]

MAX_JOBS = 4096
PARALLEL_ENV = "CMAKE_BUILD_PARALLEL_LEVEL"  # what `cmake --build` uses without -j


def check_parallel_env(jobs: int | None, env: Mapping[str, str]) -> None:
    """Without -j, cmake takes its job count from CMAKE_BUILD_PARALLEL_LEVEL: a bad value
    there is a bad command line too (exit 2), not a build failure after the configure."""
    raw = env.get(PARALLEL_ENV)
    if jobs is not None or raw is None or raw == "":
        return
    value = raw.strip()
    if not value.isdigit() or not 1 <= int(value) <= MAX_JOBS:
        raise ConfigError(
            f"{PARALLEL_ENV}={raw[:40]!r} is not a job count (1-{MAX_JOBS})",
            hint=f"unset it, or pass -j N (1-{MAX_JOBS}), which wins over it",
        )


def build_options(
    *,
    recipe: Recipe,
    project: Path,
    env: Mapping[str, str],
    out: Path | None = None,
    upstream: str | None = None,
    jobs: int | None = None,
    clean: bool = False,
    smoke: bool = True,
    resmoke: bool = False,
    configure_only: bool = False,
    cuda_root: Path | None = None,
    cache_remote: str | None = None,
    launcher: str | None = None,
    dist: str | None = None,
) -> BuildOptions:
    """The build of ``recipe`` the flags ask for (each flag as `patchkit build` names it);
    ConfigError / RecipeError for a compile-cache setting that does not parse."""
    settings = compcache.resolve(
        remote_flag=cache_remote,
        launcher_flag=launcher,
        env=env,
        recipe_remote=recipe.build.cache_remote,
        recipe_launcher=recipe.build.launcher,
        recipe_label=relative_label(recipe.path, project),
        dist_flag=dist,
    )
    return BuildOptions(
        recipe=recipe,
        project=project,
        cache=cache_dir(),
        out=out or default_out_dir(recipe.name),
        compile_cache=settings,
        env=env,
        upstream=upstream,
        jobs=jobs,
        clean=clean,
        smoke=smoke,
        resmoke=resmoke,
        cuda_root=cuda_root,
        on_check=_print_check,
        configure_only=configure_only,
    )


def run_logged(opts: BuildOptions) -> BuildResult:
    """The build, between the line saying what it builds and the line saying where it went."""
    rec = opts.recipe
    log.info(
        f"recipe {rec.name}: upstream {rec.upstream.commit[:12]}, "
        f"{len(rec.patches)} patch(es), targets {', '.join(rec.build.targets)}"
    )
    result = run_build(opts)
    total = sum(result.timings.values())
    if opts.configure_only:
        log.info(f"configured in {total:.1f}s: {result.out_dir}/ (nothing built)")
    else:
        log.info(f"done in {total:.1f}s: {result.out_dir}/")
    return result


def _print_check(r: CheckResult) -> None:
    """`patchkit smoke`'s line per check, on stderr with the build's progress (imported when
    a check ran: a build that reuses the smoke verdict does not load the checks)."""
    from patchkit.cli.smoke import print_check

    print_check(r, err=True)
