"""`patchkit verify DIST`.

The result goes to stdout: one line when everything matches (then one line per archive
with its C library floor: what its files need, the floor its recipe states, what they take
from the system), else one line per difference (then the error, exit 12, on stderr).
``--json`` prints one object instead, and the lines or the error (with the differences)
go to stderr.

``verify --json`` keys:

- ``archives``: the archives checked
- ``differences``: one line per difference
- ``directory``: the folder verified, as named
- ``images``: the container images checked
- ``ok``: everything matches
- ``schema``: the JSON format's version: 1
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from patchkit.cli._common import out, out_record
from patchkit.core.errors import ReleaseError
from patchkit.release.floor import floor_line
from patchkit.release.verify import verify_dir

__all__ = ["COMMANDS", "VerifyJson"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifyJson:
    """``verify --json``."""

    schema: int = 1  # the JSON format's version: 1
    directory: Path  # the folder verified, as named
    ok: bool  # everything matches
    archives: tuple[str, ...]  # the archives checked
    images: tuple[str, ...]  # the container images checked
    differences: tuple[str, ...]  # one line per difference


@click.command("verify")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the result and the differences as JSON.")
@click.option(
    "--allowed-signers",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="OpenSSH allowed-signers file: every provenance statement must "
    "carry a good signature (ssh-keygen -Y, namespace patchkit) "
    "of a key in it.",
)
def verify_cmd(directory: Path, as_json: bool, allowed_signers: Path | None) -> None:
    """Recompute SHA256SUMS, every archive's members, its manifest and its provenance;
    list what differs."""
    report = verify_dir(directory, allowed_signers=allowed_signers)
    if as_json:
        out_record(
            VerifyJson(
                directory=directory,
                ok=report.ok,
                archives=tuple(report.archives),
                images=tuple(report.images),
                differences=tuple(report.differences),
            )
        )
    if not report.ok:
        n = len(report.differences)
        if not as_json:  # the differences are the result: on stdout, one a line
            for d in report.differences:
                out(d)
        raise ReleaseError(
            f"{directory}: {n} difference{'s' if n != 1 else ''}",
            # with --json, stdout holds them as JSON; the log shows them too, as before
            detail="\n".join(report.differences) if as_json else "",
        )
    images = f" and {len(report.images)} container image(s)" if report.images else ""
    out(
        f"{directory}: {len(report.archives)} archive(s){images} match SHA256SUMS, their manifests "
        "and provenance" + (" (signed by allowed signers)" if allowed_signers else ""),
        err=as_json,
    )
    for name, manifest in report.floors:
        out(floor_line(name, manifest), err=as_json)


COMMANDS = [verify_cmd]
