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
import functools
import json
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from patchkit.bench.link import Calibrated, calibrate, measure_path, parse_link
from patchkit.bench.relay import Relay, Shaping, SharedLink, Traffic
from patchkit.bench.result import (
    PhaseTraffic,
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
    Point,
    check_supported,
    expand_sweep,
    parse_caps,
    parse_devices,
    parse_sweep,
    point_args,
)
from patchkit.core.errors import ConfigError, ServerStartError, ToolMissing
from patchkit.core.fs import atomic_write_json, first_foreign, folder_entries
from patchkit.core.net import LOOPBACK, free_port
from patchkit.core.proc import run
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

BENCH_JSON = "bench.json"
DEMO_SWEEP = ("sm=layer,tensor", "dev=none,RPC0,RPC0/RPC1")
_GRAPH_CMDS = ("GRAPH_COMPUTE", "GRAPH_RECOMPUTE")
BENCH_MARKER = ".patchkit-bench"  # written first into a results folder: bench owns it
_BENCH_FILES = frozenset({BENCH_JSON, "bench.md", "bench.png", BENCH_MARKER})  # all a results folder holds
_BENCH_DIRS: Mapping[str, None] = {"raw": None, "logs": None, "demo": None}
_MARKER_MAX = 64 << 10
_BENCH_JSON_MAX = 64 << 20
_RAW_NAME = re.compile(r"\d{2,}(?:-[a-z]+)?(?:-r1)?\.(?:out|err)")  # _llama_bench's names


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
    links: tuple[Calibrated, ...] = ()  # the relay path(s) measured before the sweep

    def best(self, kind: str = "decode") -> PointResult | None:
        ok = [p for p in self.points if p.status == "ok" and p.kind(kind) is not None]
        return max(ok, key=lambda p: p.kind(kind).median, default=None)  # type: ignore[union-attr]

    def to_json(self) -> dict[str, Any]:
        best = {kind: (b.label if (b := self.best(kind)) else None) for kind in ("decode", "prompt")}
        return {
            "schema": 1,
            "build": self.build,
            "model": self.model,
            "settings": self.settings,
            "demo": self.demo,
            "complete": self.complete,
            "rpc_latency": [x.to_json() for x in self.latency],
            "devices": [dataclasses.asdict(d) for d in self.devices],
            "links": [c.to_json() for c in self.links],
            "best": best,
            "points": [p.to_json() for p in self.points],
        }


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
        raise ConfigError(
            f"{build_dir} is a Windows build: run patchkit bench on Windows",
            hint="or point --build at a build for this machine",
        )
    exe = build_dir / "bin" / ("llama-bench.exe" if windows else "llama-bench")
    if not exe.is_file():
        raise ToolMissing(
            f"{build_dir} has no bin/{exe.name}",
            hint="add llama-bench to the recipe's [build] targets and rebuild",
        )
    return exe


def _check_out_dir(out_dir: Path) -> None:
    """ConfigError (exit 2) unless ``out_dir`` is absent, empty, or provably a results folder
    patchkit bench wrote: it holds bench's marker (or a bench.json a previous bench wrote,
    readable as one), and nothing but bench's own files and folders, none of them a link.
    A name alone proves nothing: a user's ``raw/`` of camera files is not bench's ``raw/``,
    so bench's names count only beside its marker."""
    try:
        entries = folder_entries(out_dir)
    except NotADirectoryError:
        raise ConfigError(f"{out_dir} is not a folder for the results", hint=_PICK_OUT) from None
    except OSError as e:
        raise ConfigError(f"cannot list {out_dir}: {e.strerror or e}", hint=_PICK_OUT) from None
    if not entries:
        return
    if not _owned(out_dir):
        raise ConfigError(
            f"{out_dir} holds {entries[0]}, and patchkit bench did not write that folder "
            f"(no {BENCH_MARKER}, no {BENCH_JSON} of a previous bench): not writing into it",
            hint=_PICK_OUT,
        )
    found = first_foreign(out_dir, entries, files=_BENCH_FILES.__contains__, dirs=_BENCH_DIRS)
    if found is not None:
        kind = " (a link)" if found.link else ""
        raise ConfigError(
            f"{out_dir} holds {found.name}{kind}, which patchkit bench did not write there", hint=_PICK_OUT
        )


