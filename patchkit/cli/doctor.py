"""`patchkit doctor`: prints the survey (patchkit.doctor.survey), or ``--json`` writes it to
stdout. Doctor always exits 0: it reports, it does not build."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import click

from patchkit.builder.cuda.toolkit import limits_for
from patchkit.core.errors import FatalError
from patchkit.core.log import log
from patchkit.doctor.survey import Report, build_report

__all__ = ["COMMANDS", "doctor"]


def _line(label: str, value: str) -> None:
    log.info(f"  {label:<12} {value}")


def print_report(r: Report) -> None:
    log.info(f"patchkit doctor ({r.host_os} {platform.machine()})")
    log.info("tools")
    for t in r.tools.values():
        if t.found:
            _line(t.name, f"{t.version or '?':<10} {t.path}" + (f"  ({t.note})" if t.note else ""))
        else:
            _line(t.name, f"not found{f' ({t.note})' if t.note else ''}")
    log.info("CUDA")
    tk = r.toolkit
    if tk is None:
        _line("nvcc", f"not found: {r.toolkit_error}")
    else:
        lim = limits_for(tk.version)
        _line("nvcc", f"{'.'.join(map(str, tk.version)):<10} {tk.nvcc} (from {tk.source})")
        _line("root", str(tk.root))
        _line("archs", " ".join(f"sm_{s}" for s in sorted(tk.sms)))
        _line("host cxx", tk.host.describe() + (f"; accepts gcc <= {lim.gcc_max}" if lim else ""))
        _line(
            "cuBLAS",
            f"{tk.cublas.library} ({tk.cublas.source})"
            if tk.cublas
            else "missing (pip install nvidia-cublas for CUDA 13, nvidia-cublas-cu12 for 12)",
        )
        _line(
            "libcuda",
            f"{tk.libcuda} ({tk.libcuda_kind})"
            if tk.libcuda
            else "no stub, no driver library: builds use GGML_CUDA_NO_VMM=ON",
        )
        _line(
            "cuobjdump", str(tk.cuobjdump) if tk.cuobjdump else "missing (pip install nvidia-cuda-cuobjdump)"
        )
    log.info("recipes")
    if r.project_error:
        log.info(f"  {r.project_error}")
    for v in r.verdicts:
        mark = "✓" if v.ok else "✕"
        log.info(f"  {mark} {v.recipe}: " + ("can build here" if v.ok else f"cannot: {v.why}"))
        if v.todo and not v.ok:
            log.info(f"      what to do: {v.todo}")
        for n in v.notes:
            log.info(f"      note: {n}")


@click.command("doctor")
@click.option(
    "--cuda-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="CUDA toolkit folder to check (default: CUDAToolkit_ROOT, CUDA_PATH, PATH).",
)
@click.option("--json", "as_json", is_flag=True, help="Write the report as JSON to stdout.")
@click.pass_context
def doctor(ctx: click.Context, cuda_root: Path | None, as_json: bool) -> None:
    """Show the toolkits and compilers found, and whether each recipe can build here."""
    from patchkit.cli._common import load_project

    project, series, problem = None, None, ""
    try:
        project, series = load_project(ctx)
    except FatalError as e:
        problem = f"cannot read the project: {e.message}"
    report = build_report(project, series, cuda_root=cuda_root, env=dict(os.environ), project_error=problem)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        print_report(report)


COMMANDS = [doctor]
