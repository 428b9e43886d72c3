"""Time `patchkit build` with nothing changed (a no-op rebuild): build a recipe once, then
run it N more times and print the median, min and max wall time of those.

    python3 benchmarks/noop_rebuild.py [--n 5]
        hermetic: the test suite's synthetic upstream and fixture project, in a temp dir
    python3 benchmarks/noop_rebuild.py --project . --recipe cpu-rpc \\
        --upstream /path/to/llama.cpp --out out/cpu-rpc [--cache DIR] [-j 2] [--n 5]
        a real build (its cache: --cache, else PATCHKIT_CACHE, else the default); with the
        real model cached (`patchkit model get smollm2`) the first build runs the kld check

Each run is a fresh `python -m patchkit` process, as a user or CI runs it, so the time
includes Python's start and patchkit's imports; with compiled bytecode, as an installed
package has it (kept in a temporary PYTHONPYCACHEPREFIX, even where PYTHONDONTWRITEBYTECODE
is set: the first build writes it). A rebuild that did more than a no-op
(configured again, compiled, ran the smoke checks) is reported as such: its time is then
not a no-op's. The stage times come from the last run's output (`✓ stage (Ns)`).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_STEP = re.compile(r"^✓ (?P<name>.+?) \((?P<secs>[\d.]+)s\)$")
_NOOP_SIGNS = ("up to date at", "configure inputs unchanged")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_build(project: Path, recipe: str, args: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of it and its children, its log)."""
    cmd = [sys.executable, "-m", "patchkit", "--project", str(project), "build", recipe, *args]
    cpu, start = _cpu(), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    took, cpu = time.perf_counter() - start, _cpu() - cpu
    if proc.returncode != 0:
        sys.exit(f"`{' '.join(cmd)}` failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return took, cpu, proc.stderr


def not_noop(output: str) -> list[str]:
    """What this build did beyond a no-op (empty: nothing)."""
    why = [f"no {s!r}" for s in _NOOP_SIGNS if s not in output]
    if "▸ smoke" in output and "smoke: unchanged since" not in output:
        why.append("ran the smoke checks")
    m = re.search(r"compile cache \([^)]*\): (\d+) compiles", output)
    if m and int(m.group(1)):
        why.append(f"{m.group(1)} compiles")
    return why


def stages(output: str) -> str:
    found = [m.groupdict() for line in output.splitlines() if (m := _STEP.match(line.strip()))]
    return ", ".join(f"{s['name'].split(' ')[0]} {s['secs']}s" for s in found)


def fixture_project(root: Path) -> tuple[Path, str, list[str]]:
    """The test suite's synthetic upstream and project under ``root``: (project, recipe, args)."""
    sys.path.insert(0, str(ROOT))
    from tests.fixtures.project import write_patch, write_recipe
    from tests.fixtures.upstream import GIT_ENV, GUARD_PATCH_BODY, make_upstream

    os.environ.update(GIT_ENV)
    os.environ["GIT_CONFIG_GLOBAL"] = os.devnull
    upstream = make_upstream(root / "upstream")
    project = root / "project"
    (project / "recipes").mkdir(parents=True)
    (project / "patches").mkdir()
    (project / "patches" / "series").write_text("# fixture series\n")
    write_patch(project / "patches", "0001-zero-nbytes-guard.patch", GUARD_PATCH_BODY)
    write_recipe(project, "fixture", url=str(upstream.path), commit=upstream.head)
    return project, "fixture", ["--out", str(root / "out"), "-j", "2"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", type=Path, help="a patchkit project (default: the hermetic fixture)")
    ap.add_argument("--recipe", default="cpu-rpc", help="with --project (default cpu-rpc)")
    ap.add_argument("--upstream", help="with --project: llama.cpp URL or local clone/mirror")
    ap.add_argument("--out", type=Path, help="with --project: the output folder")
    ap.add_argument("--cache", type=Path, help="with --project: the patchkit cache (PATCHKIT_CACHE)")
    ap.add_argument("-j", "--jobs", type=int, help="build jobs")
    ap.add_argument("--n", type=int, default=5, help="no-op rebuilds to time (default 5)")
    args = ap.parse_args()
    if args.n < 1:
        ap.error("--n must be at least 1")

    with tempfile.TemporaryDirectory(prefix="patchkit-noop-") as tmp:
        if args.project is None:
            project, recipe, build_args = fixture_project(Path(tmp))  # sets git's identity
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        if args.project is None:
            env["PATCHKIT_CACHE"] = str(Path(tmp) / "cache")
            env.pop("PATCHKIT_MODEL", None)
        else:
            project, recipe, build_args = args.project.resolve(), args.recipe, []
            if args.upstream:
                build_args += ["--upstream", args.upstream]
            if args.out:
                build_args += ["--out", str(args.out)]
            if args.jobs:
                build_args += ["-j", str(args.jobs)]
            if args.cache:
                env["PATCHKIT_CACHE"] = str(args.cache.resolve())
        print(f"patchkit build {recipe} {' '.join(build_args)}  (project {project})")
        took, cpu, out = run_build(project, recipe, build_args, env)
        print(f"first build: {took:.2f}s (cpu {cpu:.2f}s)  [{stages(out)}]")
        times, cpus = [], []
        for i in range(args.n):
            took, cpu, out = run_build(project, recipe, build_args, env)
            times.append(took)
            cpus.append(cpu)
            extra = not_noop(out)
            note = f"  NOT A NO-OP: {'; '.join(extra)}" if extra else ""
            print(f"no-op rebuild {i + 1}: {took:.2f}s (cpu {cpu:.2f}s)  [{stages(out)}]{note}")
        print(
            f"no-op rebuild, {len(times)} runs: median {statistics.median(times):.2f}s, "
            f"min {min(times):.2f}s, max {max(times):.2f}s (cpu: median {statistics.median(cpus):.2f}s)"
        )
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        if load is not None:
            print(f"load average {load:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
