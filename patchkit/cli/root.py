"""`patchkit root prepare|list`: build roots (builder.sysroot), an older Debian patchkit
prepares once in the cache and builds in for a glibc floor (a recipe's ``[build] root``).

Results on stdout: `root prepare` prints the root's label (``debian11@<id>``); `root list`
one line per known root. ``--json``: `root prepare` prints the root's record
(``root.json``), `root list` ``{"schema": 1, "roots": [{"name", "suite", "glibc",
"glibcxx", "prepared": record or null}]}``.
"""

from __future__ import annotations

import os

import click

from patchkit.builder.sysroot import KINDS, find_root, prepare_root, root_dir
from patchkit.cli._common import out, out_json
from patchkit.core.log import log
from patchkit.core.paths import cache_dir
from patchkit.core.record import encode
from patchkit.core.text import printable

__all__ = ["COMMANDS"]


@click.group("root")
def root_cmd() -> None:
    """Build roots: an older Debian to build in for a C library floor."""


@root_cmd.command("prepare")
@click.argument("name", type=click.Choice(sorted(KINDS)))
@click.option("--again", is_flag=True, help="Make it again even if it is prepared (a newer archive).")
@click.option("--json", "as_json", is_flag=True, help="Print the root's record as JSON.")
def prepare_cmd(name: str, again: bool, as_json: bool) -> None:
    """Prepare (or reuse) the build root NAME: debootstrap minbase from Debian's archive,
    build-essential cmake ninja-build git inside. Needs root and the network, ~5 min."""
    cache = cache_dir()
    with log.step(f"root {name}"):
        record, made = prepare_root(cache, name, env=dict(os.environ), again=again)
    # root.json's fields, and the versions read from the root's dpkg status: not patchkit's
    # words, so printed escaped
    log.info(
        f"{'prepared' if made else 'reusing'} {root_dir(cache, name)}: {printable(record.suite)}, "
        f"glibc {printable(record.glibc)}, GCC {printable(record.gcc)}, cmake {printable(record.cmake)}, "
        f"{record.packages} packages"
    )
    if as_json:
        out_json(encode(record))
    else:
        out(printable(record.label))


@root_cmd.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the roots as JSON.")
def list_cmd(as_json: bool) -> None:
    """The build roots patchkit knows, the floor each gives, whether it is prepared."""
    cache = cache_dir()
    rows = []
    for name, kind in KINDS.items():
        found = find_root(cache, name)
        rows.append(
            {
                "name": name,
                "suite": kind.suite,
                "glibc": kind.glibc,
                "glibcxx": kind.glibcxx,
                "prepared": encode(found) if found is not None else None,
            }
        )
        if not as_json:
            state = (
                f"prepared ({printable(found.label)}, {printable(found.prepared)})"
                if found
                else f"not prepared (`patchkit root prepare {name}`)"
            )
            out(f"{name}: Debian {kind.suite}, floor GLIBC_{kind.glibc} GLIBCXX_{kind.glibcxx}: {state}")
    if as_json:
        out_json({"schema": 1, "roots": rows})


COMMANDS = [root_cmd]
