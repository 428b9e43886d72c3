"""One point of a bench sweep: its llama-bench run (or, through the relays, one run per
phase, counted), kept raw in ``raw/`` and judged (a failure recorded with its kind)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from patchkit.bench.relay import Relay, Traffic
from patchkit.bench.result import (
    PhaseTraffic,
    PointResult,
    PointStatus,
    classify_failure,
    measurements,
    parse_bench_output,
)
from patchkit.bench.sweep import Point
from patchkit.core.errors import ConfigError
from patchkit.core.proc import run
from patchkit.smoke import llama_output

__all__ = ["PointRun", "run_point", "run_relayed", "skip_reason", "tool_output"]

_GRAPH_CMDS = ("GRAPH_COMPUTE", "GRAPH_RECOMPUTE")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PointRun:
    """How every point of a sweep runs: the llama-bench, the raw-output folder, its limits."""

    exe: Path
    raw_dir: Path
    timeout: float
    reps: int
    n_prompt: int
    n_gen: int
    rpc: tuple[str, ...]
    output_format: str


def tool_output(exe: Path, *args: str, timeout: float) -> str:
    """What ``exe ARGS`` prints (``--help``, ``--list-devices``); ConfigError if it fails."""
    r = run([str(exe), *args], timeout=timeout, start_error="result")
    text = r.stdout + r.stderr
    if not r.ok:
        raise ConfigError(
            f"{exe.name} {' '.join(args)}: {r.brief()}: {llama_output.telling_line(r)}",
            detail="\n".join(text.splitlines()[-8:]),
        )
    return text


def run_point(pr: PointRun, index: int, point: Point, base: list[str], args: tuple[str, ...]) -> PointResult:
    """One llama-bench run of the point (no relay)."""
    r, found = _llama_bench(pr, [*base, *args], f"{index:02d}")
    res = PointResult(
        index=index,
        label=point.label,
        settings=point.settings,
        args=args,
        status=PointStatus.OK,
        measurements=found,
        seconds=r.seconds,
    )
    return _judge(res, r, found)


def _llama_bench(pr: PointRun, argv: list[str], name: str) -> tuple[Any, tuple[Any, ...]]:
    r = run([str(pr.exe), *argv], timeout=pr.timeout, start_error="result")
    pr.raw_dir.mkdir(parents=True, exist_ok=True)
    (pr.raw_dir / f"{name}.out").write_text(r.stdout, encoding="utf-8")
    (pr.raw_dir / f"{name}.err").write_text(r.stderr, encoding="utf-8")
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


def run_relayed(
    pr: PointRun, index: int, point: Point, args: tuple[str, ...], base: list[str], relays: Sequence[Relay]
) -> PointResult:
    """The point's prompt and decode phases as separate llama-bench runs through the relays,
    each with -r R and again with -r 1: the difference is R - 1 repetitions' traffic."""
    settings = dict(point.settings)
    n_prompt = int(settings.get("p", pr.n_prompt))
    n_gen = int(settings.get("n", pr.n_gen))
    rest = _strip_flags(args, {"-p", "-n"})
    endpoints = list(pr.rpc)
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
                _llama_bench, pr, [*head, "-r", str(pr.reps), "-o", pr.output_format, *rest], name
            ),
        )
        seconds += r.seconds
        found_all += [m for m in found if m.kind == phase]
        res = dataclasses.replace(res, measurements=tuple(found_all), seconds=seconds, traffic=tuple(traffic))
        if not (r.ok and found):
            return _judge(res, r, found)
        tokens = (pr.reps - 1) * per_rep
        if pr.reps < 2:
            pt = _phase_traffic(
                main, None, endpoints, 0, "-r 1: per-token traffic needs 2 or more repetitions"
            )
        elif not any(t.count(c) for t in main for c in _GRAPH_CMDS):
            pt = _phase_traffic(main, None, endpoints, tokens, "no graph ran on an RPC host")
        else:
            (rb, _), base_t = _counted(
                relays,
                functools.partial(
                    _llama_bench, pr, [*head, "-r", "1", "-o", pr.output_format, *rest], f"{name}-r1"
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


def skip_reason(point: Point, args: tuple[str, ...]) -> str:
    """Points that cannot run, said instead of run."""
    sm = dict(point.settings).get("sm", "")
    dev = args[args.index("-dev") + 1] if "-dev" in args else "auto"
    if sm == "tensor" and dev == "none":
        return "not run: tensor split needs at least one device besides the CPU (-dev none)"
    return ""
