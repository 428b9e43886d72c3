"""`patchkit doctor`: prints the survey (patchkit.doctor.survey) on stdout, or ``--json``
the same report as one object (the survey's ``Report`` through core.record). Doctor always
exits 0: it reports, it does not build.

``doctor --json`` keys:

- ``cuda``: the CUDA toolkit: ``error``, ``host_gcc_max`` (the newest gcc it takes as host
  compiler), and when found ``nvcc``, ``version``, ``root``, ``source``, ``sms``, ``cublas``,
  ``cublas_source``, ``libcuda``, ``libcuda_kind``, ``cuobjdump``, ``host_compiler``
- ``floors``: the C library floors this machine builds for
- ``floors[].glibc``: None: not known (not glibc)
- ``floors[].glibcxx``: the newest GLIBCXX_ version it gives
- ``floors[].how``: what it is, or what to do to make it ready
- ``floors[].ready``: builds for it now
- ``floors[].where``: "host" or a root's name
- ``host_os``: linux, windows, macos
- ``machine``: platform.machine(): x86_64, aarch64, AMD64
- ``project_error``: why the project could not be read; null: it could
- ``recipes``: one per recipe
- ``recipes[].notes``: what else to know
- ``recipes[].ok``: it can build here
- ``recipes[].recipe``: the recipe's name
- ``recipes[].todo``: what to do about it
- ``recipes[].why``: why not
- ``schema``: the JSON format's version: 1
- ``tools``: by name: cmake, ninja, cc, ccache, mingw, wine, ...
- ``tools{}.note``: what else to know (an unusable version, how it was found)
- ``tools{}.path``: where it is; null: not found
- ``tools{}.version``: what it says its version is
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import click

from patchkit.cli._common import out, out_record
from patchkit.core.errors import FatalError
from patchkit.doctor.survey import Report, build_report

__all__ = ["COMMANDS", "doctor", "report_lines"]


def report_lines(r: Report) -> list[str]:
    """The report as text, one line each (what `patchkit doctor` prints)."""
    lines: list[str] = []

    def _line(label: str, value: str) -> None:
        lines.append(f"  {label:<12} {value}")

    lines.append(f"patchkit doctor ({r.host_os} {r.machine})")
    lines.append("tools")
    for t in r.tools.values():
        if t.found:
            _line(t.name, f"{t.version or '?':<10} {t.path}" + (f"  ({t.note})" if t.note else ""))
        else:
            _line(t.name, f"not found{f' ({t.note})' if t.note else ''}")
    lines.append("CUDA")
    tk = r.toolkit
    if tk is None:
        _line("nvcc", f"not found: {r.toolkit_error}")
    else:
        _line("nvcc", f"{'.'.join(map(str, tk.version)):<10} {tk.nvcc} (from {tk.source})")
        _line("root", str(tk.root))
        _line("archs", " ".join(f"sm_{s}" for s in sorted(tk.sms)))
        gcc_max = r.host_gcc_max
        _line("host cxx", tk.host.describe() + (f"; accepts gcc <= {gcc_max}" if gcc_max is not None else ""))
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
    if r.floors:
        lines.append("C library floors (what this machine builds for)")
        for f in r.floors:
            floor = f"GLIBC_{f.glibc}" if f.glibc else "glibc unknown"
            floor += f" GLIBCXX_{f.glibcxx}" if f.glibcxx else ""
            _line(f.where, f"{'✓' if f.ready else '✕'} {floor}: {f.how}")
    lines.append("recipes")
    if r.project_error:
        lines.append(f"  {r.project_error}")
    for v in r.verdicts:
        mark = "✓" if v.ok else "✕"
        lines.append(f"  {mark} {v.recipe}: " + ("can build here" if v.ok else f"cannot: {v.why}"))
        if v.todo and not v.ok:
            lines.append(f"      what to do: {v.todo}")
        for n in v.notes:
            lines.append(f"      note: {n}")
    return lines


@click.command("doctor")
@click.option(
    "--cuda-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="CUDA toolkit folder to check (default: CUDAToolkit_ROOT, CUDA_PATH, PATH).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def doctor(ctx: click.Context, cuda_root: Path | None, as_json: bool) -> None:
    """Show the toolkits and compilers found, and whether each recipe can build here."""
    from patchkit.cli._common import load_project

    project, series, problem = None, None, ""
    try:
        project, series = load_project(ctx)
    except FatalError as e:
        problem = f"cannot read the project: {e.message}"
    from patchkit.core.paths import cache_dir

    try:
        cache = cache_dir()
    except FatalError:
        cache = None
    report = build_report(
        project, series, cuda_root=cuda_root, env=dict(os.environ), project_error=problem, cache_root=cache
    )
    report = _worded(report)
    if as_json:
        out_record(report)
    else:
        for line in report_lines(report):
            out(line)


def _worded(report: Report) -> Report:
    """``report`` with the words of each failure raised as fields (a problem)."""
    from patchkit.cli.problems import words

    verdicts = []
    for v in report.verdicts:
        said = words(v.problem) if v.problem is not None else None
        verdicts.append(v if said is None else dataclasses.replace(v, why=said[0], todo=said[1] or v.todo))
    toolkit = words(report.toolkit_problem) if report.toolkit_problem is not None else None
    error = toolkit[0] if toolkit is not None else report.toolkit_error
    return dataclasses.replace(report, verdicts=tuple(verdicts), toolkit_error=error)


COMMANDS = [doctor]
