"""`patchkit pe-stack` and `patchkit pe-info`: Windows PE header edits on any OS.

`pe-stack` prints one line per file on stdout, the edit made (or that none was needed);
``--json`` prints one object instead (the lines go to stderr), one edit per file in
argument order. `pe-info` prints one line per file on stdout; ``--json`` one object, one
header per file in argument order.

``pe-stack --json`` keys:

- ``edits``: one per file, in argument order
- ``edits[].changed``: False: the file already had these values and was not rewritten
- ``edits[].checksum_after``: header checksum after
- ``edits[].checksum_before``: header checksum before
- ``edits[].commit_after``: stack commit after, bytes
- ``edits[].commit_before``: stack commit before, bytes
- ``edits[].file``: the file, as named
- ``edits[].reserve_after``: stack reserve after, bytes
- ``edits[].reserve_before``: stack reserve before, bytes
- ``edits[].signature_removed``: its Authenticode signature was removed (--allow-unsign)
- ``schema``: the JSON format's version: 1

``pe-info --json`` keys:

- ``files``: one per file, in argument order
- ``files[].certificate_offset``: of the certificate table, 0 when unsigned
- ``files[].certificate_size``: of the certificate table, 0 when unsigned
- ``files[].checksum``: as stored in the header
- ``files[].checksum_computed``: what the file's bytes give
- ``files[].checksum_ok``: the stored checksum is the computed one
- ``files[].format``: "PE32" or "PE32+"
- ``files[].is_dll``: IMAGE_FILE_DLL is set
- ``files[].large_address_aware``: IMAGE_FILE_LARGE_ADDRESS_AWARE (PE32: 4 GiB, not 2 GiB)
- ``files[].machine``: x86_64, i386, arm64, ... or 0xNNNN
- ``files[].path``: the file, as named
- ``files[].signed``: the security (certificate) directory is non-empty
- ``files[].size``: file size in bytes
- ``files[].stack_commit``: SizeOfStackCommit, bytes
- ``files[].stack_reserve``: SizeOfStackReserve, bytes
- ``files[].subsystem``: console, windows-gui, ...
- ``schema``: the JSON format's version: 1
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from patchkit.binary.pe_stack import PEInfo, StackEdit, apply_stack_edits, pe_info, plan_stack_edit
from patchkit.cli._common import out, out_record
from patchkit.core.errors import FatalError
from patchkit.core.log import log
from patchkit.core.units import format_size, parse_size

__all__ = ["COMMANDS", "EditsJson", "InfoJson", "pe_info_cmd", "pe_stack_cmd"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class EditsJson:
    """``pe-stack --json``."""

    schema: int = 1  # the JSON format's version: 1
    edits: tuple[StackEdit, ...]  # one per file, in argument order


@dataclasses.dataclass(frozen=True, kw_only=True)
class InfoJson:
    """``pe-info --json``."""

    schema: int = 1  # the JSON format's version: 1
    files: tuple[PEInfo, ...]  # one per file, in argument order


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
        out_record(EditsJson(edits=tuple(edits)))


@click.command("pe-info")
@_FILES
@click.option("--json", "as_json", is_flag=True, help="Print the headers as JSON.")
def pe_info_cmd(files: tuple[Path, ...], as_json: bool) -> None:
    """Show a PE file's machine, format, subsystem, stack sizes, checksum and signature."""
    infos = [pe_info(f) for f in files]
    if as_json:
        out_record(InfoJson(files=tuple(infos)))
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
