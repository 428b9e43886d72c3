"""`patchkit verify DIST`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from patchkit.core.errors import ReleaseError
from patchkit.core.log import log
from patchkit.release.verify import verify_dir

__all__ = ["COMMANDS"]


@click.command("verify")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the differences as JSON on stdout.")
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
        click.echo(
            json.dumps(
                {
                    "directory": str(directory),
                    "archives": list(report.archives),
                    "differences": list(report.differences),
                },
                indent=2,
            )
        )
    if not report.ok:
        n = len(report.differences)
        raise ReleaseError(
            f"{directory}: {n} difference{'s' if n != 1 else ''}", detail="\n".join(report.differences)
        )
    log.info(
        f"{directory}: {len(report.archives)} archive(s) match SHA256SUMS, their manifests "
        "and provenance" + (" (signed by allowed signers)" if allowed_signers else "")
    )


COMMANDS = [verify_cmd]
