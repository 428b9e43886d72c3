"""patchkit's overhead over the build a user would run by hand: cold and warm, side by side.

    python3 benchmarks/build_overhead.py --upstream /path/to/llama.cpp \\
        [--recipe cpu-rpc] [--rounds 3] [--warm-rounds 5] [-j 2] [--work DIR] \\
        [--targets T1,T2] [--cpu-variants V1,V2] [--touch PATH] [--json FILE]

Cold, ``--rounds`` times, alternating (patchkit, by hand, patchkit, by hand, ...):

- patchkit: ``patchkit build RECIPE --clean --no-smoke --launcher none -j N`` (a new
  worktree with the patches applied, a new build dir, no compile cache), a fresh process;
- by hand: a new build dir beside it, one ``cmake -S SRC -B DIR -G GENERATOR
  -DCMAKE_BUILD_TYPE=... -D...`` with the defines of the build-info.json that patchkit
  just wrote, on patchkit's patched worktree, then ``ninja -C DIR -j N TARGETS`` (the
  recipe's targets and the CPU variants' modules that build-info names). The same cmake
  and ninja as patchkit's, no launcher either (``GGML_CCACHE=OFF`` is one of the defines),
  ``SOURCE_DATE_EPOCH`` as patchkit sets it, and the CPU variant filter that patchkit
  includes at configure time (``CMAKE_PROJECT_ggml_INCLUDE``; it is a host path, so
  build-info does not hold it).

The two build dirs must do the same compile work: after the first round ``ninja -t
commands TARGETS`` of both are compared, with the build dirs' paths and patchkit's
``-ffile-prefix-map`` flags (reproducible paths; they cost the compiler nothing) set aside.
Any other difference is printed and the script exits 1.

Warm, ``--warm-rounds`` times, alternating: touch one file a patch of the recipe changes
(default: the first C/C++ file of the first patch, ``--touch`` another), then
``patchkit build RECIPE --no-smoke --launcher none -j N`` (the worktree and build dir
reused) against ``ninja -C DIR -j N TARGETS`` in the by-hand build dir (its build.ninja
first brought up to date, not timed, in case patchkit's run changed an input of the
configure in the shared worktree: it should not, its worktree check writes nothing); the
steps and CMake re-runs of each side are printed, and a re-run on patchkit's side only is
named with the logs that show it.

Each run's wall time and CPU time (user + sys of it and every process it waited for:
steadier than the wall time on a shared machine), the medians and their ratio
patchkit / by hand (the goal: <= 1.03 for a cold build), patchkit's stage times
(build-info ``timings``) beside the by-hand configure and build. Everything goes under
``--work`` (default ``bench-work/build-overhead``: the patchkit cache, the project copy,
the output, the by-hand build dir); ``--json FILE`` writes all of it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from patchkit.builder.cmake import find_tools  # noqa: E402
from patchkit.builder.repro import source_date_epoch  # noqa: E402
from patchkit.builder.variants import VARIANTS_CMAKE  # noqa: E402

_STEP = re.compile(r"^\[(\d+)/(\d+)\]", re.M)
_PREFIX_MAP = re.compile(r"\s-ffile-prefix-map=\S+")
_C_SOURCES = (".c", ".cc", ".cpp", ".cxx")
# a launcher from the environment would reach one side's compiles and not the other's
_SCRUB = ("CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER", "CMAKE_BUILD_PARALLEL_LEVEL")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str], env: dict[str, str], log: Path) -> dict[str, Any]:
    """Run ``cmd`` (output appended to ``log``): wall and CPU seconds; exit on failure."""
    with log.open("a", encoding="utf-8") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        cpu, start = _cpu(), time.perf_counter()
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
        wall, cpu = time.perf_counter() - start, _cpu() - cpu
    if proc.returncode != 0:
        sys.exit(f"`{' '.join(cmd)}` failed (exit {proc.returncode}): see {log}")
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}


def steps_in(text: str) -> int:
    """The number of ninja steps the last build in ``text`` ran (its last ``[k/N]``)."""
    found = _STEP.findall(text)
    return int(found[-1][1]) if found else 0


def derived_recipe(text: str, targets: list[str] | None, variants: list[str] | None) -> str:
    """The recipe's TOML with other targets and/or CPU variants."""
    if targets:
        listed = json.dumps(targets)
        text, n = re.subn(r"(?ms)^targets\s*=\s*\[[^\]]*\]", f"targets = {listed}", text, count=1)
        if n != 1:
            sys.exit("the recipe has no [build] targets line to replace")
    if variants is not None:
        listed = json.dumps(variants)
        text, n = re.subn(r"(?ms)^cpu_variants\s*=\s*\[[^\]]*\]", f"cpu_variants = {listed}", text, count=1)
        if n != 1:
            sys.exit("the recipe has no [build] cpu_variants to replace")
    return text


