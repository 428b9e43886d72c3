"""CPU variants vs one linked CPU backend: speed on this machine and cold build cost.

    python3 benchmarks/cpu_variants_bench.py --upstream /path/to/llama.cpp \\
        [--recipe cpu-rpc] [--work DIR] [-j 2] [--rounds 15] [--model GGUF] [--threads N] [--reuse]

From one recipe of this project (default ``cpu-rpc``) it writes two: ``single``, the recipe
without ``[build] cpu_variants`` (one CPU backend linked into libggml, as every build was
before variants), and ``variants``, the recipe as it is; both build only ``llama-bench`` and
``ggml-rpc-server`` (which says which variant it loads). Each is built cold: a fresh cache
folder, no compiler launcher (``--launcher none``), so every file compiles; the wall time and
the CPU time of the build (patchkit and every process it waited for: steadier than the wall
time on a shared machine) are reported side by side.

Then both ``llama-bench`` run on the real model (``patchkit model get smollm2``, or
``--model``), alternating, ``--rounds`` times each (default 15; ``-p 64 -n 16 -r 3``, as the smoke
speed check); the medians of prompt and decode tok/s and their ratio, variants / single.
The goal: both ratios >= 0.95 (CPU variants cost no speed). ``--reuse`` skips builds whose output exists (the
build times then come from ``WORK/builds.json``); ``--build-only`` stops after the builds
(build on a busy machine, measure speed on a quiet one).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from patchkit.smoke.emulate import loaded_variant  # noqa: E402
from patchkit.smoke.realmodel import find_model  # noqa: E402
from patchkit.smoke.speed import bench_args, parse_bench  # noqa: E402

BUILDS = ("single", "variants")
TARGETS = '["llama-bench", "ggml-rpc-server"]'
_STEPS = re.compile(r"ninja \d+/(\d+)")


def derived_recipe(text: str, name: str, *, variants: bool) -> str:
    """The recipe's TOML with another name, only the benchmark's targets, no smoke tools and
    (``variants`` False) no ``cpu_variants``."""
    text = re.sub(r'(?m)^name\s*=\s*"[^"]*"', f'name = "{name}"', text, count=1)
    text = re.sub(r"(?ms)^targets\s*=\s*\[[^\]]*\]", f"targets = {TARGETS}", text, count=1)
    text = re.sub(r"(?ms)^tools\s*=\s*\[[^\]]*\]\n?", "", text)
    if not variants:
        text, n = re.subn(r"(?ms)^cpu_variants\s*=\s*\[[^\]]*\]\n?", "", text)
        if n != 1:
            sys.exit("the recipe has no [build] cpu_variants: nothing to compare")
    return text


def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def build(work: Path, name: str, upstream: str, jobs: int) -> dict[str, float | int]:
    out, cache = work / "out" / name, work / f"cache-{name}"
    shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    cmd = [
        sys.executable, "-m", "patchkit", "--project", str(work / "project"), "build", f"bench-{name}",
        "--upstream", upstream, "--out", str(out), "--no-smoke", "--launcher", "none", "-j", str(jobs),
    ]  # fmt: skip
    env = {**os.environ, "PATCHKIT_CACHE": str(cache)}
    print(f"building {name} cold: {' '.join(cmd)}", file=sys.stderr, flush=True)
    cpu, start = _cpu_seconds(), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    (work / f"build-{name}.log").write_text(proc.stderr)
    if proc.returncode != 0:
        sys.exit(f"building {name} failed (exit {proc.returncode}): {work / f'build-{name}.log'}")
    steps = [int(m) for m in _STEPS.findall(proc.stderr)]
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "steps": max(steps) if steps else 0}


def variant_of(out: Path) -> str:
    server = out / "bin" / "ggml-rpc-server"
    r = subprocess.run([str(server), "--help"], capture_output=True, text=True, timeout=60)
    return loaded_variant(r.stdout + r.stderr) or "(linked)"


def bench(out: Path, args: list[str]) -> dict[str, list[float]]:
    r = subprocess.run([str(out / "bin" / "llama-bench"), *args], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        sys.exit(f"{out}/bin/llama-bench failed (exit {r.returncode}): {r.stderr[-2000:]}")
    return parse_bench(r.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True, help="llama.cpp clone or mirror holding the pin")
    ap.add_argument("--recipe", default="cpu-rpc", help="a recipe of this project (recipes/NAME.toml)")
    ap.add_argument("--work", type=Path, default=Path("bench-work/cpu-variants"))
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    # 5 rounds (14 s) once gave prompt 0.926x and then 0.979x at 15 rounds on the same builds:
    # pp64 moves more than 5 % between runs of 3 repetitions on 2 shared cores
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--reuse", action="store_true", help="keep builds whose output exists")
    ap.add_argument("--build-only", action="store_true", help="build (cold), print the times, stop")
    a = ap.parse_args()
    if not a.build_only and find_model(a.model, env=dict(os.environ)) is None:
        sys.exit("no real model: run `patchkit model get smollm2` or pass --model")

    work = a.work.resolve()
    project = work / "project"
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(ROOT / "patches", project / "patches")
    text = (ROOT / "recipes" / f"{a.recipe}.toml").read_text()
    (project / "recipes").mkdir(parents=True)
    for name in BUILDS:
        derived = derived_recipe(text, f"bench-{name}", variants=name == "variants")
        (project / "recipes" / f"bench-{name}.toml").write_text(derived)

    saved = work / "builds.json"
    times: dict[str, dict[str, float | int]] = json.loads(saved.read_text()) if saved.is_file() else {}
    for name in BUILDS:
        if a.reuse and (work / "out" / name / "bin" / "llama-bench").is_file() and name in times:
            continue
        times[name] = build(work, name, a.upstream, a.jobs)
        saved.write_text(json.dumps(times, indent=2))

    if a.build_only:
        print(json.dumps(times, indent=2))
        return
    model = find_model(a.model, env=dict(os.environ))
    if model is None:
        sys.exit("no real model: run `patchkit model get smollm2` or pass --model")
    outs = {name: work / "out" / name for name in BUILDS}
    args = bench_args(model.path, a.threads)
    got: dict[str, dict[str, list[float]]] = {name: {} for name in BUILDS}
    for i in range(a.rounds):
        for name in BUILDS if i % 2 == 0 else reversed(BUILDS):  # alternate who goes first
            for test, values in bench(outs[name], args).items():
                got[name].setdefault(test, []).extend(values)
        print(f"round {i + 1}/{a.rounds} done", file=sys.stderr, flush=True)

    cpu = platform.processor() or platform.machine()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next(ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    modules = len(list((outs["variants"] / "bin").glob("*ggml-cpu-*")))
    print(f"recipe {a.recipe}, {cpu}, {os.cpu_count()} cores; {model.label}")
    print(f"llama-bench -p 64 -n 16 -r 3 -t {a.threads}, {a.rounds} alternating rounds, median tok/s")
    print(f"{'':18}{'single':>16}{'variants':>16}{'variants/single':>18}")
    print(f"{'CPU backend':18}{variant_of(outs['single']):>16}{variant_of(outs['variants']):>16}"
          f"{f'{modules} modules':>18}")  # fmt: skip
    ok = True
    for test in sorted(got["single"]):
        s, v = statistics.median(got["single"][test]), statistics.median(got["variants"][test])
        ok &= v / s >= 0.95
        print(f"{test:18}{s:>12.1f} t/s{v:>12.1f} t/s{v / s:>17.3f}x")
    for key, label in (("wall_s", "cold build wall"), ("cpu_s", "cold build CPU")):
        s, v = float(times["single"][key]), float(times["variants"][key])
        print(f"{label:18}{s:>14.0f} s{v:>14.0f} s{v / s:>17.2f}x")
    print(f"{'compile steps':18}{times['single']['steps']:>16}{times['variants']['steps']:>16}")
    print(f"variants within 5 % of single (prompt and decode): {'yes' if ok else 'NO'}")


if __name__ == "__main__":
    main()
