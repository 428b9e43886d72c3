"""`patchkit pe-stack` and `patchkit pe-info`: Windows PE header edits on any OS.

`pe-stack` prints one line per file on stdout, the edit made (or that none was needed);
``--json`` prints ``{"schema": 1, "edits": [...]}`` instead (the lines go to stderr), one
object per file in argument order with the fields of ``StackEdit`` (``file``,
``reserve_before``, ``reserve_after``, ``commit_before``, ``commit_after``,
``checksum_before``, ``checksum_after``, ``changed``, ``signature_removed``).
`pe-info` prints one line per file on stdout; ``--json`` prints ``{"schema": 1, "files":
[...]}``, one object per file in argument order with the fields of ``PEInfo`` (``path``,
``machine``, ``format``, ``subsystem``, ``is_dll``, ``large_address_aware``,
``stack_reserve``, ``stack_commit``, ``checksum``, ``checksum_computed``, ``checksum_ok``,
``signed``, ``certificate_offset``, ``certificate_size``, ``size``).
"""

from __future__ import annotations

from pathlib import Path

import click

from patchkit.binary.pe_stack import apply_stack_edits, pe_info, plan_stack_edit
from patchkit.cli._common import out, out_json
from patchkit.core.errors import FatalError
from patchkit.core.log import log
from patchkit.core.units import format_size, parse_size

__all__ = ["COMMANDS", "pe_info_cmd", "pe_stack_cmd"]


class _Size(click.ParamType):  # type: ignore[type-arg, unused-ignore]
    name = "SIZE"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            return parse_size(str(value))
        except FatalError as e:
            self.fail(e.message, param, ctx)


_FILES = click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))


@click.command("pe-stack")
@_FILES
@click.option(
    "--reserve",
    required=True,
    type=_Size(),
    help="Stack reserve: bytes, 0x hex, or KiB/MiB/GiB (e.g. 256MiB).",
)
@click.option(
    "--commit",
    type=_Size(),
    default=None,
    help="Stack commit (default: keep the file's, lowered to the reserve if larger).",
)
@click.option("--allow-dll", is_flag=True, help="Edit DLLs too (Windows ignores a DLL's stack size).")
@click.option(
    "--allow-unsign", is_flag=True, help="Remove an Authenticode signature (the edit invalidates it)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the edits as JSON on stdout.")
def pe_stack_cmd(
    files: tuple[Path, ...],
    reserve: int,
    commit: int | None,
    allow_dll: bool,
    allow_unsign: bool,
    as_json: bool,
) -> None:
    """Set the stack reserve of Windows executables (like `editbin /STACK`).

    All or nothing: every file is checked and its edit staged and verified before any is
    renamed into place; if one rename fails, the files already done get their originals
    back. A file that already has the size is left untouched.
    """
    plans = [
        plan_stack_edit(f, reserve, commit, allow_dll=allow_dll, allow_unsign=allow_unsign) for f in files
    ]
    for f, plan in zip(files, plans):
        if plan.signature_removed:
            log.warning(
                f"{f}: removing its Authenticode signature (the header edit invalidates "
                "it); re-sign the file if it must be signed"
            )
    edits = apply_stack_edits(plans, labels=[str(f) for f in files])
    for edit in edits:
        out(edit.describe(), err=as_json)
    if as_json:
        out_json({"schema": 1, "edits": [e.to_json() for e in edits]})


@click.command("pe-info")
@_FILES
@click.option("--json", "as_json", is_flag=True, help="Print the headers as JSON.")
def pe_info_cmd(files: tuple[Path, ...], as_json: bool) -> None:
    """Show a PE file's machine, format, subsystem, stack sizes, checksum and signature."""
    infos = [pe_info(f) for f in files]
    if as_json:
        out_json({"schema": 1, "files": [i.to_json() for i in infos]})
        return
    for i in infos:
        kind = "DLL" if i.is_dll else "exe"
        checksum = (
            f"0x{i.checksum:08x} (valid)"
            if i.checksum_ok
            else f"0x{i.checksum:08x} (computed 0x{i.checksum_computed:08x})"
        )
        signed = f"signed ({i.certificate_size} bytes of certificates)" if i.signed else "not signed"
        out(
            f"{i.path}: {i.format} {i.machine} {i.subsystem} {kind}, "
            f"stack reserve {format_size(i.stack_reserve)} commit "
            f"{format_size(i.stack_commit)}, checksum {checksum}, {signed}"
        )


COMMANDS = [pe_stack_cmd, pe_info_cmd]
