"""`patchkit series`: verify the series (hashes, headers); ``--rehash`` records the sha256 of
edited patch files first. `patchkit series import` takes a ``git format-patch`` queue in,
`patchkit series export` gives it back (upkeep/queue.py).

`patchkit series` (no subcommand): with ``--rehash`` what changed (``FILE: OLD -> NEW``),
then one line per verified patch and the count, on stdout. ``--json`` prints it as one
object instead::

    {"schema": 1,
     "rehashed": [{"file", "old", "new"}, ...] | null,   # null without --rehash
     "patches": [{"file", "name", "sha256", "upstream_status", "when",
                  "default", "experimental",
                  "kind",        # "patchkit" (header block) or "mail" (git format-patch)
                  "author",      # "Name <mail>" of a mail, else null
                  "date",        # a mail's Date as written, else null
                  "derived"}, ...]}  # the fields a mail left out (Why, When, ...), in order

A patch whose bytes do not match the series stops it (exit 5, nothing more on stdout).

`patchkit series import PATHS... | --series-file F | --from URL_OR_PATH --range BASE..BRANCH`:
one line per patch (its file, where it came from, its author and date, what import stated
and what is derived), then the count. ``--json``::

    {"schema": 1, "series": PATH, "base": SHA | null,
     "patches": [{"file", "source", "name", "kind", "author", "date", "subject",
                  "added": {FIELD: VALUE},     # stated by import (When, Upstream-Status)
                  "derived": {FIELD: VALUE},   # derived when the series is read
                  "renamed": bool}, ...],     # a suffix made its file (or name) unique
     "dropped": [FILE, ...]}                   # old series entries left in patches/

`patchkit series export [OUTDIR] [--to-branch NAME]`: one line per patch written (file,
author, date), the branch and its head. ``--json``::

    {"schema": 1, "outdir": PATH | null,
     "files": [{"file", "name", "author", "date"}, ...],
     "branch": {"name", "head", "repo", "base", "commits": [{"name", "commit"}, ...]} | null}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from patchkit.cli._common import DEFAULT_RECIPE, out, out_json
from patchkit.core.lock import cache_lock
from patchkit.core.log import log
from patchkit.core.paths import cache_dir, find_project_dir
from patchkit.core.text import did_you_mean, printable
from patchkit.git.cache import ensure_clone, ensure_commit, is_local, open_upstream
from patchkit.git.repo import Git
from patchkit.spec.recipe import load_recipe, resolve_recipe_path
from patchkit.spec.series import load_series, rehash_series
from patchkit.upkeep.export import default_author, export_branch, export_folder, parse_ident
from patchkit.upkeep.queue import (
    detect_independent,
    import_patches,
    source_subjects,
    sources_from_paths,
    sources_from_range,
    upstream_matches,
)

__all__ = ["COMMANDS"]


def _project(ctx: click.Context) -> Path:
    return find_project_dir(ctx.find_root().obj.get("project"))


class _SeriesGroup(click.Group):
    """`series` and its subcommands: an unknown one is a usage error with a suggestion."""

    def resolve_command(self, ctx: click.Context, args: list[str]):  # type: ignore[no-untyped-def]
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in self.commands:
            ctx.fail(f"No such command '{name}'{did_you_mean(name, self.commands)}.")
        return super().resolve_command(ctx, args)


@click.group("series", cls=_SeriesGroup, invoke_without_command=True)
@click.option("--rehash", is_flag=True, help="Rewrite patches/series with each file's sha256.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def series_cmd(ctx: click.Context, rehash: bool, as_json: bool) -> None:
    """Verify the patch series (hashes, headers); --rehash after editing a patch on purpose.

    `import` takes a git format-patch queue in, `export` gives the series back as one.
    """
    if ctx.invoked_subcommand is not None:
        if rehash or as_json:
            raise click.UsageError(
                f"--rehash and --json go with `patchkit series` alone; "
                f"`patchkit series {ctx.invoked_subcommand}` has its own options"
            )
        return
    patches_dir = _project(ctx) / "patches"
    rehashed: list[dict[str, str]] | None = None
    if rehash:
        rehashed = [{"file": f, "old": old, "new": new} for f, old, new in rehash_series(patches_dir)]
        if not as_json:
            for c in rehashed:
                out(printable(f"{c['file']}: {c['old'][:12] or '(none)'} -> {c['new'][:12]}"))
    series = load_series(patches_dir)
    verified: list[dict[str, Any]] = []
    for p in series.patches:
        p.read_verified()
        verified.append(
            {
                "file": p.filename,
                "name": p.name,
                "sha256": p.sha256,
                "upstream_status": p.upstream_status,
                "when": p.when,
                "default": p.default,
                "experimental": p.experimental,
                "kind": p.kind,
                "author": p.author,
                "date": p.date,
                "derived": list(p.derived),
            }
        )
        if not as_json:  # line by line: a bad patch later still leaves these said
            # a mail's author and date, its file name: untrusted text, printed escaped
            out(
                printable(
                    f"✓ {p.filename}: sha256 ok, {p.upstream_status}, when {p.when}"
                    + (", experimental" if p.experimental else "")
                    + (f", by {p.author}" if p.author else "")
                    + (f", derived {', '.join(p.derived)}" if p.derived else "")
                )
            )
    if as_json:
        out_json({"schema": 1, "rehashed": rehashed, "patches": verified})
    else:
        out(f"{len(series.patches)} patch(es) verified")


@series_cmd.command("import")
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--series-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A quilt series file listing the patches in order (paths relative to its folder).",
)
@click.option(
    "--from",
    "from_",
    metavar="URL_OR_PATH",
    default=None,
    help="A fork's repository: a local clone or a URL.",
)
@click.option(
    "--range", "range_", metavar="BASE..BRANCH", default=None, help="With --from: the queue's commits."
)
@click.option(
    "--base", metavar="SHA", default=None, help="The upstream commit the files apply on: When is BASE.."
)
@click.option(
    "--upstream",
    metavar="URL_OR_PATH",
    default=None,
    help="Upstream, to find each patch's commit after the base (same title or pull request): a backport.",
)
@click.option(
    "--upstream-ref",
    metavar="REF",
    default="HEAD",
    show_default=True,
    help="Upstream's newest commit to look at.",
)
@click.option(
    "--independent/--stacked",
    default=None,
    help="Each patch was made against the base and applies alone (a CMake PATCH_COMMAND folder), "
    "or they stack (git am); default: tried on --base with --upstream, else stacked.",
)
@click.option("--mboxrd", is_flag=True, help="The mboxes escape `From ` lines as mboxrd does (`>From `).")
@click.option("--replace", is_flag=True, help="Replace an existing series (its files stay in patches/).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def import_cmd(
    ctx: click.Context,
    paths: tuple[Path, ...],
    series_file: Path | None,
    from_: str | None,
    range_: str | None,
    base: str | None,
    upstream: str | None,
    upstream_ref: str,
    independent: bool | None,
    mboxrd: bool,
    replace: bool,
    as_json: bool,
) -> None:
    """Import a git format-patch queue, plain diffs or a quilt folder into patches/ (and
    patches/series).

    PATHS: patch or mbox files in order, folders (their `series` file, else their patch
    files sorted by name) or a quilt `series` file; or --from a fork's repository with
    --range BASE..BRANCH. Author, date, title and message are kept; Why, Upstream-Status,
    When and Default are derived (or stated, see --base and --upstream). A plain diff or
    quilt patch keeps its file as it is (title from its text or file name, no author).
    Independent patches (each applies to the base alone, not stacked) are recorded so in
    patches/series; check and refresh then take each on its own.
    """
    project = _project(ctx)
    if (from_ is None) != (range_ is None):
        raise click.UsageError("--from and --range go together (--from URL_OR_PATH --range BASE..BRANCH)")
    kinds = sum(bool(x) for x in (paths, series_file, from_))
    if kinds != 1:
        raise click.UsageError(
            "import one of: PATHS..., --series-file FILE, --from URL_OR_PATH --range BASE..BRANCH"
        )
    if base is not None and from_ is not None:
        raise click.UsageError("--base comes from --range (BASE..BRANCH); leave it out")
    cache = cache_dir()
    if from_ is not None:
        assert range_ is not None
        base, sources = sources_from_range(open_upstream(from_, cache), range_)
    else:
        sources = sources_from_paths(paths, series_file=series_file, mboxrd=mboxrd)
    matches: dict[int, tuple[str, str]] = {}
    if upstream is not None:
        if base is None:
            raise click.UsageError("--upstream needs the queue's base (--base SHA, or --range)")
        git = Git(open_upstream(upstream, cache))
        base = git.resolve(base)
        matches = upstream_matches(git, base, upstream_ref, source_subjects(sources))
        if independent is None and detect_independent(git, base, sources):
            independent = True
            log.info(
                "each patch applies to the base alone and they do not stack: independent (--stacked: not)"
            )
    result = import_patches(
        project, sources, base=base, matches=matches, replace=replace, independent=bool(independent)
    )
    rows: list[dict[str, Any]] = []
    for it in result.patches:
        p = it.patch
        rows.append(
            {
                "file": it.file,
                "source": it.source,
                "name": p.name,
                "kind": p.kind,
                "author": p.author,
                "date": p.date,
                "subject": p.subject,
                "added": it.added,
                "derived": it.derived,
                "renamed": it.renamed,
            }
        )
        if as_json:
            continue
        said = [f"by {p.author}" + (f", {p.date}" if p.date else "")] if p.author else [p.kind]
        if it.added:
            said.append("stated " + ", ".join(f"{k} {v}" for k, v in it.added.items()))
        if it.derived:
            said.append(
                "derived " + ", ".join(k if k == "Why" else f"{k} {v}" for k, v in it.derived.items())
            )
        out(printable(f"✓ {it.file} (from {it.source}): " + "; ".join(said)))
    if as_json:
        out_json(
            {
                "schema": 1,
                "series": str(result.series),
                "base": result.base,
                "independent": result.independent,
                "patches": rows,
                "dropped": list(result.dropped),
            }
        )
        return
    for f in result.dropped:
        out(printable(f"  {f}: no longer in the series (left in patches/)"))
    how = ", independent: each applies to the base alone" if result.independent else ""
    out(f"{len(result.patches)} patch(es) imported into {result.series.parent} (series written{how})")


@series_cmd.command("export")
@click.argument("outdir", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--no-diffstat", is_flag=True, help="Leave the diffstat out of the mails.")
@click.option(
    "--author",
    metavar="'NAME <MAIL>'",
    default=None,
    help="The author of patches in patchkit's form (default: git's identity here).",
)
@click.option("--replace", is_flag=True, help="Replace OUTDIR's .patch files and series (a previous export).")
@click.option(
    "--to-branch", "branch", metavar="NAME", default=None, help="Also make a branch of commits on the pin."
)
@click.option(
    "--upstream",
    metavar="URL_OR_PATH",
    default=None,
    help="With --to-branch: the clone to make it in (a local path), or a URL (the cache's clone); "
    "default: the recipe's.",
)
@click.option(
    "--recipe",
    "recipe_arg",
    metavar="RECIPE",
    default=None,
    help="With --to-branch: whose pin (default cpu-rpc).",
)
@click.option("--force", is_flag=True, help="With --to-branch: move an existing branch.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def export_cmd(
    ctx: click.Context,
    outdir: Path | None,
    no_diffstat: bool,
    author: str | None,
    replace: bool,
    branch: str | None,
    upstream: str | None,
    recipe_arg: str | None,
    force: bool,
    as_json: bool,
) -> None:
    """Export the series as git format-patch files git am takes (OUTDIR: NNNN-name.patch
    and a series file), and/or as a branch of commits on a recipe's pin (--to-branch)."""
    if outdir is None and branch is None:
        raise click.UsageError("export to OUTDIR, --to-branch NAME, or both")
    if branch is None and (upstream or recipe_arg or force):
        raise click.UsageError("--upstream, --recipe and --force go with --to-branch")
    project = _project(ctx)
    series = load_series(project / "patches")
    ident = parse_ident(author) if author is not None else None
    if ident is None and any(p.kind == "patchkit" and p.author is None for p in series.patches):
        ident = default_author()
    files: list[dict[str, Any]] = []
    if outdir is not None:
        for e in export_folder(
            series, outdir, project=project, author=ident, with_diffstat=not no_diffstat, replace=replace
        ):
            files.append({"file": e.file, "name": e.name, "author": e.author, "date": e.date})
            if not as_json:
                who = e.author or "a plain diff, as it came"
                out(printable(f"✓ {outdir / e.file}: {who}" + (f", {e.date}" if e.date else "")))
        if not as_json:
            out(f"{len(files)} patch(es) written to {outdir} (and its series file)")
    made: dict[str, Any] | None = None
    if branch is not None:
        recipe = load_recipe(resolve_recipe_path(recipe_arg or DEFAULT_RECIPE, project), project, series)
        url = upstream or recipe.upstream.url
        pin = recipe.upstream.commit
        if is_local(url):
            repo = open_upstream(url, cache_dir())
            Git(repo).resolve(pin)
        else:
            cache = cache_dir()
            with cache_lock(cache, f"patchkit series export ({url})"):
                repo = ensure_clone(cache, url)
                ensure_commit(repo, url, pin)
        result = export_branch(series, repo=repo, base=pin, branch=branch, author=ident, force=force)
        made = {
            "name": result.name,
            "head": result.head,
            "repo": str(result.repo),
            "base": result.base,
            "commits": [{"name": n, "commit": c} for n, c in result.commits],
        }
        if not as_json:
            n = len(result.commits)
            out(f"branch {result.name} at {result.head} in {result.repo} ({n} commit(s) on {pin[:12]})")
            if not is_local(url):
                out(f"  fetch it with: git fetch {result.repo} {result.name}")
    if as_json:
        out_json({"schema": 1, "outdir": str(outdir) if outdir else None, "files": files, "branch": made})


COMMANDS = [series_cmd]
