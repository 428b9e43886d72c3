"""The output stage's steps on the staged ``bin/``, before anything is swapped in:

1. the shipping policy (binary.shipping): every ELF file searches only `$ORIGIN`-based
   folders, every PE file imports only DLLs shipped beside it or in Windows' system
   folders; a refusal is a BuildError (exit 6), NVIDIA's runtime DLLs a warning;
2. for a Windows recipe with ``windows.rpc_clients``: a bigger stack reserve for the RPC
   clients (binary.pe_stack), recorded in build-info.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from patchkit.core.errors import BuildError
from patchkit.core.log import log
from patchkit.spec.buildinfo import PeEditRecord, StackSizes
from patchkit.spec.recipe import Recipe

__all__ = ["PostStep", "check_shipping", "post_output"]

PostStep = Callable[[Path], tuple[PeEditRecord, ...]]


def check_shipping(bin_dir: Path) -> None:
    """binary.shipping's findings: warnings logged, the first refusal raised (exit 6)."""
    from patchkit.binary.shipping import shipping_findings

    for finding in shipping_findings(bin_dir):
        if finding.refused:
            raise BuildError(finding.message, hint=finding.hint)
        log.warning(finding.message)


def post_output(recipe: Recipe) -> PostStep:
    """What write_output runs on the staged bin/: the shipping check, then the PE edits."""
    edits = _pe_stack_edits(recipe) if recipe.windows and recipe.windows.rpc_clients else None

    def post(bin_dir: Path) -> tuple[PeEditRecord, ...]:
        check_shipping(bin_dir)
        return edits(bin_dir) if edits is not None else ()

    return post


def _pe_stack_edits(recipe: Recipe) -> PostStep:
    """The post-output step for Windows: a bigger stack for the RPC clients (binary.pe_stack)."""
    from patchkit.binary.pe_stack import apply_stack_edit, plan_stack_edit
    from patchkit.core.units import format_size

    spec = recipe.windows
    assert spec is not None

    def post(bin_dir: Path) -> tuple[PeEditRecord, ...]:
        files = [bin_dir / f"{t}.exe" for t in spec.rpc_clients]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise BuildError(
                f"windows.rpc_clients: {', '.join(missing)} not in the build output",
                hint="is this a Windows build? (platform.os and build.toolchain)",
            )
        plans = [plan_stack_edit(f, spec.stack_reserve, spec.stack_commit) for f in files]
        edits = [apply_stack_edit(p, label=p.before.path.name) for p in plans]
        for e in edits:
            log.info(
                f"  {e.file.name}: stack reserve {format_size(e.reserve_before)} -> "
                f"{format_size(e.reserve_after)}"
            )
        return tuple(
            PeEditRecord(
                file=f"bin/{e.file.name}",
                before=StackSizes(stack_reserve=e.reserve_before, stack_commit=e.commit_before),
                after=StackSizes(stack_reserve=e.reserve_after, stack_commit=e.commit_after),
            )
            for e in edits
        )

    return post
