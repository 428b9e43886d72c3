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

import click
from rich import box
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
from patchkit.core.text import printable
from patchkit.git.repo import parse_range
from patchkit.upkeep.check import (
    BisectReport,
    CheckReport,
    CheckVerdict,
    RefResult,
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
# the table fits 120 columns at any number of patches: one row per patch, cells cut with "…"
_NAME_WIDTH = 34
_CELL_WIDTH = 22
_SINCE_WIDTH = 30
_LINE_WIDTH = 120  # the lines below the table


def _hunks(nums: Sequence[int]) -> str:
    """1,2,3,5 -> 1-3,5"""
    runs: list[list[int]] = []  # [first, last] of each run of consecutive numbers
    for n in sorted(set(nums)):
        if runs and runs[-1][1] == n - 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _where(r: PatchVerdict, *, full: bool) -> str:
    """A conflict's files and hunks, compact: ``llama-arch.cpp:1-3,5`` (``full``: paths)."""
    by_file: dict[str, list[int]] = {}
    whole: dict[str, str] = {}
    for c in r.conflicts:
        f = c.file if full else c.file.rsplit("/", 1)[-1]
        if c.hunk is None:
            whole[f] = c.reason
        else:
            by_file.setdefault(f, []).append(c.hunk)
    parts = [f"{f}:{_hunks(h)}" for f, h in by_file.items()]
    parts += [f"{f} ({why})" for f, why in whole.items()]
    return " ".join(parts)


def _short(r: PatchVerdict, numbers: dict[str, int]) -> str:
    """A verdict in a few words (the whole of it is in --json and the lines below the table)."""
    if isinstance(r, CheckVerdict) and r.cascade_of:
        return "cascade of " + ",".join(f"#{numbers[n]}" for n in r.cascade_of)
    if r.status is Status.CONFLICTS:
        return "conflicts " + _where(r, full=False)
    if r.status is Status.OFFSET:
        most = max(r.offsets, key=lambda o: abs(o.lines))
        return f"offset {most.lines:+d}"
    if r.status is Status.UPSTREAM:
        return "upstream"
    return str(r.status.value)


def _cell(r: PatchVerdict, numbers: dict[str, int]) -> str:
    style = "yellow" if isinstance(r, CheckVerdict) and r.cascade_of else _STYLE[r.status]
    return f"[{style}]{escape(printable(_short(r, numbers)))}[/]"


def _key(r: PatchVerdict) -> tuple[str, tuple[str, ...]]:
    return r.label, r.cascade_of if isinstance(r, CheckVerdict) else ()


def render_check(report: CheckReport, *, group: bool) -> tuple[list[str], Table, list[str]]:
    """One row per patch. Refs (``--ref``): a column per ref. A range (``group``): the
    verdict at its first and last commit, and the commit since which the last one holds.
    Before it the title lines; after it one line per patch that does not apply at the last
    ref, with the whole verdict (each line at most 120 columns)."""
    numbers = {name: i for i, name in enumerate(report.patches, 1)}
    refs = report.refs
    title = [printable(f"patch check against {report.repo}")]
    if group and refs:
        title.append(
            f"{len(report.patches)} patches x {len(refs)} first-parent commits "
            f"{refs[0].commit.short}..{refs[-1].commit.short}; since: the commit from which "
            "the last verdict holds"
        )
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("patch", no_wrap=True, overflow="ellipsis", max_width=_NAME_WIDTH)
    cols: list[RefResult]
    if group and refs:
        cols = [refs[0], refs[-1]] if len(refs) > 1 else [refs[0]]
        heads = [f"first {refs[0].commit.short}", f"last {refs[-1].commit.short}"][: len(cols)]
    else:
        cols = list(refs)
        heads = [r.name if len(r.name) <= _CELL_WIDTH else r.commit.short for r in refs]
    for h in heads:
        table.add_column(escape(printable(h)), no_wrap=True, overflow="ellipsis", max_width=_CELL_WIDTH)
    if group and len(refs) > 1:
        table.add_column("since", no_wrap=True, overflow="ellipsis", max_width=_SINCE_WIDTH)
    for i, name in enumerate(report.patches):
        row = [str(i + 1), escape(printable(name)), *(_cell(r.results[i], numbers) for r in cols)]
        if group and len(refs) > 1:
            row.append(escape(_since(refs, i)))
        table.add_row(*row)
    lines: list[str] = []
    end = refs[-1] if refs else None
    for i, name in enumerate(report.patches):
        r = end.results[i] if end is not None else None
        if r is None or r.status is not Status.CONFLICTS:
            continue
        if isinstance(r, CheckVerdict) and r.cascade_of:
            nums = ", ".join(f"#{numbers[n]}" for n in r.cascade_of)
            what = f"cascade of {nums} (needs what it adds), fails at " + _where(r, full=True)
        else:
            what = "conflicts " + _where(r, full=True)
            left = [n for n in report.patches if n in r.note]
            if r.note.startswith("checked without") and left:
                what += " (checked without " + ", ".join(f"#{numbers[n]}" for n in left) + ")"
        line = printable(f"#{i + 1} {name}: {what}")
        if len(line) > _LINE_WIDTH:
            line = line[: _LINE_WIDTH - 1] + "…"
        lines.append(line)
    if lines:
        at = end.commit.short if end is not None else ""
        lines.insert(0, f"at {at} (--json or --bisect say all):")
    by_file = {u.file: u for u in report.upstream}
    ups: list[str] = []
    for i, name in enumerate(report.patches):
        u = by_file.get(name)
        if u is None:
            continue
        verdict = "proven (--drop-upstreamed drops it)" if u.proven else "proposed only (kept)"
        line = printable(f"#{i + 1} {name}: {verdict}: {u.describe()}")
        ups.append(line if len(line) <= _LINE_WIDTH else line[: _LINE_WIDTH - 1] + "…")
    if ups and end is not None:
        since = f" since {report.base.short}" if report.base is not None else ""
        lines += [f"upstream at {end.commit.short}{since} (as refresh finds it):", *ups]
    return title, table, lines


def _since(refs: Sequence[RefResult], i: int) -> str:
    """The commit since which patch ``i`` has its verdict at the range's end ('' when it had
    it all along)."""
    last = _key(refs[-1].results[i])
    k = len(refs) - 1
    while k > 0 and _key(refs[k - 1].results[i]) == last:
        k -= 1
    if k == 0:
        return ""
    c = refs[k].commit
    return f"{c.short[:10]} {c.date[:10]} {printable(c.subject)}"


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
    return [printable(ln) for ln in lines]  # names, paths and subjects are the patches' and upstream's


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
    range). The series is cumulative (a series of independent patches: each on the
    commit alone). Below the table, what is upstream as refresh
    finds it since the pin (or the range's start): proven (the same patch-id, the
    cherry-picked commit, the change there) or only proposed (a title, a pull request).
    Exit code 11 when an in-range patch conflicts.
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
            with log.step(printable(f"bisect {len(patches)} patches over {range_}")):
                breport = bisect(repo_path, patches, old, new, independent=series.independent)
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
        with log.step(printable(f"check {len(patches)} patches against {range_}")):
            report = check_range(repo_path, patches, old, new, independent=series.independent)
    else:
        targets = list(refs) or ([rec.upstream.commit] if rec else [])
        if not targets:
            raise ConfigError("nothing to check against: pass --ref REF or a recipe")
        with log.step(f"check {len(patches)} patches against {len(targets)} ref(s)"):
            report = check_series(
                repo_path,
                patches,
                targets,
                base=rec.upstream.commit if rec and refs else None,
                independent=series.independent,
            )
    title, table, lines = render_check(report, group=bool(range_))
    for line in title:
        out(line, err=as_json)
    out_table(table, err=as_json)
    for line in lines:
        out(line, err=as_json)
    if as_json:
        out_json(report.to_json())
    if not report.ok:
        _fail_check([(r.name, p) for r, p in report.failures()])


COMMANDS = [check_cmd]
