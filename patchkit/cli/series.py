"""`patchkit series --rehash`: record the sha256 of edited patch files."""

from __future__ import annotations

import click

from patchkit.core.log import log
from patchkit.core.paths import find_project_dir
from patchkit.spec.series import load_series, rehash_series

__all__ = ["COMMANDS"]


@click.command("series")
@click.option("--rehash", is_flag=True, help="Rewrite patches/series with each file's sha256.")
@click.pass_context
def series_cmd(ctx: click.Context, rehash: bool) -> None:
    """Verify the patch series (hashes, headers); --rehash after editing a patch on purpose."""
    project = find_project_dir(ctx.find_root().obj.get("project"))
    patches_dir = project / "patches"
    if rehash:
        for fname, old, new in rehash_series(patches_dir):
            log.info(f"{fname}: {old[:12] or '(none)'} -> {new[:12]}")
    series = load_series(patches_dir)
    for p in series.patches:
        p.read_verified()
        log.info(
            f"✓ {p.filename}: sha256 ok, {p.upstream_status}, when {p.when}"
            + (", experimental" if p.experimental else "")
        )
    log.info(f"{len(series.patches)} patch(es) verified")


COMMANDS = [series_cmd]
