"""`patchkit check`.

Output: the human table (``--bisect``: one paragraph per patch) goes to stdout, the steps
to stderr; ``--json`` prints one JSON document to stdout instead (``CheckReport`` /
``BisectReport.to_json()``: ``schema``, ``kind``, ...) and the table goes to stderr with
the log. ``check`` exits 0 when every in-range patch applies (or is already upstream), 11
(CheckFailed) when one conflicts, and 2/4 (ConfigError/SourceError) for bad refs, ranges
or repositories.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from patchkit.cli._common import (
    load_optional_recipe,
    out,
    out_json,
    out_table,
    repo_options,
    resolve_repo,
    select_patches,
)
from patchkit.core.errors import CheckFailed, ConfigError
from patchkit.core.log import log
from patchkit.git.repo import parse_range
from patchkit.upkeep.check import (
    BisectReport,
    CheckReport,
    Verdict,
    bisect,
    check_range,
    check_series,
)
from patchkit.upkeep.scratch import PatchVerdict, Status

__all__ = ["COMMANDS", "render_bisect", "render_check"]

# -- rendering ---------------------------------------------------------------------------
_STYLE = {
    Status.APPLIES: "green",
    Status.OFFSET: "green",
    Status.CONFLICTS: "bold red",
    Status.UPSTREAM: "cyan",
    Status.NA: "dim",
}


def _cell(r: PatchVerdict) -> str:
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
    rows: list[list[Any]] = []  # [first, last, count, results]
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
    lines = [
        f"bisect {report.old.short}..{report.new.short}: {report.range_size} first-parent "
        f"commits, {report.probes} probed"
    ]
    width = max(len(r.patch) for r in report.results) if report.results else 0
    for r in report.results:
        head = f"  {r.patch:<{width}}  "
        c = r.first_bad
        res = r.result.label if r.result else ""
        if r.verdict in (Verdict.BROKEN, Verdict.MERGED_UPSTREAM) and c is not None:
            what = "broken by" if r.verdict is Verdict.BROKEN else "merged upstream by"
            lines.append(f"{head}{what} {c.short} {c.date} {c.subject}")
            pad = " " * len(head)
            if r.files:
                lines.append(f"{pad}which touched {', '.join(r.files)}")
            if r.last_good is not None:
                lines.append(f"{pad}last applies at {r.last_good.short}; then: {res}")
        elif r.verdict is Verdict.FAILS_AT_START and c is not None:
            lines.append(f"{head}already fails at the start of the range ({c.short}): {res}")
        elif r.verdict is Verdict.APPLIES_THROUGHOUT:
            lines.append(f"{head}applies throughout ({res})")
        else:
            lines.append(f"{head}n/a: outside its When range across the whole range")
    return lines


def _fail_check(failures: Sequence[tuple[str, PatchVerdict]]) -> None:
    ref, res = failures[0]
    more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
    raise CheckFailed(
        f"{res.patch} does not apply to {ref}: {res.label}{more}",
        hint="`patchkit refresh --onto REF` rebases the series with 3-way merges",
    )


@click.command("check")
@click.argument("recipe", required=False)
@click.option(
    "--ref",
    "refs",
    multiple=True,
    metavar="REF",
    help="Check against this ref (repeatable); default: the recipe's pinned commit.",
)
@click.option(
    "--range",
    "range_",
    metavar="OLD..NEW",
    default=None,
    help="Check every first-parent commit of OLD..NEW (OLD excluded).",
)
@click.option(
    "--bisect",
    "do_bisect",
    is_flag=True,
    help="With --range: find the first commit where each patch stops applying.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report (the table goes to stderr).")
@repo_options
@click.pass_context
def check_cmd(
    ctx: click.Context,
    recipe: str | None,
    refs: tuple[str, ...],
    range_: str | None,
    do_bisect: bool,
    as_json: bool,
    repo: Path | None,
    upstream: str | None,
    all_: bool,
) -> None:
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
    _project, series, rec = load_optional_recipe(ctx, recipe, need_recipe)
    patches = select_patches(series, rec, all_)
    if not patches:
        raise ConfigError("no patches selected: the recipe lists none (use --all for the series)")
    repo_path = resolve_repo(repo=repo, upstream=upstream, recipe=rec)
    if range_:
        old, new = parse_range(range_)
        if do_bisect:
            with log.step(f"bisect {len(patches)} patches over {range_}"):
                breport = bisect(repo_path, patches, old, new)
            for line in render_bisect(breport):
                out(line, err=as_json)
            if as_json:
                out_json(breport.to_json())
            bad = [r for r in breport.results if r.failed]
            if bad:
                r = bad[0]
                assert r.result is not None
                at = r.first_bad.short if r.first_bad else new
                raise CheckFailed(
                    f"{r.patch} stops applying at {at}: {r.result.label}",
                    hint="`patchkit refresh --onto REF` rebases the series",
                )
            return
        with log.step(f"check {len(patches)} patches against {range_}"):
            report = check_range(repo_path, patches, old, new)
    else:
        targets = list(refs) or ([rec.upstream.commit] if rec else [])
        if not targets:
            raise ConfigError("nothing to check against: pass --ref REF or a recipe")
        with log.step(f"check {len(patches)} patches against {len(targets)} ref(s)"):
            report = check_series(repo_path, patches, targets)
    out_table(render_check(report, group=bool(range_)), err=as_json)
    if as_json:
        out_json(report.to_json())
    if not report.ok:
        _fail_check([(r.name, p) for r, p in report.failures()])


COMMANDS = [check_cmd]