_PICK_OUT = "give an empty or new folder, or one a previous bench wrote"


def _owned(out_dir: Path) -> bool:
    """Whether ``out_dir`` holds bench's marker, or a bench.json that reads as bench's own
    (a folder a bench wrote before the marker existed)."""
    marker = out_dir / BENCH_MARKER
    if not marker.is_symlink() and marker.is_file():
        data = _read_small(marker, _MARKER_MAX)
        return isinstance(data, dict) and data.get("written_by") == "patchkit bench"
    report = out_dir / BENCH_JSON
    if not report.is_symlink() and report.is_file():
        data = _read_small(report, _BENCH_JSON_MAX)
        return (
            isinstance(data, dict)
            and data.get("schema") == 1
            and isinstance(data.get("points"), list)
            and isinstance(data.get("settings"), dict)
        )
    return False


def _read_small(path: Path, limit: int) -> object:
    try:
        with path.open("rb") as f:
            raw = f.read(limit + 1)
        if len(raw) > limit:
            return None
        return json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None


def _claim_out_dir(out_dir: Path) -> None:
    """Create ``out_dir`` (checked by :func:`_check_out_dir`) and mark it bench's, before
    anything else is written into it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if not (out_dir / BENCH_MARKER).is_file():
        atomic_write_json(
            out_dir / BENCH_MARKER,
            {"written_by": "patchkit bench", "note": "this folder holds patchkit bench's results"},
        )


def _clear_raw(raw: Path) -> None:
    """A previous bench's raw llama-bench outputs, by their names (anything else stays)."""
    if raw.is_symlink() or not raw.is_dir():
        return
    for p in raw.iterdir():
        if _RAW_NAME.fullmatch(p.name) and not p.is_symlink() and p.is_file():
            p.unlink(missing_ok=True)


def _tool(exe: Path, *args: str, timeout: float) -> str:
    r = run([str(exe), *args], timeout=timeout, start_error="result")
    text = r.stdout + r.stderr
    if not r.ok:
        raise ConfigError(
            f"{exe.name} {' '.join(args)}: {r.brief()}: {llama_output.telling_line(r)}",
            detail="\n".join(text.splitlines()[-8:]),
        )
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


def _run_point(
    exe: Path,
    index: int,
    label: str,
    settings: tuple[tuple[str, str], ...],
    base: list[str],
    args: tuple[str, ...],
    opts: BenchOptions,
    raw_dir: Path,
) -> PointResult:
    r, found = _llama_bench(exe, [*base, *args], opts, raw_dir, f"{index:02d}")
    res = PointResult(
        index=index,
        label=label,
        settings=settings,
        args=args,
        status=PointStatus.OK,
        measurements=found,
        seconds=r.seconds,
    )
    return _judge(res, r, found)


def _llama_bench(
    exe: Path, argv: list[str], opts: BenchOptions, raw_dir: Path, name: str
) -> tuple[Any, tuple[Any, ...]]:
    r = run([str(exe), *argv], timeout=opts.timeout, start_error="result")
    raw_dir.mkdir(parents=True, exist_ok=True)
    (raw_dir / f"{name}.out").write_text(r.stdout, encoding="utf-8")
    (raw_dir / f"{name}.err").write_text(r.stderr, encoding="utf-8")
    return r, tuple(measurements(parse_bench_output(r.stdout)))


def _judge(res: PointResult, r: Any, found: tuple[Any, ...]) -> PointResult:
    if r.ok and found:
        return res
    if r.ok:
        kind, msg = "error", "llama-bench exited 0 but printed no results"
    else:
        kind, msg = classify_failure(r)
    return dataclasses.replace(res, status=PointStatus.FAILED, error=msg, error_kind=kind)


