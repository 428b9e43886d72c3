"""`patchkit refresh`: rebase the series onto a new upstream commit (upkeep.refresh).

At a stop: ``--continue`` (the resolution is recorded and replayed when the same conflict
comes again), ``--skip`` / ``--drop PATCH`` (like ``git am --skip``), ``--abort``; every
hint names the exact command (the recipe as given, ``--workdir`` when it was given).

``refresh --json`` keys:

- ``dropped``: left the series (upstream, --skip, --drop, empty)
- ``dropped[].commit``: the upstream commit (full sha) that has it, when known; else null
- ``dropped[].patch``: the patch file
- ``dropped[].reason``: "already upstream (subject): abc123 ...", "--drop", "skipped at a stop",
  ...
- ``onto``: the commit (full sha) the series was refreshed onto
- ``outside_when``: outside their When range at onto: left as they were
- ``pin_moved``: whether the recipe's upstream.commit moved to onto
- ``proposed_for_dropping``: found upstream but kept, proposed for dropping: each with its
  ``patch``, ``why`` and ``commit`` (full sha, or null)
- ``reused``: conflict blocks resolved from recorded resolutions
- ``review``: merged cleanly, to review (series order)
- ``review[].findings``: what to look at, each with its ``kind`` (nearby, inside, api), ``path``
  and ``text``
- ``review[].names``: The functions it calls whose declaration upstream changed.
- ``review[].patch``: the patch file
- ``unchanged``: patch files refreshed to the same bytes
- ``updated``: patch files whose bytes changed
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator
from pathlib import Path

import click

from patchkit.cli._common import (
    DEFAULT_RECIPE,
    load_optional_recipe,
    out_record,
    repo_options,
    resolve_repo,
    select_patches,
)
from patchkit.cli.problems.refresh import refresh_words
from patchkit.core.errors import ConfigError, FatalError
from patchkit.core.log import log
from patchkit.core.paths import cache_layout
from patchkit.core.text import printable
from patchkit.upkeep.refresh import (
    RefreshOptions,
    RefreshResult,
    refresh_abort,
    refresh_continue,
    refresh_start,
)
from patchkit.upkeep.refresh.hints import render

__all__ = ["COMMANDS", "naming_refresh"]


@contextlib.contextmanager
def naming_refresh(recipe: str | None, workdir: Path | None) -> Iterator[None]:
    """The refresh engine's errors with the next steps it names written as the command
    lines the user types: ``patchkit refresh [RECIPE] ACTION``, ``--workdir`` when the
    user gave one."""
    prefix = "patchkit refresh" + (f" {shlex.quote(recipe)}" if recipe else "")
    try:
        yield
    except FatalError as e:
        said = refresh_words(e.problem) if e.problem is not None else None
        if said is not None:  # a refresh problem: its words are the CLI's
            e.message, detail, hint = said
            e.detail, e.hint = detail or e.detail, e.hint or hint
        e.message, e.detail, e.hint = (
            render(t, prefix=prefix, workdir=workdir) for t in (e.message, e.detail, e.hint)
        )
        e.args = (e.message,)
        raise


@click.command("refresh")
@click.argument("recipe", required=False)
@click.option("--onto", default=None, metavar="COMMIT", help="The upstream commit to rebase onto.")
@click.option("--continue", "cont", is_flag=True, help="Go on after fixing a conflict.")
@click.option("--abort", is_flag=True, help="Drop the refresh in progress.")
@click.option(
    "--skip", is_flag=True, help="At a stop: drop the stopped patch and go on (like `git am --skip`)."
)
@click.option(
    "--drop",
    "drop",
    multiple=True,
    metavar="PATCH",
    help="Leave PATCH (name or file) out: with --onto from the start, at a stop the stopped "
    "one (as --skip) or a later one (with --continue/--skip). It leaves the series.",
)
@click.option(
    "--drop-upstreamed",
    is_flag=True,
    help="With --onto: drop the patches found already upstream (same patch-id, cherry-pick, "
    "pull request or title as a commit in the range, or their change is there) instead of "
    "merging them.",
)
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
@click.option(
    "--json", "as_json", is_flag=True, help="Print the finished refresh's result as JSON on stdout."
)
@repo_options
@click.pass_context
def refresh_cmd(
    ctx: click.Context,
    recipe: str | None,
    onto: str | None,
    cont: bool,
    abort: bool,
    skip: bool,
    drop: tuple[str, ...],
    drop_upstreamed: bool,
    base: str | None,
    move_pin: bool,
    workdir: Path | None,
    as_json: bool,
    repo: Path | None,
    upstream: str | None,
    all_: bool,
) -> None:
    """Rebase the series onto COMMIT (3-way), rewriting patch files and their hashes.

    The work happens in a scratch repo (--workdir, default in the cache). Patches
    already upstream are found first (--drop-upstreamed drops them). On a conflict it
    stops: fix the files there, `git add` them, then --continue (the resolution is
    recorded and reused when the same conflict comes again); --skip or --drop PATCH
    leave a patch out. Patch headers are kept; only the diffs, the diffstat and the
    series' sha256 change (dropped patches leave the series), and the recipe's pin only
    with --move-pin.
    """
    resume = cont or skip or (bool(drop) and not onto)
    if sum((bool(onto), resume, abort)) != 1 or (cont and skip):
        raise ConfigError("give exactly one of --onto COMMIT, --continue, --skip, --drop PATCH, --abort")
    if drop_upstreamed and not onto:
        raise ConfigError("--drop-upstreamed goes with --onto COMMIT (it decides what the refresh merges)")
    label = recipe or DEFAULT_RECIPE
    given = workdir.absolute() if workdir is not None else None  # the hints say --workdir then
    # every path absolute from here on: the engine runs git in its scratch tree
    workdir = given or cache_layout().refresh(Path(label).stem).absolute()
    rerere = cache_layout().rerere.absolute()
    with naming_refresh(recipe, given):
        if abort:
            refresh_abort(workdir)
            log.info(f"refresh aborted; removed {workdir}")
            return
        if resume:
            with log.step("refresh: " + ("skip" if skip or not cont else "continue")):
                result = refresh_continue(
                    workdir,
                    drop_stopped=skip,
                    drop=drop,
                    drop_only=not (cont or skip),
                    rerere=rerere,
                )
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
                        repo=repo_path.absolute(),
                        patches=patches,
                        patches_dir=series.directory.absolute(),
                        onto=onto,
                        base=base or (rec.upstream.commit if rec else None),
                        workdir=workdir,
                        recipe_path=rec.path.absolute() if rec else None,
                        move_pin=move_pin,
                        drop_upstreamed=drop_upstreamed,
                        drop=drop,
                        rerere=rerere,
                        independent=series.independent,
                    )
                )
    report(result)
    if as_json:
        out_record(result)


def report(result: RefreshResult) -> None:
    """What a finished refresh did, on stderr (bump prints its summary on stdout)."""
    for f in result.updated:
        log.info(f"updated   {f}")
    for f in result.unchanged:
        log.info(f"unchanged {f}")
    for f in result.outside_when:
        log.info(f"skipped   {f} (outside its When range at {result.onto[:12]}; left as is)")
    # reasons and findings quote upstream commit subjects: untrusted text
    for d in result.dropped:
        log.info(f"dropped   {d.file}: {printable(d.reason)} (removed from the series)")
    for u in result.upstream:
        how = "`--drop-upstreamed`" if u.proven else "not proven: `--drop PATCH` if it is"
        log.warning(f"kept      {u.file}, {printable(u.describe())}: proposed for dropping ({how})")
    if result.reused:
        log.info(f"reused {result.reused} recorded conflict resolution(s)")
    # last, where the person looks: clean merges upstream's change may have made wrong
    for r in result.review:
        for finding in r.findings:
            log.warning(f"merged cleanly, review {r.file}: {printable(finding.text)}")
    if result.pin_moved:
        log.info(f"recipe pin moved to {result.onto}")


COMMANDS = [refresh_cmd]
