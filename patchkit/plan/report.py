"""The plan as records (``--json``, ``schema 1``) and as the ranked table's rows.

JSON keys (each arrangement, best first): ``split_mode``, ``devices`` (``name``, ``host``,
``share``, ``memory``: ``model``/``context``/``compute``/``total``/``capacity`` bytes),
``host_memory``, ``fits``, ``why_not``, ``max_ctx``, ``decode_tps``, ``prompt_tps``,
``link_mb_per_token``, ``round_trips_per_token``, ``links`` (per host), ``bottleneck``,
``calibrated``, ``command``, and what makes it: ``ts_rule``, ``cache_type``,
``cpu_layers``, ``ot`` (``device``, ``layers``), ``needs_experimental``, ``description``.
"""

from __future__ import annotations

import dataclasses
import shlex

from patchkit.core.record import Record
from patchkit.plan.memory import DeviceMemory
from patchkit.plan.model import ModelShape
from patchkit.plan.planner import Candidate, Rig

__all__ = ["PlanArrangement", "PlanDevice", "PlanMemory", "PlanReport", "report"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanMemory(Record):
    model: int
    context: int
    compute: int
    total: int
    capacity: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanDevice(Record):
    name: str
    host: str
    share: float
    memory: PlanMemory | None = None
    calibrated: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanLink(Record):
    host: str
    mb_per_token: float
    round_trips_per_token: float
    ms_per_token: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanOt(Record):
    device: str
    host: str
    layers: tuple[int, int]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanArrangement(Record):
    split_mode: str
    devices: tuple[PlanDevice, ...]
    host_memory: PlanMemory | None
    fits: bool
    why_not: str
    max_ctx: int
    decode_tps: float
    prompt_tps: float
    link_mb_per_token: float
    round_trips_per_token: float
    links: tuple[PlanLink, ...]
    bottleneck: str
    calibrated: bool
    command: str
    ts_rule: str
    cache_type: str
    cpu_layers: int
    ot: PlanOt | None
    needs_experimental: bool
    description: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanModel(Record):
    name: str
    arch: str
    n_layer: int
    n_embd: int
    n_vocab: int
    weight_bytes: int
    recurrent_layers: int
    attention_layers: int
    n_expert: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanReport(Record):
    schema: int
    model: PlanModel
    ctx: int
    arrangements: tuple[PlanArrangement, ...]


def _mem(m: DeviceMemory | None) -> PlanMemory | None:
    if m is None:
        return None
    return PlanMemory(model=m.model, context=m.context, compute=m.compute, total=m.total, capacity=m.capacity)


def arrangement_record(c: Candidate, shape: ModelShape, rig: Rig, model_arg: str) -> PlanArrangement:
    a = c.arrangement
    by_label = {m.label: m for m in c.memory.devices} if c.memory else {}
    devs = [
        PlanDevice(
            name=d.name,
            host=d.host,
            share=round(a.shares[i], 4) if i < len(a.shares) else 0.0,
            memory=_mem(by_label.get(d.label)),
            calibrated=d.calibrated_bw_gbs > 0,
        )
        for i, d in enumerate(a.devices)
    ]
    ot = None
    if a.ot_device is not None:
        ot = PlanOt(device=a.ot_device.name, host=a.ot_device.host, layers=a.ot_layers)
    sp = c.speed
    cmd = "" if c.refused else shlex.join(a.command(model_arg, n_layer=shape.n_layer, rig=rig.devices))
    return PlanArrangement(
        split_mode=a.split_mode,
        devices=tuple(devs),
        host_memory=_mem(by_label.get("host")),
        fits=c.fits,
        why_not=c.why_not,
        max_ctx=c.max_ctx,
        decode_tps=round(sp.decode_tps, 3) if sp else 0.0,
        prompt_tps=round(sp.prompt_tps, 2) if sp else 0.0,
        link_mb_per_token=round(sp.link_mb_per_token, 4) if sp else 0.0,
        round_trips_per_token=round(sp.round_trips_per_token, 2) if sp else 0.0,
        links=tuple(
            PlanLink(
                host=lk.host,
                mb_per_token=round(lk.mb_per_token, 4),
                round_trips_per_token=round(lk.round_trips_per_token, 2),
                ms_per_token=round(lk.seconds_per_token * 1e3, 3),
            )
            for lk in (sp.links if sp else ())
        ),
        bottleneck=sp.bottleneck if sp else "",
        calibrated=c.calibrated,
        command=cmd,
        ts_rule=a.ts_rule,
        cache_type=a.cache_type,
        cpu_layers=a.cpu_layers,
        ot=ot,
        needs_experimental=a.needs_experimental,
        description=a.describe(),
    )


def report(shape: ModelShape, rig: Rig, cands: list[Candidate], *, ctx: int, model_arg: str) -> PlanReport:
    return PlanReport(
        schema=1,
        model=PlanModel(
            name=shape.name,
            arch=shape.arch,
            n_layer=shape.n_layer,
            n_embd=shape.n_embd,
            n_vocab=shape.n_vocab,
            weight_bytes=shape.weight_bytes,
            recurrent_layers=sum(lyr.kind == "recurrent" for lyr in shape.layers),
            attention_layers=sum(lyr.kind == "attention" for lyr in shape.layers),
            n_expert=shape.n_expert,
        ),
        ctx=ctx,
        arrangements=tuple(arrangement_record(c, shape, rig, model_arg) for c in cands),
    )
