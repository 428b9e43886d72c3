"""`patchkit bump`: move every recipe of one upstream to a newer commit (upkeep.bump)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from patchkit.builder.output import check_out_dir
from patchkit.cli._build_opts import MAX_JOBS, build_options, check_parallel_env, run_logged
from patchkit.cli._common import DEFAULT_RECIPE, load_recipe_arg, resolve_repo
from patchkit.cli.problems import said
from patchkit.cli.refresh import naming_refresh
from patchkit.cli.refresh import report as report_refresh
from patchkit.core.errors import BuildError, ConfigError, FatalError, PatchError
from patchkit.core.fs import atomic_write_text, check_writable, read_capped
from patchkit.core.log import log
from patchkit.core.paths import cache_dir, cache_layout, default_out_dir
from patchkit.core.text import printable
from patchkit.spec.recipe import Recipe, list_recipes, load_recipe, resolve_recipe_path
from patchkit.upkeep.bump import BumpOptions, BumpStopped, run_bump
from patchkit.upkeep.bump_summary import md_code, render_summary
from patchkit.upkeep.compile_errors import PatchErrors, compile_errors

__all__ = ["COMMANDS"]


def _same_upstream(a: str, b: str) -> bool:
    def norm(u: str) -> str:
        return u.strip().rstrip("/").removesuffix(".git").lower()

    return norm(a) == norm(b)


_LOG_MAX = 256 * 1024 * 1024  # a failed build's log read for compile errors


def _emit(text: str, summary: Path | None) -> None:
    # upstream's and the patches' text is in code spans already; the printer escapes what
    # could still act on a terminal, line by line (one printer for everything untrusted)
    text = "\n".join(printable(ln) for ln in text.split("\n"))
    click.echo(text, nl=False)
    if summary is not None:
        # a name the user gave: a link there is written through, /dev/stdout streams
        atomic_write_text(summary, text, follow_links=True)
        log.info(printable(f"wrote {summary}"))


def _check_outputs(summary: Path | None, build: Recipe | None, out: Path | None) -> None:
    """Every file or folder bump writes besides the project, checked before the project is
    changed: a summary that cannot be written, or a build output folder that is not
    patchkit's, stops the bump with nothing written."""
    if summary is not None:
        check_writable(summary, follow_links=True)
    if build is not None:
        check_out_dir(out or default_out_dir(build.name), cache_dir())


@click.command("bump")
@click.argument("recipe", required=False)
@click.option(
    "--upstream",
    "upstream",
    default=None,
    metavar="URL_OR_PATH",
    help="Where to fetch from: a git URL (fetched into the cache, partial) or a local "
    "clone/mirror (used read-only); default: the recipe's upstream.url.",
)
@click.option(
    "--to",
    "to",
    default=None,
    metavar="REF",
    help="The commit to move to (default: the newest of the upstream's default branch).",
)
@click.option("--dry-run", is_flag=True, help="Say what would happen; write nothing.")
@click.option(
    "--build",
    "build_recipe",
    default=None,
    metavar="RECIPE",
    help="After moving the pins, build RECIPE and run its smoke checks.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="With --build: the output folder (default out/<recipe>).",
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1, max=MAX_JOBS),
    default=None,
    help="With --build: parallel compile jobs.",
)
@click.option(
    "--summary",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the markdown summary to this file (a pull-request body).",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The refresh's scratch folder (default: refresh's, in the cache, per "
    "recipe: `patchkit refresh [RECIPE] --continue/--abort` find it).",
)
@click.option(
    "--drop-upstreamed",
    is_flag=True,
    help="Drop the patches found already upstream in the range instead of merging them "
    "(as `patchkit refresh --drop-upstreamed`).",
)
@click.pass_context
def bump_cmd(
    ctx: click.Context,
    recipe: str | None,
    upstream: str | None,
    to: str | None,
    dry_run: bool,
    build_recipe: str | None,
    out: Path | None,
    jobs: int | None,
    summary: Path | None,
    workdir: Path | None,
    drop_upstreamed: bool,
) -> None:
    """Move every recipe on RECIPE's upstream to a newer upstream commit.

    Fetches, checks the series at the target, refreshes it (3-way) when a patch does not
    apply exactly, and moves the pin of every recipe on that upstream: all or none. At a
    conflict it stops like `refresh` (finish with `patchkit refresh [RECIPE] --continue`,
    which moves the pins, or drop it with `--abort`). Prints a markdown summary for a pull
    request on stdout. RECIPE (default cpu-rpc) names the upstream.
    """
    if dry_run and build_recipe:
        raise ConfigError("--build builds the moved recipe: it cannot go with --dry-run")
    if (out is not None or jobs is not None) and not build_recipe:
        raise ConfigError("--out and -j are for --build RECIPE")
    project, series, rec = load_recipe_arg(ctx, recipe)
    recipes = [
        r
        for r in (load_recipe(p, project, series) for p in list_recipes(project))
        if _same_upstream(r.upstream.url, rec.upstream.url)
    ]
    target: Recipe | None = None
    if build_recipe is not None:
        target = load_recipe(resolve_recipe_path(build_recipe, project), project, series)
        if not any(r.path == target.path for r in recipes):
            raise ConfigError(
                f"--build {build_recipe}: that recipe is not on "
                f"{rec.upstream.url}, so the bump does not move it"
            )
    _check_outputs(summary, target, out)
    if build_recipe is not None:
        check_parallel_env(jobs, dict(os.environ))
    repo = resolve_repo(repo=None, upstream=upstream, recipe=rec)
    label = recipe or DEFAULT_RECIPE
    opts = BumpOptions(
        repo=repo,
        upstream=upstream or rec.upstream.url,
        recipes=tuple(recipes),
        patches=series.patches,
        patches_dir=series.directory,
        # absolute from here on (the refresh runs git in its scratch tree)
        workdir=(workdir or cache_layout().refresh(Path(label).stem)).absolute(),
        to=to,
        dry_run=dry_run,
        drop_upstreamed=drop_upstreamed,
        workdir_given=workdir is not None,
        rerere=cache_layout().rerere,
        independent=series.independent,
    )
    step = f"bump {len(recipes)} recipe(s) on {rec.upstream.url}" + (" (dry run)" if dry_run else "")
    with log.step(printable(step)):
        try:
            with naming_refresh(recipe, workdir.absolute() if workdir is not None else None):
                result = run_bump(opts)
        except BumpStopped as e:
            # a conflict: the summary so far, then refresh's one-line error (state kept)
            _emit(render_summary(e.result), summary)
            # refresh's hint names the exact command (recipe, --workdir); --continue also
            # moves every recipe's pin
            raise PatchError(
                e.message, detail=e.detail, hint=f"{e.hint} (--continue also moves every recipe's pin)"
            ) from None
    if result.refresh is not None and not dry_run:
        report_refresh(result.refresh)  # what was dropped, kept though upstream, reused (stderr)
    build_lines: list[str] = []
    errors: list[PatchErrors] = []
    error: FatalError | None = None
    if build_recipe is not None and not result.plan.up_to_date:
        review = {r.file: r.names for r in result.refresh.review} if result.refresh else {}
        error = _build(ctx, build_recipe, upstream, out, jobs, build_lines, errors, review)
    _emit(render_summary(result, build_lines=build_lines, errors=errors), summary)
    if error is not None:
        raise error
    if result.stopped and dry_run:
        log.warning(printable(f"dry run: the refresh would stop ({result.stopped})"))