# ---- relayed points: one llama-bench per phase, counted -----------------------------------


def _strip_flags(args: Sequence[str], flags: set[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a in flags:
            skip = True
        else:
            out.append(a)
    return out


def _counted(relays: Sequence[Relay], go: Callable[[], Any]) -> tuple[Any, list[Traffic]]:
    """Run ``go()``; the traffic each relay carried meanwhile (once its clients closed)."""
    before = [r.traffic() for r in relays]
    out = go()
    for r in relays:
        r.quiesce(timeout=10)
    return out, [r.traffic() - b for r, b in zip(relays, before, strict=True)]


def _phase_traffic(
    main: list[Traffic], base: list[Traffic] | None, endpoints: Sequence[str], tokens: int, note: str = ""
) -> PhaseTraffic:
    run_bytes = sum(t.bytes for t in main)
    if base is None:
        return PhaseTraffic(
            tokens=tokens,
            run_bytes=run_bytes,
            note=note,
            hosts=tuple((ep, Traffic()) for ep in endpoints) if tokens else (),
        )
    diff = [m - b for m, b in zip(main, base, strict=True)]
    if any(d.bytes_up < 0 or d.bytes_down < 0 or d.round_trips < 0 for d in diff):
        return PhaseTraffic(
            run_bytes=run_bytes, note="the -r 1 run moved more than the full run: counts not repeatable"
        )
    return PhaseTraffic(
        tokens=tokens, run_bytes=run_bytes, note=note, hosts=tuple(zip(endpoints, diff, strict=True))
    )


def _run_relayed(
    exe: Path,
    index: int,
    point: Point,
    args: tuple[str, ...],
    base: list[str],
    opts: BenchOptions,
    relays: Sequence[Relay],
    raw_dir: Path,
    output_format: str,
) -> PointResult:
    """The point's prompt and decode phases as separate llama-bench runs through the relays,
    each with -r R and again with -r 1: the difference is R - 1 repetitions' traffic."""
    settings = dict(point.settings)
    n_prompt = int(settings.get("p", opts.n_prompt))
    n_gen = int(settings.get("n", opts.n_gen))
    rest = _strip_flags(args, {"-p", "-n"})
    endpoints = list(opts.rpc)
    res = PointResult(
        index=index, label=point.label, settings=point.settings, args=args, status=PointStatus.OK
    )
    found_all: list[Any] = []
    traffic: list[tuple[str, PhaseTraffic]] = []
    seconds = 0.0
    for phase, p, n, per_rep in (("prompt", n_prompt, 0, n_prompt), ("decode", 0, n_gen, n_gen)):
        if per_rep <= 0:
            continue
        head = [*base, "-p", str(p), "-n", str(n)]
        name = f"{index:02d}-{phase}"
        (r, found), main = _counted(
            relays,
            functools.partial(
                _llama_bench,
                exe,
                [*head, "-r", str(opts.reps), "-o", output_format, *rest],
                opts,
                raw_dir,
                name,
            ),
        )
        seconds += r.seconds
        found_all += [m for m in found if m.kind == phase]
        res = dataclasses.replace(res, measurements=tuple(found_all), seconds=seconds, traffic=tuple(traffic))
        if not (r.ok and found):
            return _judge(res, r, found)
        tokens = (opts.reps - 1) * per_rep
        if opts.reps < 2:
            pt = _phase_traffic(
                main, None, endpoints, 0, "-r 1: per-token traffic needs 2 or more repetitions"
            )
        elif not any(t.count(c) for t in main for c in _GRAPH_CMDS):
            pt = _phase_traffic(main, None, endpoints, tokens, "no graph ran on an RPC host")
        else:
            (rb, _), base_t = _counted(
                relays,
                functools.partial(
                    _llama_bench,
                    exe,
                    [*head, "-r", "1", "-o", output_format, *rest],
                    opts,
                    raw_dir,
                    f"{name}-r1",
                ),
            )
            seconds += rb.seconds
            if rb.ok:
                note = "-d: each repetition also restores the context" if "depth" in settings else ""
                pt = _phase_traffic(main, base_t, endpoints, tokens, note)
            else:
                pt = _phase_traffic(
                    main, None, endpoints, 0, f"the -r 1 run failed: {classify_failure(rb)[1]}"
                )
        traffic.append((phase, pt))
    return dataclasses.replace(res, measurements=tuple(found_all), seconds=seconds, traffic=tuple(traffic))


def _skip_reason(point: Point, args: tuple[str, ...]) -> str:
    """Points that cannot run, said instead of run."""
    sm = dict(point.settings).get("sm", "")
    dev = args[args.index("-dev") + 1] if "-dev" in args else "auto"
    if sm == "tensor" and dev == "none":
        return "not run: tensor split needs at least one device besides the CPU (-dev none)"
    return ""


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
    info = read_build_info(opts.build_dir)
    exe = _bench_exe(opts.build_dir, info)
    if not opts.model.is_file():
        raise ConfigError(f"model {opts.model} does not exist", hint="give -m PATH.gguf")
    _check_out_dir(opts.out_dir)
    for ep in opts.rpc:
        _split_endpoint(ep)  # HOST:PORT or a one-line error, before anything runs
    dims = opts.dims
    links = _links(dims)
    if links and not opts.rpc:
        raise ConfigError(
            "--link shapes the connections to the RPC hosts: give --rpc HOST:PORT",
            hint="or try it with --demo",
        )
    if links and not opts.relay:
        raise ConfigError("--link needs the relay: drop --direct")
    if opts.rpc:  # version skew: a server this build's clients refuse stops it here
        from patchkit.rpc.skew import check_hosts

        check_hosts(info, opts.build_dir, opts.rpc)

    caps = parse_caps(_tool(exe, "--help", timeout=opts.tool_timeout))
    if opts.rpc and not caps.has("-rpc"):
        raise ConfigError(
            "this llama-bench was built without RPC (no -rpc option)",
            hint="use a recipe with GGML_RPC=ON, e.g. cpu-rpc",
        )
    check_supported(dims, caps)
    for key, flag in (("p", "-p"), ("n", "-n"), ("r", "-r"), ("o", "-o")):
        if not caps.has(flag):
            raise ConfigError(f"this llama-bench has no {flag} option ({key})")

    # ---- the RPC hosts, before the sweep: round trip per host -----------------------------
    latency = measure_latency(opts.rpc, count=opts.latency_count) if opts.rpc else ()
    if on_latency is not None:
        on_latency(latency)
    # ---- the relay path and every --link, measured before use ------------------------------
    relayed = bool(opts.rpc) and opts.relay
    calibrated = calibrate_links(links) if relayed else {}
    if on_links is not None and calibrated:
        on_links(calibrated)
    devices: list[Device] = []
    if caps.has("--list-devices"):
        rpc = ["-rpc", ",".join(opts.rpc)] if opts.rpc else []
        devices = parse_devices(_tool(exe, *rpc, "--list-devices", timeout=opts.tool_timeout))

    points = expand_sweep(dims)
    resolved = [(p, point_args(p, caps, devices)) for p in points]  # ConfigError before any run
    base = _base_args(opts, caps, {d.key for d in dims})
    settings = {
        "n_prompt": opts.n_prompt,
        "n_gen": opts.n_gen,
        "reps": opts.reps,
        "sweep": {d.key: list(d.values) for d in dims},
        "base_args": base[2:],
        "output_format": caps.output_format,
        "relay": relayed,
    }
    if model_note:
        settings["model_note"] = model_note
    report = BenchReport(
        build=_build_summary(info, opts.build_dir),
        model=str(opts.model),
        settings=settings,
        latency=latency,
        devices=tuple(devices),
        points=(),
        complete=False,
        demo=demo,
        links=tuple(calibrated.values()),
    )
    _check_out_dir(opts.out_dir)  # again, right before the first write (the checks above took time)
    _claim_out_dir(opts.out_dir)
    _clear_raw(opts.out_dir / "raw")  # a previous bench's, in our folder
    done: list[PointResult] = []
    seen: dict[tuple[str, ...], str] = {}
    remote_rtt = max((x.median_ms / 1e3 for x in latency if x.ok), default=0.0)
    loopback = all(_split_endpoint(ep)[0] in (LOOPBACK, "localhost", "::1") for ep in opts.rpc)
    with _relays(opts.rpc if relayed else ()) as relays:
        rbase = ["-m", str(opts.model)]
        if relays:
            rbase += ["-rpc", ",".join(r.endpoint for r in relays)]
        for i, (point, args) in enumerate(resolved, start=1):
            link = dict(point.settings).get("link", "none")
            no_rpc = "-dev" in args and args[args.index("-dev") + 1] == "none"
            ident = args if no_rpc else (*args, f"link={link}")  # no RPC device: the link is moot
            skip = _skip_reason(point, args)
            if skip:
                res = PointResult(
                    index=i,
                    label=point.label,
                    settings=point.settings,
                    args=args,
                    status=PointStatus.SKIPPED,
                    error=skip,
                )
            elif ident in seen:
                res = PointResult(
                    index=i,
                    label=point.label,
                    settings=point.settings,
                    args=args,
                    status=PointStatus.DUPLICATE,
                    error=f"same llama-bench arguments as {seen[ident]}"
                    + (
                        "; no RPC device, so the link does not matter"
                        if no_rpc and "link" in dict(point.settings)
                        else ""
                    ),
                )
            elif relays:
                seen[ident] = point.label
                cal = calibrated[link]
                shared = SharedLink(cal.shaping)  # one port on the client for all hosts
                for r in relays:
                    r.set_shaping(cal.shaping, shared)
                errs = [len(r.errors) for r in relays]
                res = _run_relayed(
                    exe, i, point, args, rbase, opts, relays, opts.out_dir / "raw", caps.output_format
                )
                new = [e for r, n in zip(relays, errs, strict=True) for e in r.errors[n:]]
                if res.status == "failed" and new:
                    res = dataclasses.replace(res, error=f"{res.error}; relay could not reach {new[0]}")
                # the wire time this point's tokens saw: the relay (as measured) plus, for
                # real hosts, their network (round trips only: its bandwidth is not known)
                rtt = cal.measured.rtt_s + (0.0 if loopback else remote_rtt)
                bw = (
                    (cal.link.rate_bytes_s or min(cal.base.up_bytes_s, cal.base.down_bytes_s))
                    if loopback or cal.link.rate_bit_s
                    else 0.0
                )
                res = dataclasses.replace(res, link=link, path_rtt_s=rtt, path_bytes_s=bw)
            else:
                seen[ident] = point.label
                res = _run_point(exe, i, point.label, point.settings, base, args, opts, opts.out_dir / "raw")
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


class _relays:
    """One Relay per endpoint, all closed at the end."""

    def __init__(self, endpoints: Sequence[str]) -> None:
        self.endpoints = endpoints
        self.relays: list[Relay] = []

    def __enter__(self) -> list[Relay]:
        try:
            for ep in self.endpoints:
                self.relays.append(Relay(_split_endpoint(ep)).__enter__())
        except BaseException:
            self.__exit__()
            raise
        return self.relays

    def __exit__(self, *exc: object) -> None:
        for r in self.relays:
            r.close()


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
    _check_out_dir(out_dir)
    dims = parse_sweep(sweep)
    _claim_out_dir(out_dir)  # demo/ and logs/ go into it next
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
