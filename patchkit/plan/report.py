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
    model: int  # the model's weights on it, bytes
    context: int  # the KV cache and recurrent state on it, bytes
    compute: int  # llama.cpp's compute buffers on it, bytes
    total: int  # all of it, bytes
    capacity: int  # bytes it has for buffers (memory minus the driver's overhead)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanDevice(Record):
    name: str  # the device's name (the table's, or what was asked)
    host: str  # the host it is on ("" for this machine)
    share: float  # its share of the split (-ts, normalised)
    memory: PlanMemory | None = None  # what it holds; null: not estimated (refused before)
    calibrated: bool = False  # its bandwidth was measured (--calibrate), not the table's


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanLink(Record):
    host: str  # the remote host
    mb_per_token: float  # MB per generated token over the link
    round_trips_per_token: float  # round trips per generated token
    ms_per_token: float  # milliseconds per token the link takes


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanOt(Record):
    device: str  # the device (-ot) holding whole layers outside the tensor split
    host: str  # its host
    layers: tuple[int, int]  # [start, end) of those layers


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanArrangement(Record):
    split_mode: str  # layer, tensor, or none (everything on the host CPU)
    devices: tuple[PlanDevice, ...]  # the devices in -dev order
    host_memory: PlanMemory | None  # what the host CPU holds; null: not estimated
    fits: bool  # it fits in every device's memory
    why_not: str  # why it does not fit or was refused ("" when it fits)
    max_ctx: int  # the longest context that fits
    decode_tps: float  # predicted generation speed, tokens/s
    prompt_tps: float  # predicted prompt speed, tokens/s
    link_mb_per_token: float  # MB per token over all links
    round_trips_per_token: float  # round trips per token over all links
    links: tuple[PlanLink, ...]  # per remote host
    bottleneck: str  # the device or link that takes the largest share of a token
    calibrated: bool  # every device used has a measured bandwidth
    command: str  # the llama-server command line ("" when refused before it was estimated)
    ts_rule: str  # how the shares were chosen: memory, bandwidth, best, even
    cache_type: str  # the KV cache type (f16, q8_0)
    cpu_layers: int  # the first layers kept on the host CPU
    ot: PlanOt | None  # whole layers on a device outside the tensor split (-ot); null: none
    needs_experimental: bool  # it needs the experimental scheduling patch (-ot beside -sm tensor)
    description: str  # the arrangement in words (the table's row)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanModel(Record):
    name: str  # the model's name
    arch: str  # its architecture (general.architecture)
    n_layer: int  # its layers
    n_embd: int  # its embedding width
    n_vocab: int  # its vocabulary size
    weight_bytes: int  # its weights, bytes
    recurrent_layers: int  # layers with recurrent state
    attention_layers: int  # layers with a KV cache
    n_expert: int  # experts per MoE layer (0: dense)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanReport(Record):
    schema: int  # the JSON format's version: 1
    model: PlanModel  # the model planned
    ctx: int  # the context asked for
    arrangements: tuple[PlanArrangement, ...]  # each arrangement, best first


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
