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

import contextlib
import dataclasses
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from patchkit.bench.link import Calibrated, calibrate, measure_path, parse_link
from patchkit.bench.outdir import BENCH_JSON, check_out_dir, claim_out_dir, clear_raw
from patchkit.bench.point import PointRun, run_point, run_relayed, skip_reason, tool_output
from patchkit.bench.problems import BuildForAnotherOs, LinkWithoutRpc, ModelMissing
from patchkit.bench.relay import Relay, Shaping, SharedLink
from patchkit.bench.result import PointResult, PointStatus
from patchkit.bench.sweep import (
    BenchCaps,
    Device,
    Dimension,
    Point,
    check_supported,
    expand_sweep,
    parse_caps,
    parse_devices,
    parse_sweep,
    point_args,
)
from patchkit.core.errors import ConfigError, ServerStartError, ToolMissing
from patchkit.core.fs import atomic_write_json
from patchkit.core.net import LOOPBACK, free_port
from patchkit.core.record import Record, encode, meta
from patchkit.smoke import llama_output
from patchkit.spec.buildinfo import BuildInfo, read_build_info

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

DEMO_SWEEP = ("sm=layer,tensor", "dev=none,RPC0,RPC0/RPC1")


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
    relay: bool = True  # count each RPC host's traffic through a loopback relay


@dataclasses.dataclass(frozen=True, kw_only=True)
class RpcLatency(Record):
    endpoint: str  # HOST:PORT, as given to --rpc
    ok: bool  # the host answered as a ggml RPC server
    error: str = ""  # what was odd about its answer
    version: str = ""  # its RPC protocol version
    devices: int = 0  # how many devices it has
    count: int = 0  # round trips timed
    median_ms: float = 0.0  # round trip, ms
    min_ms: float = 0.0  # round trip, ms
    max_ms: float = 0.0  # round trip, ms


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchReport(Record):
    """bench.json (and ``bench --json``): what the sweep measured."""

    json_derived: ClassVar[tuple[str | tuple[str, str], ...]] = (("best", "best_labels"),)

    schema: int = 1  # the format's version: 1
    build: dict[str, Any]  # the build benched: dir, recipe, upstream_commit, patches, os
    model: str  # the GGUF file
    settings: dict[str, Any]  # n_prompt, n_gen, reps, sweep, base_args, output_format, relay, model_note
    latency: tuple[RpcLatency, ...] = dataclasses.field(metadata=meta(key="rpc_latency"))  # per --rpc host
    devices: tuple[Device, ...]  # what llama-bench --list-devices listed
    points: tuple[PointResult, ...]  # one per setup, in sweep order
    complete: bool = True  # False while the sweep runs (or when it was interrupted)
    demo: bool = False  # a --demo run (loopback RPC servers)
    links: tuple[Calibrated, ...] = ()  # the relay path(s) measured before the sweep

    def best(self, kind: str = "decode") -> PointResult | None:
        ok = [p for p in self.points if p.status == "ok" and p.kind(kind) is not None]
        return max(ok, key=lambda p: p.kind(kind).median, default=None)  # type: ignore[union-attr]

    @property
    def best_labels(self) -> dict[str, str | None]:
        """the fastest setup's label by ``decode`` and by ``prompt`` (null: none ran)"""
        return {kind: (b.label if (b := self.best(kind)) else None) for kind in ("decode", "prompt")}


def _split_endpoint(ep: str) -> tuple[str, int]:
    from patchkit.rpc.probe import parse_endpoint

    return parse_endpoint(ep)


def measure_latency(
    endpoints: Sequence[str], *, count: int = 20, timeout: float = 5.0
) -> tuple[RpcLatency, ...]:
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
        out.append(
            RpcLatency(
                endpoint=ep,
                ok=True,
                version=str(info.version),
                devices=len(info.devices),
                count=r.count,
                median_ms=round(r.median_s * 1e3, 3),
                min_ms=round(r.min_s * 1e3, 3),
                max_ms=round(r.max_s * 1e3, 3),
            )
        )
    return tuple(out)


def _build_summary(info: BuildInfo, build_dir: Path) -> dict[str, Any]:
    return {
        "dir": str(build_dir),
        "recipe": info.recipe.name,
        "upstream_commit": info.upstream.commit,
        "patches": [p.name for p in info.patches],
        "os": info.platform.os,
    }


