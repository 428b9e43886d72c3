"""Benchmark patchkit's relay: llama-bench tok/s through an unshaped relay vs direct, on
loopback, side by side in one run (goal: at most 5 % lower in layer split).

    python3 benchmarks/relay_bench.py --build out/cpu-rpc --model M.gguf \\
        [--sm layer] [--rounds 3] [-p 64] [-n 32] [-r 3] [-t 1]

Two ``ggml-rpc-server -d CPU`` on 127.0.0.1 (stopped at the end). Each round runs
llama-bench once direct (``-rpc A,B``) and once through one relay per server (the same
relays ``patchkit bench`` uses), alternating which goes first, so drift on a busy machine
hits both. Prints each run's decode and prompt tok/s, the medians and relayed/direct.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from patchkit.bench.relay import Relay  # noqa: E402
from patchkit.bench.result import measurements, parse_bench_output  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"rpc server on {port} did not start")


def bench(exe: Path, model: Path, rpc: str, args: argparse.Namespace) -> dict[str, float]:
    argv = [
        str(exe),
        "-m",
        str(model),
        "-rpc",
        rpc,
        "-sm",
        args.sm,
        "-dev",
        "RPC0/RPC1",
        "-p",
        str(args.p),
        "-n",
        str(args.n),
        "-r",
        str(args.r),
        "-t",
        str(args.t),
        "-o",
        "jsonl",
    ]
    if args.sm == "tensor":
        argv += ["-fit", "off"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        sys.exit(f"llama-bench failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return {m.kind: m.median for m in measurements(parse_bench_output(proc.stdout))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, required=True, help="patchkit output dir (bin/)")
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--sm", default="layer", choices=["layer", "tensor"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-p", type=int, default=64)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument(
        "-t",
        type=int,
        default=1,
        help="threads for llama-bench and each server (default 1: with a thread per "
        "core, three processes on a small machine spin against each other)",
    )
    args = ap.parse_args()
    exe, server = args.build / "bin" / "llama-bench", args.build / "bin" / "ggml-rpc-server"
    ports = [free_port(), free_port()]
    servers = [
        subprocess.Popen(
            [str(server), "-d", "CPU", "-H", "127.0.0.1", "-p", str(p), "-t", str(args.t)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=dict(os.environ),
        )
        for p in ports
    ]
    results: dict[str, list[dict[str, float]]] = {"direct": [], "relay": []}
    try:
        for p in ports:
            wait_port(p)
        direct = ",".join(f"127.0.0.1:{p}" for p in ports)
        relays = [Relay(("127.0.0.1", p)).__enter__() for p in ports]
        relayed = ",".join(r.endpoint for r in relays)
        try:
            for i in range(args.rounds):
                order = [("direct", direct), ("relay", relayed)]
                for name, rpc in order if i % 2 == 0 else order[::-1]:
                    got = bench(exe, args.model, rpc, args)
                    results[name].append(got)
                    print(
                        f"round {i + 1} {name:6s}: decode {got.get('decode', 0):7.2f} tok/s, "
                        f"prompt {got.get('prompt', 0):7.2f} tok/s",
                        flush=True,
                    )
            traffic = [r.traffic() for r in relays]
        finally:
            for r in relays:
                r.close()
    finally:
        for s in servers:
            s.terminate()
        for s in servers:
            s.wait(timeout=10)
    summary: dict[str, object] = {"sm": args.sm, "model": args.model.name, "rounds": args.rounds}
    for kind in ("decode", "prompt"):
        d = statistics.median(x[kind] for x in results["direct"])
        r = statistics.median(x[kind] for x in results["relay"])
        summary[kind] = {"direct": round(d, 2), "relay": round(r, 2), "relay/direct": round(r / d, 3)}
        print(f"{kind}: direct {d:.2f} tok/s, through the relay {r:.2f} tok/s: {(r / d - 1) * 100:+.1f} %")
    summary["relayed_mb"] = round(sum(t.bytes for t in traffic) / 1e6, 1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
