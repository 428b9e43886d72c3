"""Decode and prompt speed of one arrangement (the model ``docs/plan.md`` explains).

Decode, per token:

- each device reads its weights (experts: the used share) and, per attention layer, its
  K and V of the ``n_kv`` cells the graph covers (the context padded to 256: llama.cpp's
  ``get_n_kv``), and reads and writes its recurrent state; that is ``bytes / effective
  bandwidth`` plus a fixed cost per layer (kernel launches, thread barriers);
- layer split runs the devices one after the other: their times add up, and each device
  boundary hands the F32 hidden state (``4 x n_embd`` bytes) across;
- tensor split runs the devices of the meta device side by side: per layer the slowest
  device, plus two all-reduces (after ``attn_output`` / ``ssm_out`` and ``ffn_down``) of
  the hidden state, which ggml-backend-meta does as a butterfly of copies between them;
- RPC: every copy out of a remote device is a ``GET_TENSOR`` (one round trip on its link),
  every copy into one a ``SET_TENSOR`` (no reply: bytes only); graph launches get no reply;
  each remote device also receives its inputs (positions, the ``n_kv``-wide KQ mask) and
  the output device's logits (``4 x n_vocab`` bytes) come back to the host. The wire time
  is bench's accounting (``bench.projection.terms``): round trips x rtt + bytes / rate.

Prompt (a ``-p 512`` ubatch): ``2 x active parameters`` FLOPs per token at each device's
effective throughput, plus the same wire terms for 512 tokens at once.
"""

from __future__ import annotations

import dataclasses
import math

from patchkit.bench.link import Link
from patchkit.bench.projection import terms
from patchkit.plan.arrangement import CPU, Arrangement, layer_devices
from patchkit.plan.devices import Device
from patchkit.plan.memory import CACHE_TYPES, F32
from patchkit.plan.model import ModelShape

__all__ = [
    "GRAPH_COST_S",
    "HOP_COST_S",
    "LAYER_COST_S",
    "PP_EFFICIENCY",
    "Speed",
    "graph_cost",
    "hop_cost",
    "speed",
]

# fixed seconds per layer and token (launches, barriers), before calibration
LAYER_COST_S = {"gpu": 25e-6, "cpu": 60e-6}
# fixed seconds per graph a device runs (a thread pool's wake-up, a launch, a server's
# dispatch), per segment of a tensor split (two per layer)
GRAPH_COST_S = {"gpu": 20e-6, "cpu": 100e-6}
# fixed seconds per device and token of a layer split (its graph, its inputs, the hand-off
# it waits for); calibrated from a split over several devices
HOP_COST_S = {"gpu": 30e-6, "cpu": 200e-6}
# share of the FP16 (GPU) / FP32 (CPU) peak prompt processing reaches, before calibration
PP_EFFICIENCY = {"gpu": 0.35, "cpu": 0.5}
LOCAL_COPY_S = 15e-6  # one device-to-device copy on this machine (a PCIe transfer's latency)
LOCAL_COPY_BYTES_S = 10e9
PROMPT = 512
# A tensor split does not reuse its graphs (no GRAPH_RECOMPUTE): every segment a remote
# member runs is a GRAPH_COMPUTE carrying the graph, ~1.19 x its nodes x a 296-byte
# rpc_tensor (measured with bench's relay on SmolLM2 at the pin: 19.9 MB per token and
# server over 60 segments of a 936-node graph). Nodes per block, from llama.cpp's
# "graph nodes" lines: 31 for attention (SmolLM2: 936 for 30), 65 for a gated delta net
# (a qwen35 shape: 1375 for 18 + 6), ~12 more for MoE routing (an estimate).
RPC_TENSOR_BYTES = 296
GRAPH_TENSORS_PER_NODE = 1.19
NODES = {"attention": 31, "recurrent": 65}
MOE_NODES = 12


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinkUse:
    host: str
    mb_per_token: float
    round_trips_per_token: float
    seconds_per_token: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class Speed:
    decode_tps: float
    prompt_tps: float
    device_s: dict[str, float]  # seconds per token each device computes (decode)
    links: tuple[LinkUse, ...]
    bottleneck: str  # the device or link that takes the largest share of a token

    @property
    def link_mb_per_token(self) -> float:
        return sum(lk.mb_per_token for lk in self.links)

    @property
    def round_trips_per_token(self) -> float:
        return sum(lk.round_trips_per_token for lk in self.links)


