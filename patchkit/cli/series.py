"""`patchkit series`: verify the series (hashes, headers); ``--rehash`` records the sha256 of
edited patch files first.

The result goes to stdout: with ``--rehash`` what changed (``FILE: OLD -> NEW``), then one
line per verified patch and the count. ``--json`` prints it as one object instead::

    {"schema": 1,
     "rehashed": [{"file", "old", "new"}, ...] | null,   # null without --rehash
     "patches": [{"file", "name", "sha256", "upstream_status", "when",
                  "default", "experimental"}, ...]}       # every one verified, in order

A patch whose bytes do not match the series stops it (exit 5, nothing more on stdout).
"""

from __future__ import annotations

from typing import Any

import click

from patchkit.cli._common import out, out_json
from patchkit.core.paths import find_project_dir
from patchkit.spec.series import load_series, rehash_series

__all__ = ["COMMANDS"]


@click.command("series")
@click.option("--rehash", is_flag=True, help="Rewrite patches/series with each file's sha256.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def series_cmd(ctx: click.Context, rehash: bool, as_json: bool) -> None:
    """Verify the patch series (hashes, headers); --rehash after editing a patch on purpose."""
    project = find_project_dir(ctx.find_root().obj.get("project"))
    patches_dir = project / "patches"
    rehashed: list[dict[str, str]] | None = None
    if rehash:
        rehashed = [{"file": f, "old": old, "new": new} for f, old, new in rehash_series(patches_dir)]
        if not as_json:
            for c in rehashed:
                out(f"{c['file']}: {c['old'][:12] or '(none)'} -> {c['new'][:12]}")
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
            }
        )
        if not as_json:  # line by line: a bad patch later still leaves these said
            out(
                f"✓ {p.filename}: sha256 ok, {p.upstream_status}, when {p.when}"
                + (", experimental" if p.experimental else "")
            )
    if as_json:
        out_json({"schema": 1, "rehashed": rehashed, "patches": verified})
    else:
        out(f"{len(series.patches)} patch(es) verified")


COMMANDS = [series_cmd]
