"""`patchkit list`: the recipes and patches this project knows.

The tables go to stdout (`patchkit list | grep cuda`); ``--json`` prints the same data as
one object instead::

    {"schema": 1,
     "patches": [{"index", "name", "file", "subject", "upstream_status", "when",
                  "default", "experimental", "sha256"}, ...],          # series order
     "recipes": [{"name", "file", "default", "status": "ok" | "experimental" | "invalid",
                  "error", "os", "cuda_sms", "upstream": {"url", "commit"} | null,
                  "patches", "targets"}, ...]}                          # file name order

An invalid recipe keeps its row: its name is the file's stem, ``error`` says why, and the
fields it could not give are null. Exit 3 (a bad recipe) when one is invalid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from patchkit.cli._common import DEFAULT_RECIPE, load_project, out_json, out_table
from patchkit.core.errors import FatalError, RecipeError
from patchkit.spec.recipe import list_recipes, load_recipe
from patchkit.spec.series import Series

__all__ = ["COMMANDS", "list_data"]


def list_data(project: Path, series: Series) -> dict[str, Any]:
    """What `patchkit list` shows: the series' patches and every recipe, loaded."""
    patches = [
        {
            "index": i,
            "name": p.name,
            "file": p.filename,
            "subject": p.subject,
            "upstream_status": p.upstream_status,
            "when": p.when,
            "default": p.default,
            "experimental": p.experimental,
            "sha256": p.sha256,
        }
        for i, p in enumerate(series.patches, 1)
    ]
    recipes: list[dict[str, Any]] = []
    for path in list_recipes(project):
        row: dict[str, Any] = {
            "name": path.stem,
            "file": path.relative_to(project).as_posix(),
            "default": path.stem == DEFAULT_RECIPE,
            "status": "invalid",
            "error": None,
            "os": None,
            "cuda_sms": None,
            "upstream": None,
            "patches": None,
            "targets": None,
        }
        try:
            r = load_recipe(path, project, series)
            # CUDA names are checked here too (no toolkit needed)
            sms = list(r.cuda.archs.sms) if r.cuda is not None else None
        except FatalError as e:
            row["error"] = e.message
            recipes.append(row)
            continue
        row |= {
            "name": r.name,
            "status": "experimental" if any(p.experimental for p in r.patches) else "ok",
            "os": r.os,
            "cuda_sms": sms,
            "upstream": {"url": r.upstream.url, "commit": r.upstream.commit},
            "patches": list(r.patch_names),
            "targets": list(r.build.targets),
        }
        recipes.append(row)
    return {"schema": 1, "patches": patches, "recipes": recipes}


def _patch_table(patches: list[dict[str, Any]]) -> Table:
    table = Table(title="patches (patches/series, in order)", title_justify="left")
    for col in ("#", "name", "upstream status", "when", "default", "sha256"):
        table.add_column(col)
    for p in patches:
        # patch headers and recipe files are data: never read as rich markup
        name = escape(p["name"]) + (" [yellow](experimental)[/yellow]" if p["experimental"] else "")
        table.add_row(
            str(p["index"]),
            name,
            escape(p["upstream_status"]),
            escape(p["when"]),
            "yes" if p["default"] else "no",
            p["sha256"][:12],
        )
    return table


def _recipe_table(recipes: list[dict[str, Any]]) -> Table:
    table = Table(title="recipes (recipes/)", title_justify="left")
    for col in ("name", "os", "gpu", "upstream", "patches", "targets", "status"):
        table.add_column(col)
    for r in recipes:
        if r["status"] == "invalid":
            table.add_row(escape(r["name"]), "", "", "", "", "", f"[red]invalid: {escape(r['error'])}[/red]")
            continue
        sms = r["cuda_sms"]
        table.add_row(
            escape(r["name"] + (" (default)" if r["default"] else "")),
            escape(r["os"]),
            "CUDA sm_" + ",".join(map(str, sms)) if sms is not None else "-",
            r["upstream"]["commit"][:12],
            escape(", ".join(r["patches"])) or "-",
            escape(", ".join(r["targets"])),
            "[yellow]experimental[/yellow]" if r["status"] == "experimental" else "ok",
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
        out_json(data)
    else:
        out_table(_patch_table(data["patches"]))
        out_table(_recipe_table(data["recipes"]))
    if any(r["status"] == "invalid" for r in data["recipes"]):
        raise click.exceptions.Exit(RecipeError.exit_code)


COMMANDS = [list_cmd]