class _Wire:
    """Round trips and bytes per link (by host), for one token or one ubatch."""

    def __init__(self) -> None:
        self.rt: dict[str, float] = {}
        self.nbytes: dict[str, float] = {}
        self.links: dict[str, Link] = {}
        self.local_s = 0.0

    def add(self, dev: Device, *, rt: float = 0.0, nbytes: float = 0.0) -> None:
        if not dev.remote or dev.link is None:
            self.local_s += rt * LOCAL_COPY_S + nbytes / LOCAL_COPY_BYTES_S if rt else 0.0
            return
        h = dev.host
        self.links[h] = dev.link
        self.rt[h] = self.rt.get(h, 0.0) + rt
        self.nbytes[h] = self.nbytes.get(h, 0.0) + nbytes

    def copy(self, src: Device | None, dst: Device | None, nbytes: float) -> None:
        """A tensor copy between two devices (None: the host)."""
        if src is not None and dst is not None and src.remote and src.endpoint == dst.endpoint:
            self.add(src, rt=1, nbytes=64)  # COPY_TENSOR on the same server
            return
        if src is not None and src.remote:
            self.add(src, rt=1, nbytes=nbytes)  # GET_TENSOR
        if dst is not None and dst.remote:
            self.add(dst, nbytes=nbytes)  # SET_TENSOR, no reply
        if (src is None or not src.remote) and (dst is None or not dst.remote) and src is not dst:
            self.local_s += LOCAL_COPY_S + nbytes / LOCAL_COPY_BYTES_S

    def seconds(self) -> dict[str, float]:
        return {h: terms(0.0, self.rt[h], self.nbytes[h], self.links[h]).total for h in self.rt}


def graph_nodes(shape: ModelShape) -> int:
    """Nodes of the model's decode graph, estimated per block kind."""
    per = sum(NODES[lyr.kind] + (MOE_NODES if lyr.expert_bytes else 0) for lyr in shape.layers)
    return per + 6


def _layer_cost(d: Device) -> float:
    return LAYER_COST_S["cpu" if d.kind == "cpu" else "gpu"]


def graph_cost(d: Device) -> float:
    return d.graph_cost_s if d.graph_cost_s > 0 else GRAPH_COST_S["cpu" if d.kind == "cpu" else "gpu"]


def hop_cost(d: Device) -> float:
    return d.hop_cost_s if d.hop_cost_s > 0 else HOP_COST_S["cpu" if d.kind == "cpu" else "gpu"]


def _steps(n: int) -> int:
    """Copy rounds of ggml-backend-meta's all-reduce over n members (fold, butterfly, copy back)."""
    p = 1
    while p * 2 <= n:
        p *= 2
    return (p.bit_length() - 1) + (2 if n > p else 0)


def _flops(d: Device) -> float:
    """FLOP/s the device sustains on prompt processing."""
    if d.kind == "cpu":
        return d.fp32_tflops * 1e12 * PP_EFFICIENCY["cpu"]
    return d.fp16_tflops * 1e12 * PP_EFFICIENCY["gpu"]


