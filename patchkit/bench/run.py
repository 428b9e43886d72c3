"""`patchkit bench`: run llama-bench from a patchkit build for every point of a sweep.

Order of work: read the build, ask its llama-bench which options it has (--help),
refuse a sweep it cannot do, measure each named RPC host's round trip (rpcprobe),
list the devices (-rpc ... --list-devices), resolve every point's -dev, then run one
llama-bench per point. A point that fails (OOM, abort, timeout) is recorded with its
error and the sweep goes on. bench.json is rewritten after every point, so an
interrupted sweep keeps what it measured; bench.md and bench.png come at the end.

Only the RPC hosts the user named are contacted. ``run_demo`` starts its own two
ggml-rpc-servers on 127.0.0.1 (CPU devices) and always stops them.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from patchkit.bench.result import (
    PointResult,
    PointStatus,
    classify_failure,
    measurements,
    parse_bench_output,
)
from patchkit.bench.sweep import (
    BenchCaps,
    Device,
    Dimension,
    check_supported,
    expand_sweep,
    parse_caps,
    parse_devices,
    parse_sweep,
    point_args,
)
from patchkit.core.errors import ConfigError, FatalError, ToolMissing
from patchkit.core.fs import atomic_write_json
from patchkit.core.net import LOOPBACK, free_port
from patchkit.core.proc import Processes, run
from patchkit.model.buildinfo import BuildInfo, read_build_info

__all__ = [
    "BENCH_JSON",
    "DEMO_SWEEP",
    "BenchOptions",
    "BenchReport",
    "RpcLatency",
    "measure_latency",
    "run_bench",
    "run_demo",
]

BENCH_JSON = "bench.json"
DEMO_SWEEP = ("sm=layer,tensor", "dev=none,RPC0,RPC0/RPC1")
_OUR_FILES = {BENCH_JSON, "bench.md", "bench.png", "raw", "logs", "demo"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchOptions:
    out_dir: Path  # where bench.json/md/png go
    build_dir: Path  # a patchkit output dir with bin/llama-bench
    model: Path
    rpc: tuple[str, ...] = ()  # HOST:PORT, exactly as the user named them
    dims: tuple[Dimension, ...] = ()
    n_prompt: int = 512
    n_gen: int = 128
    reps: int = 5
    timeout: float = 900.0  # per point
    latency_count: int = 20
    tool_timeout: float = 60.0  # --help, --list-devices


@dataclasses.dataclass(frozen=True, kw_only=True)
class RpcLatency:
    endpoint: str
    ok: bool
    error: str = ""
    version: str = ""
    devices: int = 0
    count: int = 0
    median_ms: float = 0.0
    min_ms: float = 0.0
    max_ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchReport:
    build: dict[str, Any]
    model: str
    settings: dict[str, Any]
    latency: tuple[RpcLatency, ...]
    devices: tuple[Device, ...]
    points: tuple[PointResult, ...]
    complete: bool = True
    demo: bool = False

    def best(self, kind: str = "decode") -> PointResult | None:
        ok = [p for p in self.points if p.status == "ok" and p.kind(kind) is not None]
        return max(ok, key=lambda p: p.kind(kind).median, default=None)  # type: ignore[union-attr]

    def to_json(self) -> dict[str, Any]:
        best = {kind: (b.label if (b := self.best(kind)) else None) for kind in ("decode", "prompt")}
        return {"schema": 1, "build": self.build, "model": self.model, "settings": self.settings,
                "demo": self.demo, "complete": self.complete,
                "rpc_latency": [x.to_json() for x in self.latency],
                "devices": [dataclasses.asdict(d) for d in self.devices],
                "best": best, "points": [p.to_json() for p in self.points]}


def _split_endpoint(ep: str) -> tuple[str, int]:
    from patchkit.rpc.probe import parse_endpoint

    return parse_endpoint(ep)


def measure_latency(endpoints: Sequence[str], *, count: int = 20,
                    timeout: float = 5.0) -> tuple[RpcLatency, ...]:
    """Round-trip time of each RPC host (rpcprobe.server_info); unreachable -> error."""
    from patchkit.rpc.client import RpcError, RpcUnreachable
    from patchkit.rpc.probe import server_info

    out = []
    for ep in endpoints:
        host, port = _split_endpoint(ep)
        try:
            info = server_info(host, port, timeout=timeout, count=count)
        except RpcUnreachable:
            raise
        except RpcError as e:  # reachable but odd (e.g. a newer protocol): bench anyway
            out.append(RpcLatency(endpoint=ep, ok=False, error=e.message))
            continue
        r = info.rtt
        out.append(RpcLatency(endpoint=ep, ok=True, version=str(info.version),
                              devices=len(info.devices), count=r.count,
                              median_ms=round(r.median_s * 1e3, 3),
                              min_ms=round(r.min_s * 1e3, 3), max_ms=round(r.max_s * 1e3, 3)))
    return tuple(out)


def _build_summary(info: BuildInfo, build_dir: Path) -> dict[str, Any]:
    return {"dir": str(build_dir), "recipe": info.recipe.name,
            "upstream_commit": info.upstream.commit,
            "patches": [p.name for p in info.patches], "os": info.platform.os}


def _bench_exe(build_dir: Path, info: BuildInfo) -> Path:
    windows = info.windows
    if windows and sys.platform != "win32":
        raise ConfigError(f"{build_dir} is a Windows build: run patchkit bench on Windows",
                          hint="or point --build at a build for this machine")
    exe = build_dir / "bin" / ("llama-bench.exe" if windows else "llama-bench")
    if not exe.is_file():
        raise ToolMissing(f"{build_dir} has no bin/{exe.name}",
                          hint="add llama-bench to the recipe's [build] targets and rebuild")
    return exe


def _check_out_dir(out_dir: Path) -> None:
    if out_dir.is_file():
        raise ConfigError(f"{out_dir} is a file, not a folder for the results")
    if out_dir.exists():
        foreign = [p.name for p in out_dir.iterdir() if p.name not in _OUR_FILES]
        if foreign:
            raise ConfigError(f"{out_dir} already holds other files ({foreign[0]}, ...)",
                              hint="give an empty or new folder, or one a previous bench wrote")


def _tool(exe: Path, *args: str, timeout: float) -> str:
    r = run([str(exe), *args], timeout=timeout, start_error="result")
    text = r.stdout + r.stderr
    if not r.ok:
        raise ConfigError(f"{exe.name} {' '.join(args)}: {r.brief()}: {r.last_line()}",
                          detail="\n".join(text.splitlines()[-8:]))
    return text


def _base_args(opts: BenchOptions, caps: BenchCaps, keys: set[str]) -> list[str]:
    args = ["-m", str(opts.model)]
    if opts.rpc:
        args += ["-rpc", ",".join(opts.rpc)]
    if "p" not in keys:
        args += ["-p", str(opts.n_prompt)]
    if "n" not in keys:
        args += ["-n", str(opts.n_gen)]
    args += ["-r", str(opts.reps), "-o", caps.output_format]
    return args


def _run_point(exe: Path, index: int, label: str, settings: tuple[tuple[str, str], ...],
               base: list[str], args: tuple[str, ...], opts: BenchOptions,
               raw_dir: Path) -> PointResult:
    r = run([str(exe), *base, *args], timeout=opts.timeout, start_error="result")
    raw_dir.mkdir(parents=True, exist_ok=True)
    (raw_dir / f"{index:02d}.out").write_text(r.stdout, encoding="utf-8")
    (raw_dir / f"{index:02d}.err").write_text(r.stderr, encoding="utf-8")
    found = tuple(measurements(parse_bench_output(r.stdout)))
    res = PointResult(index=index, label=label, settings=settings, args=args, status=PointStatus.OK,
                      measurements=found, seconds=r.seconds)
    if r.ok and found:
        return res
    if r.ok:
        kind, msg = "error", "llama-bench exited 0 but printed no results"
    else:
        kind, msg = classify_failure(r)
    return dataclasses.replace(res, status=PointStatus.FAILED, error=msg, error_kind=kind)


def run_bench(opts: BenchOptions, *, on_point: Callable[[PointResult], None] | None = None,
              on_latency: Callable[[tuple[RpcLatency, ...]], None] | None = None,
              servers_alive: Callable[[], str] | None = None, demo: bool = False) -> BenchReport:
    """Run the sweep; bench.json is written after every point, the report returned at the end."""
    info = read_build_info(opts.build_dir)
    exe = _bench_exe(opts.build_dir, info)
    if not opts.model.is_file():
        raise ConfigError(f"model {opts.model} does not exist", hint="give -m PATH.gguf")
    _check_out_dir(opts.out_dir)
    for ep in opts.rpc:
        _split_endpoint(ep)  # HOST:PORT or a one-line error, before anything runs
    if opts.rpc:  # version skew: a server this build's clients refuse stops it here
        from patchkit.rpc.skew import check_hosts

        check_hosts(info, opts.build_dir, opts.rpc)

    caps = parse_caps(_tool(exe, "--help", timeout=opts.tool_timeout))
    if opts.rpc and not caps.has("-rpc"):
        raise ConfigError("this llama-bench was built without RPC (no -rpc option)",
                          hint="use a recipe with GGML_RPC=ON, e.g. cpu-rpc")
    dims = opts.dims
    check_supported(dims, caps)
    for key, flag in (("p", "-p"), ("n", "-n"), ("r", "-r"), ("o", "-o")):
        if not caps.has(flag):
            raise ConfigError(f"this llama-bench has no {flag} option ({key})")

    latency = measure_latency(opts.rpc, count=opts.latency_count) if opts.rpc else ()
    if on_latency is not None:
        on_latency(latency)
    devices: list[Device] = []
    if caps.has("--list-devices"):
        rpc = ["-rpc", ",".join(opts.rpc)] if opts.rpc else []
        devices = parse_devices(_tool(exe, *rpc, "--list-devices", timeout=opts.tool_timeout))

    points = expand_sweep(dims)
    resolved = [(p, point_args(p, caps, devices)) for p in points]  # ConfigError before any run
    base = _base_args(opts, caps, {d.key for d in dims})
    settings = {"n_prompt": opts.n_prompt, "n_gen": opts.n_gen, "reps": opts.reps,
                "sweep": {d.key: list(d.values) for d in dims}, "base_args": base[2:],
                "output_format": caps.output_format}
    report = BenchReport(build=_build_summary(info, opts.build_dir), model=str(opts.model),
                         settings=settings, latency=latency, devices=tuple(devices), points=(),
                         complete=False, demo=demo)
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(opts.out_dir / "raw", ignore_errors=True)  # a previous bench's, in our folder
    done: list[PointResult] = []
    seen: dict[tuple[str, ...], str] = {}
    for i, (point, args) in enumerate(resolved, start=1):
        if args in seen:
            res = PointResult(index=i, label=point.label, settings=point.settings, args=args,
                              status=PointStatus.DUPLICATE,
                              error=f"same llama-bench arguments as {seen[args]}")
        else:
            seen[args] = point.label
            res = _run_point(exe, i, point.label, point.settings, base, args, opts,
                             opts.out_dir / "raw")
            if res.status == "failed" and servers_alive is not None:
                dead = servers_alive()
                if dead:
                    res = dataclasses.replace(res, error=f"{res.error}; {dead}")
        done.append(res)
        report = dataclasses.replace(report, points=tuple(done))
        atomic_write_json(opts.out_dir / BENCH_JSON, report.to_json())
        if on_point is not None:
            on_point(res)
    report = dataclasses.replace(report, complete=True)
    atomic_write_json(opts.out_dir / BENCH_JSON, report.to_json())
    return report


def run_demo(out_dir: Path, build_dir: Path, *, sweep: Sequence[str] = DEMO_SWEEP,
             n_prompt: int = 64, n_gen: int = 16, reps: int = 3, timeout: float = 300.0,
             on_point: Callable[[PointResult], None] | None = None,
             on_latency: Callable[[tuple[RpcLatency, ...]], None] | None = None) -> BenchReport:
    """The whole bench on this machine: a tiny model, two loopback CPU RPC servers."""
    from patchkit.smoke.tinymodel import write_tiny_llama

    info = read_build_info(build_dir)
    bench = _bench_exe(build_dir, info)
    server = build_dir / "bin" / f"ggml-rpc-server{bench.suffix}"
    if not server.is_file():
        raise ToolMissing(f"{build_dir} has no bin/{server.name} (the demo's RPC servers)",
                          hint="build a recipe with GGML_RPC=ON and the ggml-rpc-server target")
    _check_out_dir(out_dir)
    dims = parse_sweep(sweep)
    model = write_tiny_llama(out_dir / "demo" / "tiny-llama.gguf")
    with Processes(out_dir / "logs") as procs:
        endpoints = []
        for name in ("rpc-a", "rpc-b"):
            port = free_port()
            try:
                procs.start_server([str(server), "-d", "CPU", "-H", LOOPBACK, "-p", str(port)],
                                   port, name=name, timeout=30, env=dict(os.environ))
            except RuntimeError as e:
                raise FatalError(f"demo: {e}") from None
            endpoints.append(f"{LOOPBACK}:{port}")

        def alive() -> str:
            dead = [procs.log_tail(p, 1) or f"pid {p.pid}" for p in procs.procs
                    if p.poll() is not None]
            return f"{len(dead)} demo RPC server(s) died: {' | '.join(dead)}" if dead else ""

        opts = BenchOptions(out_dir=out_dir, build_dir=build_dir, model=model,
                            rpc=tuple(endpoints), dims=dims, n_prompt=n_prompt, n_gen=n_gen,
                            reps=reps, timeout=timeout)
        start = time.monotonic()
        report = run_bench(opts, on_point=on_point, on_latency=on_latency,
                           servers_alive=alive, demo=True)
        report = dataclasses.replace(report, settings={**report.settings,
                                                       "demo_seconds": round(time.monotonic() - start, 1)})
    return report