class Bench:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.work: Path = a.work.resolve()
        self.project = self.work / "project"
        self.out = self.work / "out"
        self.hand = self.work / "hand"
        self.hand_build = self.hand / "build"
        self.logs = self.work / "logs"
        env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
        env["PATCHKIT_CACHE"] = str(self.work / "cache")
        env["CCACHE_DISABLE"] = "1"  # belt and braces: neither side has a launcher
        self.env = env
        tools = find_tools(env)
        self.cmake, self.ninja = str(tools.cmake.cmake_path), str(tools.ninja)
        self.tools = {
            "cmake": f"{self.cmake} ({tools.cmake.version})",
            "ninja": f"{self.ninja} ({tools.ninja_version})",
        }

    # -- patchkit ---------------------------------------------------------------------------
    def patchkit(self, *extra: str, log: str) -> dict[str, Any]:
        cmd = [
            sys.executable, "-m", "patchkit", "--project", str(self.project), "build", self.a.recipe,
            "--upstream", self.a.upstream, "--out", str(self.out), "--no-smoke", "--launcher", "none",
            "-j", str(self.a.jobs), *extra,
        ]  # fmt: skip
        run = timed(cmd, self.env, self.logs / log)
        info = self.info()
        run["stages"] = dict(info["timings"])
        text = Path(info["log"]).read_text(encoding="utf-8", errors="replace")
        run["steps"] = steps_in(text)
        run["configures"] = text.count("-- Generating done")
        run["cmake_reruns"] = text.count("Re-running CMake")
        return run

    def info(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.out / "build-info.json").read_text(encoding="utf-8"))
        return data

    # -- by hand ----------------------------------------------------------------------------
    def hand_plan(self, info: dict[str, Any]) -> tuple[list[str], list[str], dict[str, str]]:
        """(configure command, build command, environment) from build-info.json."""
        cm = info["cmake"]
        build_dir = Path(info["build_dir"])
        src = build_dir.parent / "src"
        defines = dict(cm["defines"])
        if info.get("cpu_variants"):
            include = self.hand / "patchkit-cpu-variants.cmake"
            if not include.is_file() or include.read_text(encoding="utf-8") != VARIANTS_CMAKE:
                include.write_text(VARIANTS_CMAKE, encoding="utf-8")  # a new mtime: CMake runs again
            defines["CMAKE_PROJECT_ggml_INCLUDE"] = include.as_posix()
        configure = [self.cmake, f"-S{src}", f"-B{self.hand_build}", "-G", cm["generator"]]
        configure += [f"-DCMAKE_BUILD_TYPE={cm['build_type']}", f"-DCMAKE_MAKE_PROGRAM={self.ninja}"]
        configure += [f"-D{k}={v}" for k, v in defines.items()]
        if cm.get("toolchain"):
            configure.append(f"--toolchain={(self.project / cm['toolchain']).as_posix()}")
        build = [self.ninja, "-C", str(self.hand_build), "-j", str(self.a.jobs), *self.targets(info)]
        env = dict(self.env)
        env["SOURCE_DATE_EPOCH"] = source_date_epoch(info["upstream"]["commit_date"])
        return configure, build, env

    @staticmethod
    def targets(info: dict[str, Any]) -> list[str]:
        variants = (info.get("cpu_variants") or {}).get("variants") or ()
        return [*info["targets"], *(f"ggml-cpu-{v['name']}" for v in variants)]

    def hand_cold(self, info: dict[str, Any], log: str) -> dict[str, Any]:
        configure, build, env = self.hand_plan(info)
        shutil.rmtree(self.hand_build, ignore_errors=True)
        self.hand_build.mkdir(parents=True)
        c = timed(configure, env, self.logs / log)
        b = timed(build, env, self.logs / log)
        text = (self.logs / log).read_text(encoding="utf-8", errors="replace")
        return {
            "wall_s": round(c["wall_s"] + b["wall_s"], 2),
            "cpu_s": round(c["cpu_s"] + b["cpu_s"], 2),
            "stages": {"configure": c["wall_s"], "build": b["wall_s"]},
            "steps": steps_in(text),
            "configures": text.count("-- Generating done"),
        }

    def settle(self, info: dict[str, Any], log: str) -> None:
        """Regenerate the by-hand build.ninja where it is out of date (not timed), so a
        by-hand warm run times the rebuild a user's edit causes and nothing patchkit's run
        may have changed in the shared worktree (llama.cpp's configure reads its git index:
        common/CMakeLists.txt). patchkit's worktree check writes nothing, so this normally
        runs no step."""
        _, _, env = self.hand_plan(info)
        timed([self.ninja, "-C", str(self.hand_build), "build.ninja"], env, self.logs / log)

    def hand_warm(self, info: dict[str, Any], log: str) -> dict[str, Any]:
        _, build, env = self.hand_plan(info)
        before = (self.logs / log).stat().st_size if (self.logs / log).exists() else 0
        run = timed(build, env, self.logs / log)
        text = (self.logs / log).read_text(encoding="utf-8", errors="replace")[before:]
        run["steps"] = steps_in(text)
        run["cmake_reruns"] = text.count("Re-running CMake")
        return run

    # -- the same compile work --------------------------------------------------------------
    def commands(self, build_dir: Path, targets: list[str], *, others: list[Path]) -> list[str]:
        proc = subprocess.run(
            [self.ninja, "-C", str(build_dir), "-t", "commands", *targets],
            capture_output=True, text=True, env=self.env, check=True,
        )  # fmt: skip
        out = []
        for line in proc.stdout.splitlines():
            line = _PREFIX_MAP.sub("", line)
            for p in (build_dir, *others):
                line = line.replace(str(p), "<" + p.name + ">")
            out.append(line)
        return sorted(out)

    def same_work(self, info: dict[str, Any]) -> dict[str, Any]:
        targets = self.targets(info)
        ours = Path(info["build_dir"])
        include = ours.parent / "patchkit-cpu-variants.cmake"
        a = self.commands(ours, targets, others=[include])
        b = self.commands(self.hand_build, targets, others=[self.hand / "patchkit-cpu-variants.cmake"])
        a = [ln.replace("<" + ours.name + ">", "<BUILD>") for ln in a]
        b = [ln.replace("<" + self.hand_build.name + ">", "<BUILD>") for ln in b]
        only_a = sorted(set(a) - set(b))
        only_b = sorted(set(b) - set(a))
        return {
            "commands": len(a),
            "identical": a == b,
            "only_patchkit": only_a[:5],
            "only_by_hand": only_b[:5],
        }

    def touched(self, info: dict[str, Any]) -> Path:
        src = Path(info["build_dir"]).parent / "src"
        if self.a.touch:
            path = src / str(self.a.touch)
        else:
            names = []
            for p in info["patches"]:
                text = (self.project / "patches" / p["file"]).read_text(encoding="utf-8", errors="replace")
                names += re.findall(r"(?m)^\+\+\+ b/(\S+)$", text)
            c = [n for n in names if n.endswith(_C_SOURCES)]
            if not c:
                sys.exit("no patch of the recipe changes a C/C++ file: pass --touch PATH")
            path = src / c[0]
        if not path.is_file():
            sys.exit(f"{path} is not a file of the worktree")
        return path