def speed(
    shape: ModelShape, arr: Arrangement, *, host: Device, at_ctx: int | None = None, n_prompt: int = PROMPT
) -> Speed:
    """Predicted decode/prompt tok/s of ``arr`` with ``at_ctx`` tokens in the cache
    (default: the arrangement's context, the slowest point of a full conversation) and a
    prompt of ``n_prompt`` tokens (one ubatch)."""
    ctx = arr.ctx if at_ctx is None else at_ctx
    n_kv = max(256, math.ceil(ctx / 256) * 256)
    kvb = CACHE_TYPES[arr.cache_type]
    where = layer_devices(arr, shape.n_layer)
    devs: list[Device] = [*arr.devices, *([arr.ot_device] if arr.ot_device is not None else [])]

    def dev_of(i: int) -> Device:
        return host if i == CPU else devs[i]

    hidden = F32 * shape.n_embd
    logits = F32 * shape.n_vocab
    graph_bytes = graph_nodes(shape) * GRAPH_TENSORS_PER_NODE * RPC_TENSOR_BYTES

    def layer_bytes(lyr_index: int) -> float:
        lyr = shape.layers[lyr_index]
        b = shape.active_bytes(lyr)
        if lyr.kind == "attention":
            cells = min(n_kv, shape.n_swa + PROMPT) if lyr.swa and shape.n_swa else n_kv
            b += cells * (lyr.k_width + lyr.v_width) * kvb
        else:
            b += 2 * lyr.state_bytes
        return b

    dec = _Wire()
    pp = _Wire()
    device_s: dict[str, float] = {}
    pp_s = 0.0
    tensor = arr.split_mode == "tensor"
    members = list(arr.devices) if tensor else []

    def add_dev(d: Device, s: float) -> None:
        device_s[d.label] = device_s.get(d.label, 0.0) + s

    # the host hands the input embeddings to the first device
    prev: Device | None = None
    for il in range(shape.n_layer + 1):
        i = where[il]
        is_out = il == shape.n_layer
        nbytes = shape.output_bytes if is_out else layer_bytes(il)
        params = shape.output_params if is_out else shape.active_params(shape.layers[il])
        if tensor and i == 0:
            per_dev: list[tuple[Device, float, float]] = []
            for j, d in enumerate(members):
                share = arr.shares[j]
                split = shape.output_split_bytes if is_out else shape.layers[il].split_bytes
                b = nbytes - split + split * share
                graphs = 0 if is_out else 2
                t_d = b / d.effective_bw + _layer_cost(d) + graphs * graph_cost(d)
                per_dev.append((d, t_d, 2 * params * share * n_prompt / _flops(d) + graphs * graph_cost(d)))
            slow = max(per_dev, key=lambda p: p[1])
            add_dev(slow[0], _side_by_side([(d, t) for d, t, _ in per_dev], host))
            pp_s += _side_by_side([(d, t) for d, _, t in per_dev], host)
            if not is_out:
                for _ in range(2):  # two all-reduces per layer
                    _allreduce(dec, members, hidden)
                    _allreduce(pp, members, hidden * n_prompt)
                for d in members:  # its two segments' graphs
                    dec.add(d, nbytes=2 * graph_bytes)
                    pp.add(d, nbytes=2 * graph_bytes)
            cur: Device | None = members[0]
            if prev is not members[0] and prev is not None:
                dec.copy(prev, members[0], hidden)
                pp.copy(prev, members[0], hidden * n_prompt)
            prev = cur
            continue
        d = dev_of(i)
        starts = il == 0 or prev is not (None if i == CPU else d)  # a new graph on this device
        add_dev(d, nbytes / d.effective_bw + _layer_cost(d) + (hop_cost(d) if starts else 0.0))
        pp_s += 2 * params * n_prompt / _flops(d) + (hop_cost(d) if starts else 0.0)
        src = prev if prev is not None else None
        if src is not d and not (src is None and i == CPU):
            dec.copy(src, None if i == CPU else d, hidden)
            pp.copy(src, None if i == CPU else d, hidden * n_prompt)
        prev = None if i == CPU else d
    # inputs each remote device gets per token (positions, the KQ mask), and the logits back
    users = {devs[i].label: devs[i] for i in set(where) if i != CPU and i < len(devs)}
    if tensor and 0 in where:
        users |= {d.label: d for d in members}
    for d in users.values():
        dec.add(d, nbytes=8 + 2 * n_kv)
        pp.add(d, nbytes=(8 + 2 * n_kv) * n_prompt)
    out_i = where[shape.n_layer]
    out_devs = members if tensor and out_i == 0 else ([] if out_i == CPU else [devs[out_i]])
    for d in out_devs:
        share = arr.shares[members.index(d)] if tensor else 1.0
        dec.add(d, rt=1, nbytes=logits * share)
        pp.add(d, rt=1, nbytes=logits * share)

    wire = dec.seconds()
    t = sum(device_s.values()) + sum(wire.values()) + dec.local_s
    t_pp = pp_s + sum(pp.seconds().values()) + pp.local_s
    parts = {**device_s, **{f"link {h}": s for h, s in wire.items()}}
    bottleneck = max(parts, key=lambda k: parts[k]) if parts else ""
    links = tuple(
        LinkUse(
            host=h,
            mb_per_token=dec.nbytes[h] / 1e6,
            round_trips_per_token=dec.rt[h],
            seconds_per_token=wire[h],
        )
        for h in sorted(dec.rt)
    )
    return Speed(
        decode_tps=1.0 / t if t > 0 else 0.0,
        prompt_tps=n_prompt / t_pp if t_pp > 0 else 0.0,
        device_s=device_s,
        links=links,
        bottleneck=bottleneck,
    )


def _side_by_side(work: list[tuple[Device, float]], host: Device) -> float:
    """Seconds until devices working at once are all done: the slowest of them, unless CPU
    devices on one machine (RPC servers on one box, a loopback one and the host) need more
    cores than it has; then they take turns: their threads x seconds over its cores."""
    t = max((s for _, s in work), default=0.0)
    groups: dict[str, list[tuple[Device, float]]] = {}
    for d, s in work:
        if d.kind == "cpu":
            groups.setdefault(d.machine, []).append((d, s))
    for machine, members in groups.items():
        cores = host.cores if machine == "" and host.cores else max(d.cores for d, _ in members)
        if cores <= 0 or len(members) < 2:
            continue
        t = max(t, sum(s * min(cores, d.threads or cores) for d, s in members) / cores)
    return t


def _allreduce(w: _Wire, members: list[Device], nbytes: float) -> None:
    """ggml-backend-meta's fallback all-reduce: fold the excess over a power of two, then
    a butterfly (every member sends to its partner each step), then copy back."""
    n = len(members)
    if n < 2:
        return
    p = 1
    while p * 2 <= n:
        p *= 2
    for j in range(p, n):
        w.copy(members[j], members[j - p], nbytes)
    step = p // 2
    while step >= 1:
        for j in range(p):
            w.copy(members[j], members[j ^ step], nbytes)
        step //= 2
    for j in range(p, n):
        w.copy(members[j - p], members[j], nbytes)
