"""llama-bench results: parsing its JSON / JSONL output, one point's outcome, failures.

llama-bench prints one record per test (``-p 512 -n 128`` gives two: pp512 and tg128)
with ``samples_ts``, the tokens/s of every repetition. ``-o json`` is an array written
record by record (a crash leaves it unterminated); ``-o jsonl`` is one record per line.
Both, and a truncated array, parse here.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from typing import Any, ClassVar

from patchkit.bench.relay import Traffic
from patchkit.core.enums import StrEnum
from patchkit.core.proc import LINE_MAX, RunResult
from patchkit.core.record import Record, encode, meta
from patchkit.smoke.llama_output import failure_kind, telling_line

__all__ = [
    "Measurement",
    "PhaseTraffic",
    "PointResult",
    "PointStatus",
    "classify_failure",
    "measurements",
    "parse_bench_output",
]


def parse_bench_output(text: str) -> list[dict[str, Any]]:
    """Every complete JSON object in llama-bench's stdout, in order."""
    dec = json.JSONDecoder()
    out: list[dict[str, Any]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\r\n[],":
            i += 1
            continue
        if c == "{":
            try:
                obj, i = dec.raw_decode(text, i)
            except ValueError:
                break  # truncated: the process died while printing
            if isinstance(obj, dict):
                out.append(obj)
            continue
        nl = text.find("\n", i)  # a stray line (not JSON): skip it
        i = n if nl < 0 else nl + 1
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class Measurement(Record):
    """One llama-bench test: tokens/s over the repetitions."""

    test: str  # pp512, tg128, pp512+tg128, with @d<depth>
    kind: str  # prompt | decode | mixed
    samples_ts: tuple[float, ...]  # tokens/s of each repetition
    median: float  # tokens/s
    min: float  # tokens/s
    max: float  # tokens/s
    devices: str = ""  # as llama-bench reports them (after its own resolution)
    split_mode: str = ""  # as llama-bench reports it

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Measurement:
        return cls(**{**d, "samples_ts": tuple(d["samples_ts"])})


def _measurement(rec: dict[str, Any]) -> Measurement | None:
    try:
        n_prompt, n_gen = int(rec.get("n_prompt", 0)), int(rec.get("n_gen", 0))
        depth = int(rec.get("n_depth", 0))
        samples = [float(x) for x in rec.get("samples_ts") or ()]
        if not samples and rec.get("avg_ts") is not None:
            samples = [float(rec["avg_ts"])]
    except (TypeError, ValueError):
        return None
    if not samples or (n_prompt <= 0 and n_gen <= 0):
        return None
    if n_gen == 0:
        kind, test = "prompt", f"pp{n_prompt}"
    elif n_prompt == 0:
        kind, test = "decode", f"tg{n_gen}"
    else:
        kind, test = "mixed", f"pp{n_prompt}+tg{n_gen}"
    if depth:
        test += f"@d{depth}"
    return Measurement(
        test=test,
        kind=kind,
        samples_ts=tuple(samples),
        median=statistics.median(samples),
        min=min(samples),
        max=max(samples),
        devices=str(rec.get("devices", "")),
        split_mode=str(rec.get("split_mode", "")),
    )


def measurements(records: list[dict[str, Any]]) -> list[Measurement]:
    return [m for m in (_measurement(r) for r in records) if m is not None]


def classify_failure(r: RunResult) -> tuple[str, str]:
    """(kind, one-line message) for a failed llama-bench run.

    kind: timeout, one of llama_output.FAILURE_KINDS (oom | abort | rpc | args | load), signal,
    error.
    """
    if r.returncode is None:
        return "timeout", f"timed out after {r.seconds:.0f}s"
    text = r.stderr + "\n" + r.stdout
    found = failure_kind([ln.strip() for ln in text.splitlines() if ln.strip()])
    if found is not None:
        kind, line = found
        return kind, f"{r.brief()}: {line[:LINE_MAX]}"
    if r.returncode < 0 or r.returncode in (134, 139, 3):
        return "signal", f"{r.brief()}: {telling_line(r)}".rstrip(": ")
    return "error", f"{r.brief()}: {telling_line(r)}".rstrip(": ")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PhaseTraffic(Record):
    """The RPC traffic of one phase (prompt or decode) of one setup, per host.

    ``hosts`` holds the exact counts of ``tokens`` tokens: llama-bench ran the phase with
    -r R and again with -r 1 (same everything else); the difference is R - 1 repetitions,
    so model loading, context setup and the warmup cancel out."""

    json_derived: ClassVar[tuple[str | tuple[str, str], ...]] = (
        "mb_per_token",
        ("rt_per_token", "rt_per_token_rounded"),
        "host_ms_per_token",
    )

    tokens: int = 0  # the tokens counted (0: no per-token numbers)
    hosts: tuple[tuple[str, Traffic], ...] = dataclasses.field(
        default=(), metadata=meta(encode=lambda hosts: {ep: encode(t) for ep, t in hosts})
    )  # endpoint -> traffic of those tokens
    run_bytes: int = 0  # the whole -r R run, loading included
    note: str = ""  # why there are no per-token numbers, or what to know about them

    @property
    def counted(self) -> bool:
        return self.tokens > 0

    @property
    def total(self) -> Traffic:
        out = Traffic()
        for _, t in self.hosts:
            out = Traffic(
                bytes_up=out.bytes_up + t.bytes_up,
                bytes_down=out.bytes_down + t.bytes_down,
                round_trips=out.round_trips + t.round_trips,
                commands=tuple(_add(dict(out.commands), dict(t.commands)).items()),
                replies=out.replies + t.replies,
                host_s=out.host_s + t.host_s,
            )
        return out

    @property
    def bytes_per_token(self) -> float:
        return self.total.bytes / self.tokens if self.tokens else 0.0

    @property
    def rt_per_token(self) -> float:
        return self.total.round_trips / self.tokens if self.tokens else 0.0

    @property
    def rt_per_token_rounded(self) -> float:
        """round trips per token, all hosts"""
        return round(self.rt_per_token, 6)

    @property
    def host_s_per_token(self) -> float:
        """Seconds per token the hosts took to answer (compute + the path to them)."""
        return self.total.host_s / self.tokens if self.tokens else 0.0

    @property
    def mb_per_token(self) -> float:
        """MB on the wire per token, all hosts"""
        return round(self.bytes_per_token / 1e6, 6)

    @property
    def host_ms_per_token(self) -> float:
        """ms per token the hosts took to answer"""
        return round(self.host_s_per_token * 1e3, 4)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PhaseTraffic:
        return cls(
            tokens=d["tokens"],
            run_bytes=d.get("run_bytes", 0),
            note=d.get("note", ""),
            hosts=tuple((ep, Traffic.from_json(t)) for ep, t in d["hosts"].items()),
        )


def _add(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in [*a, *(k for k in b if k not in a)]}


class PointStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"
    DUPLICATE = "duplicate"  # the same llama-bench arguments as an earlier point: not run
    SKIPPED = "skipped"  # cannot run (e.g. tensor split with no device): said, not run


@dataclasses.dataclass(frozen=True, kw_only=True)
class PointResult(Record):
    """One setup of the sweep and what became of it."""

    json_derived: ClassVar[tuple[str, ...]] = ("path",)

    index: int  # 1, 2, ... in sweep order
    label: str  # the setup, as the summary names it
    settings: tuple[tuple[str, str], ...] = dataclasses.field(
        metadata=meta(encode=dict)
    )  # sweep key -> value
    args: tuple[str, ...]  # the llama-bench arguments of this point (without -m/-rpc)
    status: PointStatus  # ok | failed | duplicate | skipped
    error: str = ""  # why it failed or was not run
    error_kind: str = ""  # timeout, oom, abort, rpc, args, load, signal, error
    measurements: tuple[Measurement, ...] = ()  # one per llama-bench test
    seconds: float = dataclasses.field(default=0.0, metadata=meta(encode=lambda s: round(s, 2)))  # wall time
    traffic: tuple[tuple[str, PhaseTraffic], ...] = dataclasses.field(
        default=(), metadata=meta(encode=lambda phases: {k: encode(t) for k, t in phases})
    )  # phase (prompt, decode) -> RPC traffic
    link: str = ""  # the emulated link ("none": the bare relay; "": no relay)
    path_rtt_s: float = dataclasses.field(default=0.0, metadata=meta(written=False))
    """the path this point's RPC traffic went through (written as ``path``)"""
    path_bytes_s: float = dataclasses.field(default=0.0, metadata=meta(written=False))
    """0: unknown (a real network)"""

    @property
    def path(self) -> dict[str, float]:
        """the path its RPC traffic went through: ``rtt_ms``, ``mbit_s`` (0: unknown, a real network)"""
        return {"rtt_ms": round(self.path_rtt_s * 1e3, 4), "mbit_s": round(self.path_bytes_s * 8e-6, 1)}

    def phase_traffic(self, kind: str) -> PhaseTraffic | None:
        return dict(self.traffic).get(kind)

    def kind(self, kind: str) -> Measurement | None:
        return next((m for m in self.measurements if m.kind == kind), None)

    @property
    def decode(self) -> Measurement | None:
        return self.kind("decode")

    @property
    def prompt(self) -> Measurement | None:
        return self.kind("prompt")

    @property
    def devices(self) -> str:
        return next((m.devices for m in self.measurements if m.devices), "")

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PointResult:
        return cls(
            index=d["index"],
            label=d["label"],
            settings=tuple(d["settings"].items()),
            args=tuple(d["args"]),
            status=PointStatus(d["status"]),
            error=d.get("error", ""),
            error_kind=d.get("error_kind", ""),
            seconds=d.get("seconds", 0.0),
            measurements=tuple(Measurement.from_json(m) for m in d["measurements"]),
            traffic=tuple((k, PhaseTraffic.from_json(t)) for k, t in d.get("traffic", {}).items()),
            link=d.get("link", ""),
            path_rtt_s=d.get("path", {}).get("rtt_ms", 0.0) / 1e3,
            path_bytes_s=d.get("path", {}).get("mbit_s", 0.0) / 8e-6,
        )
