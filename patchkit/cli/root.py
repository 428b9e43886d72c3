"""`patchkit root prepare|list`: build roots (builder.sysroot), an older Debian patchkit
prepares once in the cache and builds in for a glibc floor (a recipe's ``[build] root``).

Results on stdout: `root prepare` prints the root's label (``debian11@<id>``); `root list`
one line per known root. ``--json``: `root prepare` prints the root's record
(``root.json``), `root list` one row per known root.

``root prepare --json`` keys:

- ``cmake``: cmake's version in the root
- ``debootstrap``: the debootstrap version that made it; null: not known
- ``gcc``: gcc's version in the root (10.2.1-6)
- ``glibc``: libc6's upstream version in the root (2.31)
- ``mirror``: the Debian archive it was made from
- ``name``: the root's name (debian11)
- ``packages``: installed packages
- ``packages_sha256``: of the sorted "name=version" lines: the root's id
- ``prepared``: ISO time it was made
- ``suite``: the Debian suite it was made from (bullseye)

``root list --json`` keys:

- ``roots``: one per root patchkit knows
- ``roots[].glibc``: the GLIBC floor it gives
- ``roots[].glibcxx``: the newest GLIBCXX_ version its libstdc++ gives
- ``roots[].name``: the root's name (debian11)
- ``roots[].prepared``: its root.json; null: not prepared
- ``roots[].prepared.cmake``: cmake's version in the root
- ``roots[].prepared.debootstrap``: the debootstrap version that made it; null: not known
- ``roots[].prepared.gcc``: gcc's version in the root (10.2.1-6)
- ``roots[].prepared.glibc``: libc6's upstream version in the root (2.31)
- ``roots[].prepared.mirror``: the Debian archive it was made from
- ``roots[].prepared.name``: the root's name (debian11)
- ``roots[].prepared.packages``: installed packages
- ``roots[].prepared.packages_sha256``: of the sorted "name=version" lines: the root's id
- ``roots[].prepared.prepared``: ISO time it was made
- ``roots[].prepared.suite``: the Debian suite it was made from (bullseye)
- ``roots[].suite``: the Debian suite it is made from
- ``schema``: the JSON format's version: 1
"""

from __future__ import annotations

import dataclasses
import os

import click

from patchkit.builder.sysroot import KINDS, RootRecord, find_root, prepare_root, root_dir
from patchkit.cli._common import out, out_record
from patchkit.core.log import log
from patchkit.core.paths import cache_dir
from patchkit.core.record import Record
from patchkit.core.text import printable

__all__ = ["COMMANDS", "RootRecord", "RootRow", "RootsJson"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RootRow(Record):
    """One root patchkit knows (builder.sysroot.KINDS) and its record when prepared."""

    name: str  # the root's name (debian11)
    suite: str  # the Debian suite it is made from
    glibc: str  # the GLIBC floor it gives
    glibcxx: str  # the newest GLIBCXX_ version its libstdc++ gives
    prepared: RootRecord | None  # its root.json; null: not prepared


@dataclasses.dataclass(frozen=True, kw_only=True)
class RootsJson(Record):
    """``root list --json``."""

    schema: int = 1  # the JSON format's version: 1
    roots: tuple[RootRow, ...]  # one per root patchkit knows


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
        out_record(record)
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
            RootRow(name=name, suite=kind.suite, glibc=kind.glibc, glibcxx=kind.glibcxx, prepared=found)
        )
        if not as_json:
            state = (
                f"prepared ({printable(found.label)}, {printable(found.prepared)})"
                if found
                else f"not prepared (`patchkit root prepare {name}`)"
            )
            out(f"{name}: Debian {kind.suite}, floor GLIBC_{kind.glibc} GLIBCXX_{kind.glibcxx}: {state}")
    if as_json:
        out_record(RootsJson(roots=tuple(rows)))


COMMANDS = [root_cmd]
