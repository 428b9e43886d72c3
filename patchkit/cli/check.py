"""`patchkit check` and `patchkit refresh`.

Output: the human table goes to stderr (with the rest of the log); ``--json``
prints one JSON document to stdout. ``check`` exits 0 when every in-range patch
applies (or is already upstream), 11 (CheckFailed) when one conflicts, and 2/4
(ConfigError/SourceError) for bad refs, ranges or repositories.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Sequence
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from patchkit.upkeep.scratch import PatchResult, Status
from patchkit.upkeep.check import BisectReport, CheckReport, bisect, check_range, check_series
from patchkit.cli._common import DEFAULT_RECIPE, load_project
from patchkit.core.errors import CheckFailed, ConfigError, RecipeError
from patchkit.git.repo import parse_range
from patchkit.core.log import log
from patchkit.core.paths import cache_dir
from patchkit.model.recipe import Recipe, load_recipe, resolve_recipe_path
from patchkit.upkeep.refresh import RefreshOptions, refresh_abort, refresh_continue, refresh_start
from patchkit.model.series import Patch, Series

__all__ = ["COMMANDS", "resolve_repo"]

_URL = re.compile(r"^[a-z][a-z0-9+.-]*://|^[^/\\]+@[^/\\]+:")


def _local_path(url: str) -> Path | None:
    if url.startswith("file://"):
        return Path(url[len("file://"):])
    if _URL.match(url):
        return None
    return Path(url).expanduser()


def resolve_repo(*, repo: Path | None, upstream: str | None, recipe: Recipe | None) -> Path:
    """The local git repository to check against.

    ``--repo`` (used as is, read-only), else ``--upstream`` or the recipe's
    upstream.url: a local path is used as is, a remote URL through the cache's
    partial clone (fetched first, so ``origin/master`` is current).
    """
    if repo is not None:
        if not repo.exists():
            raise ConfigError(f"--repo {repo} does not exist")
        return repo.resolve()
    url = upstream or (recipe.upstream.url if recipe else None)
    if url is None:
        raise ConfigError("no upstream repository: pass --repo PATH or --upstream URL_OR_PATH")
    local = _local_path(url)
    if local is None:  # a remote URL: the cache's partial clone, freshly fetched
        from patchkit.core.lock import cache_lock
        from patchkit.core.paths import cache_dir
        from patchkit.git.cache import ensure_clone, update_clone

        with cache_lock(cache_dir(), f"patchkit check ({url})"):
            clone = ensure_clone(cache_dir(), url)
            update_clone(clone, url)
        return clone
    if not local.exists():
        raise ConfigError(f"upstream path {local} does not exist: pass --repo PATH")
    return local.resolve()


def _load(ctx: click.Context, recipe_arg: str | None, need_recipe: bool
          ) -> tuple[Path, Series, Recipe | None]:
    project, series = load_project(ctx)
    if recipe_arg is None and not need_recipe:
        try:
            path = resolve_recipe_path(DEFAULT_RECIPE, project)
        except RecipeError:
            return project, series, None
    else:
        path = resolve_recipe_path(recipe_arg or DEFAULT_RECIPE, project)
    return project, series, load_recipe(path, project, series)


def _select(series: Series, recipe: Recipe | None, all_: bool) -> tuple[Patch, ...]:
    if all_:
        return series.patches
    assert recipe is not None
    return recipe.patches


# -- rendering ---------------------------------------------------------------------------
_STYLE = {Status.APPLIES: "green", Status.OFFSET: "green", Status.CONFLICTS: "bold red",
          Status.UPSTREAM: "cyan", Status.NA: "dim"}


def _cell(r: PatchResult) -> str:
    text = escape(r.label)
    for c in r.conflicts:
        if c.hunk is not None:
            text += f"\n[dim]{escape(f'hunk {c.hunk}: {c.header[:60]}')}[/dim]"
    if r.note:
        text += f"\n[dim]({escape(r.note)})[/dim]"
    return f"[{_STYLE[r.status]}]{text}[/]"


def render_check(report: CheckReport, *, group: bool) -> Table:
    """Rows: refs (runs of consecutive commits with the same verdicts when ``group``)."""
    table = Table(title=f"patch check against {report.repo}", title_justify="left")
    table.add_column("ref")
    table.add_column("commit")
    for name in report.patches:
        table.add_column(name)
    rows: list[list] = []  # [first, last, count, results]
    for ref in report.refs:
        labels = tuple((r.label, r.note) for r in ref.results)
        if group and rows and rows[-1][3] == labels:
            rows[-1][1] = ref
            rows[-1][2] += 1
        else:
            rows.append([ref, ref, 1, labels])
    for first, last, count, _ in rows:
        if count == 1:
            name = first.name
            commit = f"{first.commit.date[:10]} {first.commit.subject[:50]}"
        else:
            name = f"{first.commit.short[:9]}..{last.commit.short[:9]}"
            commit = f"{count} commits, {first.commit.date[:10]} .. {last.commit.date[:10]}"
        table.add_row(name, escape(commit), *(_cell(r) for r in first.results))
    return table


def render_bisect(report: BisectReport) -> list[str]:
    """One paragraph per patch: the verdict, and the upstream commit that changed it."""
    lines = [f"bisect {report.old.short}..{report.new.short}: {report.range_size} first-parent "
             f"commits, {report.probes} probed"]
    width = max(len(r.patch) for r in report.results) if report.results else 0
    for r in report.results:
        head = f"  {r.patch:<{width}}  "
        c = r.first_bad
        res = r.result.label if r.result else ""
        if r.verdict in ("broken", "merged-upstream") and c is not None:
            what = "broken by" if r.verdict == "broken" else "merged upstream by"
            lines.append(f"{head}{what} {c.short} {c.date} {c.subject}")
            pad = " " * len(head)
            if r.files:
                lines.append(f"{pad}which touched {', '.join(r.files)}")
            if r.last_good is not None:
                lines.append(f"{pad}last applies at {r.last_good.short}; then: {res}")
        elif r.verdict == "fails-at-start" and c is not None:
            lines.append(f"{head}already fails at the start of the range ({c.short}): {res}")
        elif r.verdict == "applies-throughout":
            lines.append(f"{head}applies throughout ({res})")
        else:
            lines.append(f"{head}n/a: outside its When range across the whole range")
    return lines


def _print_table(table: Table) -> None:
    """To the log; off a terminal (CI logs, pipes) wide enough not to wrap every cell."""
    if log.console.is_terminal:
        log.console.print(table)
        return
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None, highlight=False).print(table)
    log.console.out("\n".join(ln.rstrip() for ln in buf.getvalue().splitlines()), highlight=False)


def _fail_check(failures: Sequence[tuple[str, PatchResult]]) -> None:
    ref, res = failures[0]
    more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
    raise CheckFailed(f"{res.patch} does not apply to {ref}: {res.label}{more}",
                      hint="`patchkit refresh --onto REF` rebases the series with 3-way merges")


# -- commands -------------------------------------------------------------------------------
_repo_opts = [
    click.option("--repo", type=click.Path(file_okay=False, path_type=Path), default=None,
                 help="An existing local clone or mirror of upstream (used read-only)."),
    click.option("--upstream", "upstream", default=None, metavar="URL_OR_PATH",
                 help="Upstream repository: a local clone/mirror (used read-only) or a URL "
                      "(cloned into the cache, partial); default: the recipe's."),
    click.option("--all", "all_", is_flag=True,
                 help="Check the whole series, not just the recipe's patches."),
]


def _with_repo_opts(f):  # type: ignore[no-untyped-def]
    for opt in reversed(_repo_opts):
        f = opt(f)
    return f


@click.command("check")
@click.argument("recipe", required=False)
@click.option("--ref", "refs", multiple=True, metavar="REF",
              help="Check against this ref (repeatable); default: the recipe's pinned commit.")
@click.option("--range", "range_", metavar="OLD..NEW", default=None,
              help="Check every first-parent commit of OLD..NEW (OLD excluded).")
@click.option("--bisect", "do_bisect", is_flag=True,
              help="With --range: find the first commit where each patch stops applying.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report to stdout.")
@_with_repo_opts
@click.pass_context
def check_cmd(ctx: click.Context, recipe: str | None, refs: tuple[str, ...], range_: str | None,
              do_bisect: bool, as_json: bool, repo: Path | None, upstream: str | None,
              all_: bool) -> None:
    """Do the patches still apply to upstream? Against the pin, refs, or a range.

    Each patch gets: applies, applies-with-offset, conflicts (file:hunk),
    already-upstream (it reverse-applies: drop it) or n/a (outside its When
    range). The series is cumulative. Exit code 11 when an in-range patch conflicts.
    """
    if do_bisect and not range_:
        raise ConfigError("--bisect needs --range OLD..NEW")
    if range_ and refs:
        raise ConfigError("give --ref or --range, not both")
    need_recipe = not all_ or (not refs and not range_) or (repo is None and upstream is None)
    _project, series, rec = _load(ctx, recipe, need_recipe)
    patches = _select(series, rec, all_)
    if not patches:
        raise ConfigError("no patches selected: the recipe lists none (use --all for the series)")
    repo_path = resolve_repo(repo=repo, upstream=upstream, recipe=rec)
    if range_:
        old, new = parse_range(range_)
        if do_bisect:
            with log.step(f"bisect {len(patches)} patches over {range_}"):
                breport = bisect(repo_path, patches, old, new)
            for line in render_bisect(breport):
                log.info(line)
            if as_json:
                click.echo(json.dumps(breport.to_json(), indent=2, sort_keys=True))
            bad = [r for r in breport.results if r.failed]
            if bad:
                r = bad[0]
                assert r.result is not None
                at = r.first_bad.short if r.first_bad else new
                raise CheckFailed(f"{r.patch} stops applying at {at}: {r.result.label}",
                                  hint="`patchkit refresh --onto REF` rebases the series")
            return
        with log.step(f"check {len(patches)} patches against {range_}"):
            report = check_range(repo_path, patches, old, new)
    else:
        targets = list(refs) or ([rec.upstream.commit] if rec else [])
        if not targets:
            raise ConfigError("nothing to check against: pass --ref REF or a recipe")
        with log.step(f"check {len(patches)} patches against {len(targets)} ref(s)"):
            report = check_series(repo_path, patches, targets)
    _print_table(render_check(report, group=bool(range_)))
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    if not report.ok:
        _fail_check([(r.name, p) for r, p in report.failures()])


@click.command("refresh")
@click.argument("recipe", required=False)
@click.option("--onto", default=None, metavar="COMMIT", help="The upstream commit to rebase onto.")
@click.option("--continue", "cont", is_flag=True, help="Go on after fixing a conflict.")
@click.option("--abort", is_flag=True, help="Drop the refresh in progress.")
@click.option("--from", "base", default=None, metavar="REF",
              help="Where the series applies today (default: the recipe's pinned commit).")
@click.option("--move-pin", is_flag=True, help="Also set the recipe's upstream.commit to COMMIT.")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Scratch folder (default: in the cache, per recipe).")
@_with_repo_opts
@click.pass_context
def refresh_cmd(ctx: click.Context, recipe: str | None, onto: str | None, cont: bool, abort: bool,
                base: str | None, move_pin: bool, workdir: Path | None, repo: Path | None, upstream: str | None,
                all_: bool) -> None:
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
        workdir = cache_dir() / "refresh" / re.sub(r"[^A-Za-z0-9._-]", "_", Path(label).stem)
    if abort:
        refresh_abort(workdir)
        log.info(f"refresh aborted; removed {workdir}")
        return
    if cont:
        with log.step("refresh: continue"):
            result = refresh_continue(workdir)
    else:
        need_recipe = not all_ or move_pin or (repo is None and upstream is None)
        project, series, rec = _load(ctx, recipe, need_recipe)
        if move_pin and rec is None:
            raise ConfigError("--move-pin needs a recipe")
        patches = _select(series, rec, all_)
        repo_path = resolve_repo(repo=repo, upstream=upstream, recipe=rec)
        assert onto is not None
        with log.step(f"refresh {len(patches)} patches onto {onto}"):
            result = refresh_start(RefreshOptions(
                repo=repo_path, patches=patches, patches_dir=series.directory, onto=onto,
                base=base or (rec.upstream.commit if rec else None), workdir=workdir, recipe_path=rec.path if rec else None, move_pin=move_pin))
    for f in result.updated:
        log.info(f"updated   {f}")
    for f in result.unchanged:
        log.info(f"unchanged {f}")
    for f in result.skipped:
        log.info(f"skipped   {f} (outside its When range at {result.onto[:12]}; left as is)")
    if result.pin_moved:
        log.info(f"recipe pin moved to {result.onto}")


COMMANDS = [check_cmd, refresh_cmd]