def _build(
    ctx: click.Context,
    name: str,
    upstream: str | None,
    out: Path | None,
    jobs: int | None,
    lines: list[str],
    errors: list[PatchErrors],
    review: dict[str, tuple[str, ...]],
) -> FatalError | None:
    """`patchkit build NAME` with its smoke checks, on the moved pin (the recipe read again);
    its lines for the summary, a failed compile's errors in patched lines (``errors``), and
    its error (raised after the summary is out); ``review``: the refresh's clean merges to
    review (patch file → the changed functions it calls), whose errors are listed too."""
    rec: Recipe | None = None
    try:
        env = dict(os.environ)  # what cmake and the compilers run with, as for `patchkit build`
        check_parallel_env(jobs, env)
        project, _, rec = load_recipe_arg(ctx, name)
        opts = build_options(recipe=rec, project=project, env=env, out=out, upstream=upstream, jobs=jobs)
        result = run_logged(opts)
    except FatalError as e:
        lines.append(
            f"{md_code(f'patchkit build {name}')}: **failed** (exit {e.exit_code}): {md_code(said(e))}"
        )
        if isinstance(e, BuildError) and rec is not None:
            errors += _patched_errors(rec, upstream, review)
            if errors:
                n = sum(len(pe.errors) for pe in errors)
                log.warning(
                    f"{n} compile error(s) in lines the patches cover: the summary lists them per patch"
                )
        return e
    info = result.info
    assert info is not None  # a full build, never configure-only
    smoke = info.smoke
    lines.append(
        f"`patchkit build {name}`: ok, upstream `{info.upstream.commit[:12]}`, "
        f"RPC protocol {info.rpc_protocol or '-'}; smoke "
        f"{smoke.status.value if smoke else 'not run'}"
    )
    if smoke:
        lines += [f"- {c.name}: {c.status.value}" for c in smoke.checks]
    return None


def _patched_errors(
    rec: Recipe, upstream: str | None, review: dict[str, tuple[str, ...]]
) -> list[PatchErrors]:
    """The failed build's compile errors that point into lines a patch of the recipe covers
    (its log and worktree where `patchkit build` keeps them)."""
    work = cache_layout().work(rec.name, upstream or rec.upstream.url)
    try:
        text = read_capped(work.log, limit=_LOG_MAX, error=ConfigError, what=str(work.log))
    except ConfigError:
        return []
    return list(
        compile_errors(
            text.decode("utf-8", "replace"), rec.patches, src=work.src, build=work.build, review=review
        )
    )


COMMANDS = [bump_cmd]
