"""`patchkit smoke OUTDIR`.

The result goes to stdout: one line per check as it ends (``  ✓ pass NAME (1.2s): why``,
``✕ fail``, ``- skip``), then ``smoke passed`` (``failed``, ``skipped``, ``partial``); the
step and a failure's error (exit 7) go to stderr. A build prints the same check lines on
stderr, with its progress.
"""

from __future__ import annotations

import os
from pathlib import Path

import click
from rich.text import Text

from patchkit.cli._common import out, out_styled
from patchkit.cli._types import FiniteFloatRange
from patchkit.core.log import log
from patchkit.smoke.checks import CHECKS
from patchkit.smoke.emulate import find_emulation
from patchkit.smoke.runner import raise_if_failed, run_smoke
from patchkit.spec.buildinfo import CheckResult, read_build_info

__all__ = ["COMMANDS", "print_check"]

_MARK = {"pass": "[green]✓ pass[/green]", "fail": "[red]✕ fail[/red]", "skip": "[yellow]- skip[/yellow]"}


def print_check(r: CheckResult, *, err: bool = False) -> None:
    """One check's verdict line: on stdout (``err``: on stderr, a build's progress)."""
    line = Text.from_markup(f"  {_MARK[r.status.value]} {r.name} [dim]({r.seconds:.1f}s)[/dim]: ")
    line.append(r.why)  # the check's text, never read as markup
    out_styled(line, err=err)


@click.command("smoke")
@click.argument("outdir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--skip", multiple=True, type=click.Choice(list(CHECKS)), help="Skip a check.")
@click.option("--only", multiple=True, type=click.Choice(list(CHECKS)), help="Run only these.")
@click.option(
    "--tools",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder with helper tools such as llama-perplexity (default: the build dir).",
)
@click.option(
    "--timeout",
    type=FiniteFloatRange(min=1),
    default=300.0,
    show_default=True,
    help="Seconds a single command may take (raise it for slow machines or wine).",
)
@click.option(
    "--reference",
    type=click.Path(file_okay=False, path_type=Path),
    help="Another build's output (e.g. the Linux twin of a Windows build): its greedy "
    "tokens must match, this build's client must work with its RPC server, the "
    "real model's KL divergence must be within the cross-build thresholds and "
    "this build must not be slower (kld, speed).",
)
@click.option(
    "--model",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A real GGUF model for the kld and speed checks (default: $PATCHKIT_MODEL, "
    "else the one `patchkit model get smollm2` caches).",
)
@click.option(
    "--cpu",
    "cpu_model",
    metavar="MODEL",
    help="Run this build's binaries as another x86-64 CPU model: under qemu-x86_64 -cpu "
    "MODEL (e.g. Nehalem, SandyBridge, Haswell). The version check then names the CPU "
    "variant loaded and compares it with build-info's table, the generate and kld checks "
    "compare with this build run natively (or --reference; kld over the text's first "
    "chunks), speed is skipped, and nothing is recorded in build-info.json.",
)
def smoke_cmd(
    outdir: Path,
    skip: tuple[str, ...],
    only: tuple[str, ...],
    tools: Path | None,
    timeout: float,
    reference: Path | None,
    model: Path | None,
    cpu_model: str | None,
) -> None:
    """Run the smoke checks on a build output dir (127.0.0.1 only)."""
    info = read_build_info(outdir)
    if reference is not None:
        read_build_info(reference)  # fail early, one line, if it is not a build output
    tool_dirs = [tools] if tools else []
    if info.build_dir:
        tool_dirs.append(Path(info.build_dir) / "bin")
    env = dict(os.environ)  # what the binaries run with (and PATCHKIT_MODEL: the real model)
    emulation = None
    if cpu_model is not None:
        emulation = find_emulation(cpu_model, os_name=info.platform.os, arch=info.platform.arch, env=env)
        log.info(f"running as {emulation.describe()}: compared with the native run, not recorded")
    with log.step("smoke"):
        report = run_smoke(
            outdir,
            skip=skip,
            only=only,
            timeout=timeout,
            tool_dirs=tuple(tool_dirs),
            on_result=print_check,
            reference=reference,
            partial=bool(skip or only),
            model=model,
            emulation=emulation,
            env=env,
        )
    out(f"smoke {report.status.value}" + (f" (under {emulation.describe()})" if emulation else ""))
    raise_if_failed(report)


COMMANDS = [smoke_cmd]
