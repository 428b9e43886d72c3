"""`patchkit list`: the recipes and patches this project knows.

The tables go to stdout (`patchkit list | grep cuda`); ``--json`` prints the same data as
one object instead. An invalid recipe keeps its row: its name is the file's stem,
``error`` says why, and the fields it could not give are null. Exit 3 (a bad recipe) when
one is invalid.

``list --json`` keys:

- ``patches``: in series order
- ``patches[].default``: recipes take it unless they say otherwise
- ``patches[].experimental``: marked experimental
- ``patches[].file``: its file in patches/
- ``patches[].index``: 1, 2, ... in series order
- ``patches[].name``: the patch's name
- ``patches[].sha256``: of the file, as patches/series pins it
- ``patches[].subject``: its subject line
- ``patches[].upstream_status``: Upstream-Status: pending, backport, submitted, ...
- ``patches[].when``: the upstream range it applies to (When:)
- ``recipes``: in file name order
- ``recipes[].cuda_sms``: the CUDA SMs it builds for; null: no CUDA (or invalid)
- ``recipes[].default``: the recipe a bare `patchkit build` builds
- ``recipes[].error``: why it is invalid; null: it is not
- ``recipes[].file``: its file, relative to the project
- ``recipes[].name``: the recipe's name (an invalid one's: its file's stem)
- ``recipes[].os``: linux, windows; null: invalid
- ``recipes[].patches``: its patches, in order; null: invalid
- ``recipes[].status``: ok, experimental (a patch of it is), invalid
- ``recipes[].targets``: its build targets; null: invalid
- ``recipes[].upstream``: null: invalid
- ``recipes[].upstream.commit``: its pinned commit
- ``recipes[].upstream.url``: the upstream the recipe builds
- ``schema``: the JSON format's version: 1
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from patchkit.cli._common import DEFAULT_RECIPE, load_project, out_record, out_table
from patchkit.core.errors import FatalError, RecipeError
from patchkit.spec.recipe import list_recipes, load_recipe
from patchkit.spec.series import Series

__all__ = ["COMMANDS", "ListJson", "list_data"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PatchRow:
    index: int  # 1, 2, ... in series order
    name: str  # the patch's name
    file: str  # its file in patches/
    subject: str  # its subject line
    upstream_status: str  # Upstream-Status: pending, backport, submitted, ...
    when: str  # the upstream range it applies to (When:)
    default: bool  # recipes take it unless they say otherwise
    experimental: bool  # marked experimental
    sha256: str  # of the file, as patches/series pins it


@dataclasses.dataclass(frozen=True, kw_only=True)
class UpstreamRow:
    url: str  # the upstream the recipe builds
    commit: str  # its pinned commit


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecipeRow:
    name: str  # the recipe's name (an invalid one's: its file's stem)
    file: str  # its file, relative to the project
    default: bool  # the recipe a bare `patchkit build` builds
    status: str  # ok, experimental (a patch of it is), invalid
    error: str | None = None  # why it is invalid; null: it is not
    os: str | None = None  # linux, windows; null: invalid
    cuda_sms: tuple[int, ...] | None = None  # the CUDA SMs it builds for; null: no CUDA (or invalid)
    upstream: UpstreamRow | None = None  # null: invalid
    patches: tuple[str, ...] | None = None  # its patches, in order; null: invalid
    targets: tuple[str, ...] | None = None  # its build targets; null: invalid


@dataclasses.dataclass(frozen=True, kw_only=True)
class ListJson:
    """``list --json``."""

    schema: int = 1  # the JSON format's version: 1
    patches: tuple[PatchRow, ...]  # in series order
    recipes: tuple[RecipeRow, ...]  # in file name order


def list_data(project: Path, series: Series) -> ListJson:
    """What `patchkit list` shows: the series' patches and every recipe, loaded."""
    patches = tuple(
        PatchRow(
            index=i,
            name=p.name,
            file=p.filename,
            subject=p.subject,
            upstream_status=p.upstream_status,
            when=p.when,
            default=p.default,
            experimental=p.experimental,
            sha256=p.sha256,
        )
        for i, p in enumerate(series.patches, 1)
    )
    recipes: list[RecipeRow] = []
    for path in list_recipes(project):
        row = RecipeRow(
            name=path.stem,
            file=path.relative_to(project).as_posix(),
            default=path.stem == DEFAULT_RECIPE,
            status="invalid",
        )
        try:
            r = load_recipe(path, project, series)
            # CUDA names are checked here too (no toolkit needed)
            sms = tuple(r.cuda.archs.sms) if r.cuda is not None else None
        except FatalError as e:
            recipes.append(dataclasses.replace(row, error=e.message))
            continue
        recipes.append(
            dataclasses.replace(
                row,
                name=r.name,
                status="experimental" if any(p.experimental for p in r.patches) else "ok",
                os=r.os,
                cuda_sms=sms,
                upstream=UpstreamRow(url=r.upstream.url, commit=r.upstream.commit),
                patches=tuple(r.patch_names),
                targets=tuple(r.build.targets),
            )
        )
    return ListJson(patches=patches, recipes=tuple(recipes))


def _patch_table(patches: Sequence[PatchRow]) -> Table:
    table = Table(title="patches (patches/series, in order)", title_justify="left")
    for col in ("#", "name", "upstream status", "when", "default", "sha256"):
        table.add_column(col)
    for p in patches:
        # patch headers and recipe files are data: never read as rich markup
        name = escape(p.name) + (" [yellow](experimental)[/yellow]" if p.experimental else "")
        table.add_row(
            str(p.index),
            name,
            escape(p.upstream_status),
            escape(p.when),
            "yes" if p.default else "no",
            p.sha256[:12],
        )
    return table


def _recipe_table(recipes: Sequence[RecipeRow]) -> Table:
    table = Table(title="recipes (recipes/)", title_justify="left")
    for col in ("name", "os", "gpu", "upstream", "patches", "targets", "status"):
        table.add_column(col)
    for r in recipes:
        if r.status == "invalid" or r.upstream is None:
            table.add_row(escape(r.name), "", "", "", "", "", f"[red]invalid: {escape(r.error or '')}[/red]")
            continue
        sms = r.cuda_sms
        table.add_row(
            escape(r.name + (" (default)" if r.default else "")),
            escape(r.os or ""),
            "CUDA sm_" + ",".join(map(str, sms)) if sms is not None else "-",
            r.upstream.commit[:12],
            escape(", ".join(r.patches or ())) or "-",
            escape(", ".join(r.targets or ())),
            "[yellow]experimental[/yellow]" if r.status == "experimental" else "ok",
        )
    return table


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the recipes and patches as JSON.")
@click.pass_context
def list_cmd(ctx: click.Context, as_json: bool) -> None:
    """List recipes and patches, with their status."""
    project, series = load_project(ctx)
    data = list_data(project, series)
    if as_json:
        out_record(data)
    else:
        out_table(_patch_table(data.patches))
        out_table(_recipe_table(data.recipes))
    if any(r.status == "invalid" for r in data.recipes):
        raise click.exceptions.Exit(RecipeError.exit_code)


COMMANDS = [list_cmd]
