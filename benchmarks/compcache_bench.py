"""Benchmark the shared compile cache: a cold build against a "second machine", in one run.

    python3 benchmarks/compcache_bench.py --upstream /path/to/llama.cpp \\
        [--recipe cpu-rpc] [--launcher ccache|sccache] [--work DIR] [-j 2]

Starts a real Redis (redis-server) on 127.0.0.1 and a free port (with a password), then
runs `patchkit build RECIPE --no-smoke` twice, each a fresh Python process as a user runs it:

1. cold: an empty patchkit cache, an empty local compile cache (a private CCACHE_DIR /
   SCCACHE_DIR), an empty Redis;
2. second machine: another patchkit cache at another absolute path (deeper), another empty
   local compile cache, the Redis that build 1 filled.

Prints both wall times, their `build` step times (ninja only) and the ratio, and each
build's compile-cache record from build-info.json. Everything goes under --work (default:
a temp dir), removed at the end unless --keep; the upstream is only read (cloned locally).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from patchkit.core.net import LOOPBACK, free_port  # noqa: E402
from patchkit.core.proc import Processes  # noqa: E402

PASSWORD = "bench-s3cret"


def build(
    recipe: str,
    upstream: str,
    home: Path,
    remote: str,
    launcher: str,
    jobs: int,
) -> tuple[float, dict]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "PATCHKIT_CACHE": str(home / "patchkit-cache"),
        "CCACHE_DIR": str(home / "ccache"),
        "SCCACHE_DIR": str(home / "sccache"),
        "PATCHKIT_CACHE_REMOTE": remote,
    }  # not argv: other users can read a command line
    for k in ("CCACHE_BASEDIR", "CCACHE_REMOTE_STORAGE"):
        env.pop(k, None)
    out = home / "out"
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "patchkit",
            "--project",
            str(ROOT),
            "build",
            recipe,
            "--upstream",
            upstream,
            "--out",
            str(out),
            "--no-smoke",
            "-j",
            str(jobs),
            "--launcher",
            launcher,
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    took = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"patchkit build failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    if PASSWORD in proc.stdout + proc.stderr:
        sys.exit("the Redis password is in patchkit's output")
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith(("compile cache", "warning"))]
    for ln in lines:
        print(f"    {ln}")
    return took, json.loads((out / "build-info.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True, help="llama.cpp clone or mirror (only read)")
    ap.add_argument("--recipe", default="cpu-rpc")
    ap.add_argument("--launcher", choices=("ccache", "sccache"), default="ccache")
    ap.add_argument("--work", type=Path, help="where the caches go (default: a temp dir)")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep --work afterwards")
    args = ap.parse_args()
    redis = shutil.which("redis-server")
    if redis is None:
        sys.exit("redis-server is not installed (apt install redis-server)")
    work = args.work or Path(tempfile.mkdtemp(prefix="compcache-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    if any(work.iterdir()):
        sys.exit(f"--work {work} is not empty")
    port = free_port()
    try:
        with Processes(work / "redis") as procs:
            procs.start_server(
                [
                    redis,
                    "--port",
                    str(port),
                    "--bind",
                    LOOPBACK,
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(work),
                    "--requirepass",
                    PASSWORD,
                ],
                port,
                name="redis",
                timeout=20,
            )
            remote = f"redis://:{PASSWORD}@{LOOPBACK}:{port}"
            print(
                f"{args.recipe}, launcher {args.launcher}, -j{args.jobs}, "
                f"{os.cpu_count()} CPUs (load {os.getloadavg()[0]:.1f} at start)"
            )
            print("1. cold: empty local cache, empty Redis")
            cold, info_a = build(args.recipe, args.upstream, work / "a", remote, args.launcher, args.jobs)
            print("2. second machine: fresh local cache at another path, warm Redis")
            warm, info_b = build(
                args.recipe, args.upstream, work / "x" / "y" / "b", remote, args.launcher, args.jobs
            )
            print(f"   (load {os.getloadavg()[0]:.1f} at the end)")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    ba, bb = info_a["timings"]["build"], info_b["timings"]["build"]
    print()
    print("| run | wall s | build step s | compiles | local hits | remote hits | misses |")
    print("|---|---|---|---|---|---|---|")
    for name, wall, info in (("cold", cold, info_a), ("second machine", warm, info_b)):
        cc = info["compile_cache"] or {}
        print(
            f"| {name} | {wall:.1f} | {info['timings']['build']:.1f} | {cc.get('compiles')} | "
            f"{cc.get('local_hits')} | {cc.get('remote_hits')} | {cc.get('misses')} |"
        )
    print()
    print(f"second machine / cold: wall {warm / cold:.1%}, build step {bb / ba:.1%} (goal: <= 5%)")
    same = {a["path"]: a["sha256"] for a in info_a["artifacts"]} == {
        a["path"]: a["sha256"] for a in info_b["artifacts"]
    }
    print(f"artifacts identical (sha256): {same}")


if __name__ == "__main__":
    main()
