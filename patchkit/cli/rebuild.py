"""`patchkit rebuild ARCHIVE_OR_DIST`.

The result goes to stdout: per archive ``identical: ARCHIVE (...)`` or ``differs: ARCHIVE
(...)`` and the lines under it (the differing files, the manifest's reason when it expected
that, tool and configuration differences, where the rebuild was kept); the progress (what
it rebuilds, the build's steps) and the error (exit 15) go to stderr. ``--json`` prints a
list with one object per archive instead, and the lines go to stderr.

``rebuild --json`` keys (of each archive's object):

- ``archive``: the archive rebuilt
- ``config``: define / target differences
- ``differs``: one line per differing / missing / extra file
- ``expected``: the manifest says a rebuild elsewhere differs, and why ("": it does not)
- ``files``: files compared
- ``identical``: every file rebuilt with the release's bytes
- ``tools``: tool version differences ("cmake: 4.1.2 in the manifest, 4.2.0 here")
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import click

from patchkit.builder import compcache
from patchkit.cli._build_opts import MAX_JOBS
from patchkit.cli._common import out as out_line
from patchkit.core.errors import RebuildDiffers
from patchkit.core.log import log
from patchkit.core.record import Record, encode
from patchkit.rebuild.rebuild import ArchiveRebuild, RebuildOptions, archives_of, rebuild_archive

__all__ = ["COMMANDS", "RebuildJson"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RebuildJson(Record):
    """One archive's object in ``rebuild --json``."""

    archive: str  # the archive rebuilt
    identical: bool  # every file rebuilt with the release's bytes
    files: int  # files compared
    differs: tuple[str, ...]  # one line per differing / missing / extra file
    tools: tuple[str, ...]  # tool version differences ("cmake: 4.1.2 in the manifest, 4.2.0 here")
    config: tuple[str, ...]  # define / target differences
    expected: str  # the manifest says a rebuild elsewhere differs, and why ("": it does not)

    @classmethod
    def of(cls, r: ArchiveRebuild) -> RebuildJson:
        return cls(
            archive=r.archive,
            identical=r.identical,
            files=r.files,
            differs=r.differs,
            tools=r.tools,
            config=r.config,
            expected=r.expected,
        )


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
    help="Make the rebuild's own cache in this folder, as a new DIR/rebuild-XXXXXXXX/ (kept, "
    "never reused; default: a temporary one, removed).",
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
    "way when the release's build ran them: they set build defines). They run the "
    "release's binaries on this host: only with --no-sandbox.",
)
@click.option(
    "--no-sandbox",
    "no_sandbox",
    is_flag=True,
    help="Run the release's configure and build unconfined: only for a release you trust "
    "as much as your own code (bubblewrap missing, or no user namespaces here).",
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
    no_sandbox: bool,
    as_json: bool,
) -> None:
    """Rebuild a release from its own manifest and carried sources (recipe, patches) in a
    fresh cache, and compare every file by sha256. Exit 0: identical; 15: differs.

    \b
    Trust: the release's recipe and patches are someone else's code, and its CMake
    configure and build run them. They run in a sandbox (bubblewrap): unprivileged as
    root too (uid 65534, no capability), no network, only the system (/usr, parts of
    /etc) and the programs the build runs shown read-only, no home, /run or host socket,
    only the rebuild's own work and compile-cache folders writable, /tmp empty, in a new
    cache of its own. It cannot stop reading what that view shows (into the binaries it
    makes), using CPU, memory and disk, or a kernel or compiler exploit. A carried
    recipe may not name programs or scripts in its defines (compilers, launchers,
    toolchain files...) or hold shell in them (refused, exit 12). The rebuilt binaries are the release's code:
    never run them. No bubblewrap, or no user namespaces: exit 8, and --no-sandbox
    is the explicit opt-out. See docs/release.md and docs/hostile-input.md.
    """
    archives = archives_of(target)
    if out is not None and len(archives) > 1:
        raise click.UsageError(f"--out keeps one rebuild: pass one archive, not a folder of {len(archives)}")
    if smoke and not no_sandbox:
        raise click.UsageError(
            "--smoke runs the rebuilt binaries (the release's code) on this host, outside the "
            "sandbox: add --no-sandbox only if you trust this release"
        )
    env = dict(os.environ)  # what cmake and the compilers run with, as for `patchkit build`
    # in the sandbox: no remote cache (no network there), whatever the environment says
    off = {} if no_sandbox else {"remote_flag": "off", "dist_flag": "off"}
    settings = compcache.resolve(launcher_flag=launcher, env=env, **off) if launcher else None
    opts = RebuildOptions(
        env=env,
        upstream=upstream,
        cache=cache,
        out=out,
        jobs=jobs,
        smoke=smoke,
        compile_cache=settings,
        sandbox=not no_sandbox,
    )
    results: list[ArchiveRebuild] = []
    for path in archives:
        # an error's text holds the archive's (names, fields, the build log): the CLI's one
        # error printer shows it escaped
        res = rebuild_archive(path, opts, on_build=log.info)
        results.append(res)
        _print(res, err=as_json)
    if as_json:
        click.echo(
            json.dumps(
                [encode(RebuildJson.of(r)) for r in results],
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