def _names(arg: str | None) -> list[str] | None:
    return None if arg is None else [x.strip() for x in arg.split(",") if x.strip()]


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def stage_median(runs: list[dict[str, Any]], stage: str) -> float:
    return float(statistics.median(float(r["stages"].get(stage, 0)) for r in runs))


def median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(float(r[key]) for r in runs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True, help="llama.cpp clone or mirror holding the pin (only read)")
    ap.add_argument("--recipe", default="cpu-rpc", help="a recipe of this project (recipes/NAME.toml)")
    ap.add_argument("--rounds", type=int, default=3, help="cold rounds, each side (default 3)")
    ap.add_argument("--warm-rounds", type=int, default=5, help="warm rounds, each side (default 5)")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--work", type=Path, default=Path("bench-work/build-overhead"))
    ap.add_argument("--targets", help="comma-separated targets instead of the recipe's")
    ap.add_argument("--cpu-variants", help="comma-separated CPU variants instead of the recipe's")
    ap.add_argument("--touch", help="the worktree file to touch for the warm rebuild (relative path)")
    ap.add_argument("--json", type=Path, help="write every measurement here")
    a = ap.parse_args()
    if a.rounds < 1 or a.warm_rounds < 0:
        ap.error("--rounds must be at least 1, --warm-rounds at least 0")
    recipe_file = ROOT / "recipes" / f"{a.recipe}.toml"
    if not recipe_file.is_file():
        sys.exit(f"no recipe {recipe_file}")

    b = Bench(a)
    shutil.rmtree(b.project, ignore_errors=True)
    shutil.copytree(ROOT / "patches", b.project / "patches")
    (b.project / "recipes").mkdir(parents=True)
    text = derived_recipe(recipe_file.read_text(encoding="utf-8"), _names(a.targets), _names(a.cpu_variants))
    (b.project / "recipes" / f"{a.recipe}.toml").write_text(text, encoding="utf-8")
    shutil.rmtree(b.logs, ignore_errors=True)
    b.logs.mkdir(parents=True)
    b.hand.mkdir(parents=True, exist_ok=True)

    load0 = os.getloadavg()[0]
    say(f"work {b.work}; logs {b.logs}")
    say("warm-up (not timed): the clone into the cache, `patchkit build --configure-only`")
    timed(
        [sys.executable, "-m", "patchkit", "--project", str(b.project), "build", a.recipe,
         "--upstream", a.upstream, "--out", str(b.out), "--no-smoke", "--launcher", "none",
         "--configure-only"],
        b.env, b.logs / "warm-up.log",
    )  # fmt: skip

    cold: dict[str, list[dict[str, Any]]] = {"patchkit": [], "by_hand": []}
    same: dict[str, Any] = {}
    info: dict[str, Any] = {}
    touched: Path | None = None
    for i in range(a.rounds):
        say(f"cold round {i + 1}/{a.rounds}: patchkit build --clean")
        cold["patchkit"].append(b.patchkit("--clean", log=f"cold-{i + 1}-patchkit.log"))
        info = b.info()
        say(f"  {cold['patchkit'][-1]['wall_s']:.1f} s; by hand: cmake + ninja")
        cold["by_hand"].append(b.hand_cold(info, log=f"cold-{i + 1}-by-hand.log"))
        say(f"  {cold['by_hand'][-1]['wall_s']:.1f} s")
        if i == 0:
            same = b.same_work(info)
            say(f"  same compile commands: {same['identical']} ({same['commands']})")
            touched = b.touched(info) if a.warm_rounds else None

    configure, build, _ = b.hand_plan(info)
    warm: dict[str, list[dict[str, Any]]] = {"patchkit": [], "by_hand": []}
    for i in range(a.warm_rounds):
        assert touched is not None
        say(f"warm round {i + 1}/{a.warm_rounds}: touch {touched.name}; patchkit build, then ninja")
        touched.touch()
        warm["patchkit"].append(b.patchkit(log=f"warm-{i + 1}-patchkit.log"))
        b.settle(info, log=f"warm-{i + 1}-settle.log")
        touched.touch()
        warm["by_hand"].append(b.hand_warm(info, log=f"warm-{i + 1}-by-hand.log"))

    load1 = os.getloadavg()[0]
    cpu = platform_cpu()
    variants = len((info.get("cpu_variants") or {}).get("variants") or ())
    print(f"recipe {a.recipe} at {info['upstream']['commit'][:12]}; targets {', '.join(info['targets'])}"
          f"{f' + {variants} CPU variants' if variants else ''}")  # fmt: skip
    print(
        f"{cpu}, {os.cpu_count()} cores, -j {a.jobs}, no compiler launcher; load {load0:.1f} -> {load1:.1f}"
    )
    print(f"{a.rounds} cold + {a.warm_rounds} warm rounds, alternating (patchkit first); medians")
    print(f"by hand: {' '.join(configure[:5])} ... ({len(configure) - 5} more args)")
    print(f"         {' '.join(build)}")
    print(f"{'':24}{'patchkit':>12}{'by hand':>12}{'ratio':>10}")
    ratios: dict[str, float] = {}
    for phase, runs in (("cold", cold), ("warm", warm)):
        if not runs["patchkit"]:
            continue
        for key, label in (("wall_s", "wall"), ("cpu_s", "CPU")):
            p, h = median(runs["patchkit"], key), median(runs["by_hand"], key)
            ratios[f"{phase}_{key[:-2]}"] = round(p / h, 4) if h else float("nan")
            print(f"{f'{phase} {label}':24}{p:>10.1f} s{h:>10.1f} s{p / h if h else float('nan'):>9.3f}x")
        sp = sorted({r["steps"] for r in runs["patchkit"]})
        sh = sorted({r["steps"] for r in runs["by_hand"]})
        print(f"{f'{phase} ninja steps':24}{'/'.join(map(str, sp)):>12}{'/'.join(map(str, sh)):>12}")
    rp = sum(r["cmake_reruns"] for r in warm["patchkit"])
    rh = sum(r["cmake_reruns"] for r in warm["by_hand"])
    if warm["patchkit"]:
        print(f"{'warm CMake re-runs':24}{rp:>12}{rh:>12}   (of {a.warm_rounds} builds each)")
    order = ("source", "patch", "configure", "build")
    stage_keys = sorted(cold["patchkit"][0]["stages"], key=lambda k: (order.index(k) if k in order else 9, k))
    stages_p = {k: stage_median(cold["patchkit"], k) for k in stage_keys}
    # build-info is written before the output stage: the rest is that, Python's start and the lock
    stages_p["rest"] = statistics.median(
        float(r["wall_s"]) - sum(float(v) for v in r["stages"].values()) for r in cold["patchkit"]
    )
    stages_h = {k: stage_median(cold["by_hand"], k) for k in ("configure", "build")}
    print("cold stages, patchkit: " + ", ".join(f"{k} {v:.1f} s" for k, v in stages_p.items()))
    print("cold stages, by hand:  " + ", ".join(f"{k} {v:.1f} s" for k, v in stages_h.items()))
    configures = "/".join(str(n) for n in sorted({r["configures"] for r in cold["patchkit"]}))
    print(f"  (patchkit: a new worktree with the series applied, then {configures} CMake configure(s);")
    print("   by hand: 1 configure on that worktree)")
    for phase, runs in (("cold", cold), ("warm", warm)):
        for i, (pr, hr) in enumerate(zip(runs["patchkit"], runs["by_hand"])):
            print(f"  {phase} {i + 1}: patchkit {pr['wall_s']:.1f} s (CPU {pr['cpu_s']:.1f}), "
                  f"by hand {hr['wall_s']:.1f} s (CPU {hr['cpu_s']:.1f})")  # fmt: skip
    print(f"same compile commands on both sides ({same['commands']}, build dirs' paths and "
          f"-ffile-prefix-map set aside): {'yes' if same['identical'] else 'NO'}")  # fmt: skip
    for side in ("only_patchkit", "only_by_hand"):
        for ln in same[side]:
            print(f"  {side}: {ln[:300]}")
    # cold: the same steps; warm: by hand rebuilt something, and patchkit at least that
    steps_ok = {r["steps"] for r in cold["patchkit"]} == {r["steps"] for r in cold["by_hand"]}
    steps_ok &= all(r["steps"] > 0 for r in warm["by_hand"])
    steps_ok &= all(p["steps"] >= h["steps"] for p, h in zip(warm["patchkit"], warm["by_hand"]))
    if rp > rh:
        print(f"warm: patchkit's build ran CMake again {rp} time(s) (by hand {rh}): an input of the")
        print("  configure changed on its side only (its worktree check writes nothing, not even the")
        print(f"  git index llama.cpp's configure reads); each re-run is in {b.logs}/warm-*-patchkit.log")
    if touched is not None:
        print(f"warm: touched {touched.relative_to(Path(info['build_dir']).parent / 'src')}")
    print(f"cold wall ratio <= 1.03: {'yes' if ratios['cold_wall'] <= 1.03 else 'NO'}")

    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "recipe": a.recipe,
            "commit": info["upstream"]["commit"],
            "targets": Bench.targets(info),
            "jobs": a.jobs,
            "cpu": cpu,
            "cores": os.cpu_count(),
            "load": [load0, load1],
            "tools": b.tools,
            "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "by_hand": {"configure": configure, "build": build},
            "touched": str(touched) if touched else None,
            "cold": cold,
            "warm": warm,
            "ratios": ratios,
            "same_commands": same,
            "same_steps": steps_ok,
        }
        a.json.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    if not same["identical"] or not steps_ok:
        sys.exit("the two sides did not do the same compile work (see above)")


def platform_cpu() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return next(ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name"))
    except (OSError, StopIteration):
        import platform

        return platform.processor() or platform.machine()


if __name__ == "__main__":
    main()