def _bench_exe(build_dir: Path, info: BuildInfo) -> Path:
    windows = info.windows
    if windows and sys.platform != "win32":
        raise ConfigError(problem=BuildForAnotherOs(build_dir=build_dir))
    exe = build_dir / "bin" / ("llama-bench.exe" if windows else "llama-bench")
    if not exe.is_file():
        raise ToolMissing(
            f"{build_dir} has no bin/{exe.name}",
            hint="add llama-bench to the recipe's [build] targets and rebuild",
        )
    return exe


def _links(dims: Sequence[Dimension]) -> list[str]:
    return next((list(d.values) for d in dims if d.key == "link"), [])


def calibrate_links(specs: Sequence[str]) -> dict[str, Calibrated]:
    """Each distinct --link measured on loopback (ConfigError for one the relay cannot hold);
    "none" is the bare relay (its own round trip and throughput)."""
    base = measure_path(Shaping())
    out = {"none": calibrate(parse_link("none"), base=base)}
    for spec in specs:
        link = parse_link(spec)
        if spec not in out:
            out[spec] = calibrate(link, base=base)
    return out


def run_bench(
    opts: BenchOptions,
    *,
    on_point: Callable[[PointResult], None] | None = None,
    on_latency: Callable[[tuple[RpcLatency, ...]], None] | None = None,
    on_links: Callable[[dict[str, Calibrated]], None] | None = None,
    servers_alive: Callable[[], str] | None = None,
    demo: bool = False,
    model_note: str = "",
) -> BenchReport:
    """Run the sweep; bench.json is written after every point, the report returned at the end."""
    info, exe, links = _refusals(opts)
    caps = _capabilities(exe, opts)
    # the RPC hosts, before the sweep: round trip per host
    latency = measure_latency(opts.rpc, count=opts.latency_count) if opts.rpc else ()
    if on_latency is not None:
        on_latency(latency)
    # the relay path and every --link, measured before use
    relayed = bool(opts.rpc) and opts.relay
    calibrated = calibrate_links(links) if relayed else {}
    if on_links is not None and calibrated:
        on_links(calibrated)
    devices: list[Device] = []
    if caps.has("--list-devices"):
        rpc = ["-rpc", ",".join(opts.rpc)] if opts.rpc else []
        devices = parse_devices(tool_output(exe, *rpc, "--list-devices", timeout=opts.tool_timeout))
    # every point's arguments resolved: a ConfigError before any run
    resolved = [(p, point_args(p, caps, devices)) for p in expand_sweep(opts.dims)]
    base = _base_args(opts, caps, {d.key for d in opts.dims})
    report = BenchReport(
        build=_build_summary(info, opts.build_dir),
        model=str(opts.model),
        settings=_settings(opts, caps, base, relayed, model_note),
        latency=latency,
        devices=tuple(devices),
        points=(),
        complete=False,
        demo=demo,
        links=tuple(calibrated.values()),
    )
    check_out_dir(opts.out_dir)  # again, right before the first write (the checks above took time)
    claim_out_dir(opts.out_dir)
    clear_raw(opts.out_dir / "raw")  # a previous bench's, in our folder
    pr = PointRun(
        exe=exe,
        raw_dir=opts.out_dir / "raw",
        timeout=opts.timeout,
        reps=opts.reps,
        n_prompt=opts.n_prompt,
        n_gen=opts.n_gen,
        rpc=opts.rpc,
        output_format=caps.output_format,
    )
    with contextlib.ExitStack() as stack:
        relays = [stack.enter_context(Relay(_split_endpoint(ep))) for ep in (opts.rpc if relayed else ())]
        sweep = _Sweep(
            run=pr,
            base=base,
            relays=relays,
            calibrated=calibrated,
            remote_rtt=max((x.median_ms / 1e3 for x in latency if x.ok), default=0.0),
            loopback=all(_split_endpoint(ep)[0] in (LOOPBACK, "localhost", "::1") for ep in opts.rpc),
            model=opts.model,
        )
        for i, (point, args) in enumerate(resolved, start=1):
            res = sweep.point(i, point, args)
            if res.status == "failed" and servers_alive is not None:
                dead = servers_alive()
                if dead:
                    res = dataclasses.replace(res, error=f"{res.error}; {dead}")
            report = dataclasses.replace(report, points=(*report.points, res))
            _write_report(opts.out_dir, report)
            if on_point is not None:
                on_point(res)
    report = dataclasses.replace(report, complete=True)
    _write_report(opts.out_dir, report)
    return report


