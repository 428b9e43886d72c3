"""`patchkit rebuild ARCHIVE_OR_DIST`.

The result goes to stdout: per archive ``identical: ARCHIVE (...)`` or ``differs: ARCHIVE
(...)`` and the lines under it (the differing files, the manifest's reason when it expected
that, tool and configuration differences, where the rebuild was kept); the progress (what
it rebuilds, the build's steps) and the error (exit 15) go to stderr. ``--json`` prints a
list with one object per archive (``archive``, ``identical``, ``files``, ``differs``,
``tools``, ``config``, ``expected``) instead, and the lines go to stderr.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from patchkit.builder import compcache
from patchkit.cli._build_opts import MAX_JOBS
from patchkit.cli._common import out as out_line
from patchkit.core.errors import RebuildDiffers
from patchkit.core.log import log
from patchkit.rebuild.rebuild import ArchiveRebuild, RebuildOptions, archives_of, rebuild_archive

__all__ = ["COMMANDS"]


@click.command("rebuild")
@click.argument("target", metavar="ARCHIVE_OR_DIST", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--upstream",
    metavar="URL_OR_PATH",
    help="Fetch llama.cpp from here (an offline clone or mirror) instead of the "
    "manifest's upstream url; the pinned commit must be in it.",
)
@click.option(
    "--cache",
    type=click.Path(file_okay=False, path_type=Path),
    help="patchkit cache for the rebuild (default: a fresh temporary one, removed).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the rebuilt build output here (for diffoscope); one archive only.",
)
@click.option("-j", "--jobs", type=click.IntRange(min=1, max=MAX_JOBS), help="Parallel build jobs.")
@click.option(
    "--launcher",
    type=click.Choice(compcache.LAUNCHERS),
    help="Compiler launcher for the rebuild (`none`: compile everything afresh).",
)
@click.option(
    "--smoke",
    is_flag=True,
    help="Also run the smoke checks on the rebuild (its smoke tools are built either "
    "way when the release's build ran them: they set build defines).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def rebuild_cmd(
    target: Path,
    upstream: str | None,
    cache: Path | None,
    out: Path | None,
    jobs: int | None,
    launcher: str | None,
    smoke: bool,
    as_json: bool,
) -> None:
    """Rebuild a release from its own manifest and carried sources (recipe, patches) in a
    fresh cache, and compare every file by sha256. Exit 0: identical; 15: differs."""
    archives = archives_of(target)
    if out is not None and len(archives) > 1:
        raise click.UsageError(f"--out keeps one rebuild: pass one archive, not a folder of {len(archives)}")
    env = dict(os.environ)  # what cmake and the compilers run with, as for `patchkit build`
    settings = compcache.resolve(launcher_flag=launcher, env=env) if launcher else None
    opts = RebuildOptions(
        env=env, upstream=upstream, cache=cache, out=out, jobs=jobs, smoke=smoke, compile_cache=settings
    )
    results: list[ArchiveRebuild] = []
    for path in archives:
        res = rebuild_archive(path, opts, on_build=log.info)
        results.append(res)
        _print(res, err=as_json)
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "archive": r.archive,
                        "identical": r.identical,
                        "files": r.files,
                        "differs": list(r.differs),
                        "tools": list(r.tools),
                        "config": list(r.config),
                        "expected": r.expected,
                    }
                    for r in results
                ],
                indent=2,
            )
        )
    bad = [r for r in results if not r.identical]
    if bad:
        n = sum(len(r.differs) for r in bad)
        tools = any(r.tools for r in bad)
        if all(r.expected for r in bad):
            raise RebuildDiffers(
                f"{len(bad)} of {len(results)} archive(s) rebuilt with different "
                f"bytes ({n} file{'s' if n != 1 else ''}), as their manifest "
                "says a rebuild in another folder does",
                hint="rebuild from a release built with --launcher ccache or none to check its bytes",
            )
        raise RebuildDiffers(
            f"{len(bad)} of {len(results)} archive(s) rebuilt with different "
            f"bytes ({n} file{'s' if n != 1 else ''})",
            hint=(
                "the tool versions above are the first suspects; " if tools else "no tool version differs; "
            )
            + "keep the rebuild with --out and compare with diffoscope",
        )


def _print(r: ArchiveRebuild, *, err: bool) -> None:
    """One archive's result (on stderr with ``err``: stdout then holds the JSON)."""
    lines = []
    if r.identical:
        lines.append(f"identical: {r.archive} ({r.files} files, every sha256 equal)")
    else:
        lines.append(f"differs: {r.archive} ({len(r.differs)} of {r.files} files)")
        lines += [f"  {line}" for line in r.differs]
        if r.expected:
            lines.append(f"  expected, the manifest says: {r.expected}")
    lines += [f"  tool {line}" for line in r.tools]
    lines += [f"  {line}" for line in r.config]
    if r.out_dir is not None:
        lines.append(f"  rebuilt output kept in {r.out_dir}/")
    for line in lines:
        out_line(line, err=err)


COMMANDS = [rebuild_cmd]
