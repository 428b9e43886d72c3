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
- ``floors[].how``: what it is, or what to do to make it ready (the words of ``state``)
- ``floors[].packages``: needs-packages: the apt packages preparing it needs
- ``floors[].ready``: builds for it now
- ``floors[].state``: host, prepared, needs-bwrap (prepared, but bwrap is missing), not-prepared
  (and can be), needs-packages (preparing it needs them)
- ``floors[].where``: "host" or a root's name
- ``host_os``: linux, windows, macos
- ``machine``: platform.machine(): x86_64, aarch64, AMD64
- ``project_error``: why the project could not be read; null: it could
- ``recipes``: one per recipe
- ``recipes[].facts``: what else to know, as data
- ``recipes[].facts[].floor``: host-newer, in-root: the GLIBC floor
- ``recipes[].facts[].glibc``: host-newer: this machine's glibc
- ``recipes[].facts[].host``: toolkit: the host compiler
- ``recipes[].facts[].kind``: what it is: toolkit (the toolkit and host compiler), cuda (a note
  of the CUDA preflight), no-ccache, no-wine, host-newer (the host's glibc is newer than the
  recipe's floor), in-root (it builds in a root)
- ``recipes[].facts[].root``: in-root: the root's name
- ``recipes[].facts[].suite``: in-root: the root's Debian suite
- ``recipes[].facts[].text``: toolkit: the toolkit; cuda: the preflight's note
- ``recipes[].fix``: what to do about it, as data; null: nothing to do
- ``recipes[].fix.archs``: build-on a CUDA recipe: its archs
- ``recipes[].fix.choices``: choose-root: the roots patchkit knows
- ``recipes[].fix.hint``: error: the advice the error was raised with
- ``recipes[].fix.kind``: what would fix it: build-tools (cmake, ninja and the compilers),
  install (apt packages), prepare-root, choose-root (a root patchkit knows), build-on (another
  os), fix-recipe, error (the raised error's own advice)
- ``recipes[].fix.os``: build-on: where to build it
- ``recipes[].fix.packages``: install: the apt packages
- ``recipes[].fix.root``: prepare-root: the root to prepare
- ``recipes[].fix.toolkits``: build-on a CUDA recipe: the toolkits that build its archs
- ``recipes[].notes``: what else to know (the words of ``facts``)
- ``recipes[].ok``: it can build here
- ``recipes[].recipe``: the recipe's name
- ``recipes[].todo``: what to do about it (the words of ``fix``)
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
from patchkit.doctor.survey import Fact, Fix, Floor, Report, build_report

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


_OS_NAMES = {"linux": "Linux", "windows": "Windows", "macos": "macOS"}


def _todo(fix: Fix) -> str:
    """What to do about a verdict, in words (``fix`` as data)."""
    if fix.kind == "build-tools":
        return "pip install cmake ninja; install the compilers (apt install g++ g++-mingw-w64-x86-64)"
    if fix.kind == "install":
        return f"apt install {' '.join(fix.packages)}"
    if fix.kind == "prepare-root":
        return f"patchkit root prepare {fix.root} (as root; debootstrap from Debian's archive)"
    if fix.kind == "choose-root":
        return f"use one of {', '.join(fix.choices)}"
    if fix.kind == "build-on" and fix.os == "windows" and fix.archs:
        return (
            "build it on Windows from a Visual Studio developer prompt (cl + Ninja) "
            f"with a CUDA toolkit; needs {fix.toolkits} for {fix.archs}"
        )
    if fix.kind == "build-on":
        return f"build it on {_OS_NAMES.get(fix.os, fix.os)}"
    if fix.kind == "fix-recipe":
        return "fix the recipe"
    return fix.hint


def _note(fact: Fact) -> str:
    """One thing to know about a buildable recipe, in words (``fact`` as data)."""
    if fact.kind == "toolkit":
        return f"{fact.text}, host compiler {fact.host}"
    if fact.kind == "no-ccache":
        return "no ccache: every CUDA build compiles from scratch (apt install ccache)"
    if fact.kind == "no-wine":
        return "no wine64: the Windows smoke tests cannot run here (apt install wine64)"
    if fact.kind == "host-newer":
        return (
            f"its floor is GLIBC_{fact.floor} and this machine's glibc is {fact.glibc}: "
            "`release` refuses what needs more; set [build] root"
        )
    if fact.kind == "in-root":
        return f"builds in the root {fact.root} (Debian {fact.suite}: floor GLIBC_{fact.floor})"
    return fact.text


def _how(f: Floor) -> str:
    """What a floor is, or what to do to make it ready, in words (its ``state``)."""
    if f.state == "host":
        return "a plain build links against this machine's glibc and libstdc++"
    if f.state == "prepared" and f.root is not None:
        return f"root {f.root.label} ({f.root.suite}, GCC {f.root.gcc}, prepared {f.root.prepared})"
    if f.state == "needs-bwrap":
        return "prepared, but bwrap is missing to build in it (apt install bubblewrap)"
    if f.state == "not-prepared":
        return f"not prepared: `patchkit root prepare {f.where}` (as root, network, ~5 min)"
    if f.state == "needs-packages":
        return f"not prepared; needs apt install {' '.join(f.packages)}"
    return f.how


def _worded(report: Report) -> Report:
    """``report`` with its words: what to do and the notes of each verdict (from its fix and
    facts, or the problem it was raised with), and each floor's line."""
    from patchkit.cli.problems import words

    verdicts = []
    for v in report.verdicts:
        said = words(v.problem) if v.problem is not None else None
        todo = _todo(v.fix) if v.fix is not None else v.todo
        notes = tuple(_note(f) for f in v.facts) or v.notes
        if said is not None:
            verdicts.append(dataclasses.replace(v, why=said[0], todo=said[1] or todo, notes=notes))
        else:
            verdicts.append(dataclasses.replace(v, todo=todo, notes=notes))
    toolkit = words(report.toolkit_problem) if report.toolkit_problem is not None else None
    error = toolkit[0] if toolkit is not None else report.toolkit_error
    floors = tuple(dataclasses.replace(f, how=_how(f)) for f in report.floors)
    return dataclasses.replace(report, verdicts=tuple(verdicts), toolkit_error=error, floors=floors)


COMMANDS = [doctor]