def _write_report(out_dir: Path, report: BenchReport) -> None:
    atomic_write_json(out_dir / BENCH_JSON, encode(report))


def _refusals(opts: BenchOptions) -> tuple[BuildInfo, Path, list[str]]:
    """Everything refused before a process runs: (build-info, llama-bench, the --link values)."""
    info = read_build_info(opts.build_dir)
    exe = _bench_exe(opts.build_dir, info)
    if not opts.model.is_file():
        raise ConfigError(problem=ModelMissing(model=opts.model))
    check_out_dir(opts.out_dir)
    for ep in opts.rpc:
        _split_endpoint(ep)  # HOST:PORT or a one-line error, before anything runs
    links = _links(opts.dims)
    if links and not opts.rpc:
        raise ConfigError(problem=LinkWithoutRpc())
    if links and not opts.relay:
        raise ConfigError("--link needs the relay: drop --direct")
    if opts.rpc:  # version skew: a server this build's clients refuse stops it here
        from patchkit.rpc.skew import check_hosts

        check_hosts(info, opts.build_dir, opts.rpc)
    return info, exe, links


def _capabilities(exe: Path, opts: BenchOptions) -> BenchCaps:
    """What this llama-bench can do (its --help); ConfigError for a sweep it cannot run."""
    caps = parse_caps(tool_output(exe, "--help", timeout=opts.tool_timeout))
    if opts.rpc and not caps.has("-rpc"):
        raise ConfigError(
            "this llama-bench was built without RPC (no -rpc option)",
            hint="use a recipe with GGML_RPC=ON, e.g. cpu-rpc",
        )
    check_supported(opts.dims, caps)
    for key, flag in (("p", "-p"), ("n", "-n"), ("r", "-r"), ("o", "-o")):
        if not caps.has(flag):
            raise ConfigError(f"this llama-bench has no {flag} option ({key})")
    return caps


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


def _settings(
    opts: BenchOptions, caps: BenchCaps, base: list[str], relayed: bool, model_note: str
) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "n_prompt": opts.n_prompt,
        "n_gen": opts.n_gen,
        "reps": opts.reps,
        "sweep": {d.key: list(d.values) for d in opts.dims},
        "base_args": base[2:],
        "output_format": caps.output_format,
        "relay": relayed,
    }
    if model_note:
        settings["model_note"] = model_note
    return settings


@dataclasses.dataclass(kw_only=True)
class _Sweep:
    """The points of one sweep, run in turn: skipped, a duplicate of an earlier one, or run
    (through the relays when there are any, each point's link set on them first)."""

    run: PointRun
    base: list[str]
    relays: list[Relay]
    calibrated: dict[str, Calibrated]
    remote_rtt: float  # the slowest real host's round trip (s)
    loopback: bool  # every RPC host is this machine
    model: Path
    seen: dict[tuple[str, ...], str] = dataclasses.field(default_factory=dict)

    def point(self, i: int, point: Point, args: tuple[str, ...]) -> PointResult:
        link = dict(point.settings).get("link", "none")
        no_rpc = "-dev" in args and args[args.index("-dev") + 1] == "none"
        ident = args if no_rpc else (*args, f"link={link}")  # no RPC device: the link is moot
        skip = skip_reason(point, args)
        if skip:
            return PointResult(
                index=i,
                label=point.label,
                settings=point.settings,
                args=args,
                status=PointStatus.SKIPPED,
                error=skip,
            )
        if ident in self.seen:
            moot = (
                "; no RPC device, so the link does not matter"
                if no_rpc and "link" in dict(point.settings)
                else ""
            )
            return PointResult(
                index=i,
                label=point.label,
                settings=point.settings,
                args=args,
                status=PointStatus.DUPLICATE,
                error=f"same llama-bench arguments as {self.seen[ident]}{moot}",
            )
        self.seen[ident] = point.label
        if not self.relays:
            return run_point(self.run, i, point, self.base, args)
        return self._relayed(i, point, args, link)

    def _relayed(self, i: int, point: Point, args: tuple[str, ...], link: str) -> PointResult:
        cal = self.calibrated[link]
        shared = SharedLink(cal.shaping)  # one port on the client for all hosts
        for r in self.relays:
            r.set_shaping(cal.shaping, shared)
        errs = [len(r.errors) for r in self.relays]
        rbase = ["-m", str(self.model), "-rpc", ",".join(r.endpoint for r in self.relays)]
        res = run_relayed(self.run, i, point, args, rbase, self.relays)
        new = [e for r, n in zip(self.relays, errs, strict=True) for e in r.errors[n:]]
        if res.status == "failed" and new:
            res = dataclasses.replace(res, error=f"{res.error}; relay could not reach {new[0]}")
        # the wire time this point's tokens saw: the relay (as measured) plus, for real
        # hosts, their network (round trips only: its bandwidth is not known)
        rtt = cal.measured.rtt_s + (0.0 if self.loopback else self.remote_rtt)
        bw = (
            (cal.link.rate_bytes_s or min(cal.base.up_bytes_s, cal.base.down_bytes_s))
            if self.loopback or cal.link.rate_bit_s
            else 0.0
        )
        return dataclasses.replace(res, link=link, path_rtt_s=rtt, path_bytes_s=bw)


def demo_model(out_dir: Path) -> tuple[Path, str]:
    """The real model if `patchkit model get smollm2` cached it, else a tiny generated one."""
    from patchkit.smoke.tinymodel import write_tiny_llama
    from patchkit.weights.store import KNOWN, cached_model

    real = cached_model("smollm2")
    if real is not None:
        return real, f"real model: {KNOWN['smollm2'].description}"
    return (
        write_tiny_llama(out_dir / "demo" / "tiny-llama.gguf"),
        "a tiny generated llama model (2 layers; `patchkit model get smollm2` for a real one)",
    )


def run_demo(
    out_dir: Path,
    build_dir: Path,
    *,
    sweep: Sequence[str] = DEMO_SWEEP,
    n_prompt: int = 64,
    n_gen: int = 16,
    reps: int = 3,
    timeout: float = 300.0,
    on_point: Callable[[PointResult], None] | None = None,
    on_latency: Callable[[tuple[RpcLatency, ...]], None] | None = None,
    on_links: Callable[[dict[str, Calibrated]], None] | None = None,
    relay: bool = True,
    env: Mapping[str, str] | None = None,
) -> BenchReport:
    """The whole bench on this machine: the real model when cached (else a tiny one), two
    loopback CPU RPC servers, started with ``env`` (the CLI passes its environment: the
    engine never reads ``os.environ`` itself; None: they inherit this process's)."""
    info = read_build_info(build_dir)
    bench = _bench_exe(build_dir, info)
    server = build_dir / "bin" / f"ggml-rpc-server{bench.suffix}"
    if not server.is_file():
        raise ToolMissing(
            f"{build_dir} has no bin/{server.name} (the demo's RPC servers)",
            hint="build a recipe with GGML_RPC=ON and the ggml-rpc-server target",
        )
    check_out_dir(out_dir)
    dims = parse_sweep(sweep)
    claim_out_dir(out_dir)  # demo/ and logs/ go into it next
    model, note = demo_model(out_dir)
    with llama_output.servers(out_dir / "logs") as procs:
        endpoints = []
        for name in ("rpc-a", "rpc-b"):
            port = free_port()
            try:
                procs.start_server(
                    [str(server), "-d", "CPU", "-H", LOOPBACK, "-p", str(port)],
                    port,
                    name=name,
                    timeout=30,
                    env=dict(env) if env is not None else None,
                )
            except ServerStartError as e:
                raise ServerStartError(f"demo: {e.message}", detail=e.detail, hint=e.hint) from None
            endpoints.append(f"{LOOPBACK}:{port}")

        def alive() -> str:
            dead = [procs.log_tail(p, 1) or f"pid {p.pid}" for p in procs.procs if p.poll() is not None]
            return f"{len(dead)} demo RPC server(s) died: {' | '.join(dead)}" if dead else ""

        opts = BenchOptions(
            out_dir=out_dir,
            build_dir=build_dir,
            model=model,
            rpc=tuple(endpoints),
            dims=dims,
            n_prompt=n_prompt,
            n_gen=n_gen,
            reps=reps,
            timeout=timeout,
            relay=relay,
        )
        start = time.monotonic()
        report = run_bench(
            opts,
            on_point=on_point,
            on_latency=on_latency,
            on_links=on_links,
            servers_alive=alive,
            demo=True,
            model_note=note,
        )
        report = dataclasses.replace(
            report, settings={**report.settings, "demo_seconds": round(time.monotonic() - start, 1)}
        )
    return report
