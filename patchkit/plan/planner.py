"""Enumerate, prune and rank the arrangements of a rig for one model.

Candidates: split mode (layer, tensor; row refused with upstream's reason), every
non-empty subset of the rig's devices, for layer split every ``-dev`` order of it (which
device is first and last matters: the hand-offs and the logits cross the links), ``-ts``
by memory, by bandwidth and the best one found (layer split: the fastest devices filled
first with whole layers; tensor split: shares by bandwidth, capped by memory), the
first layers left on the CPU when the devices alone do not hold the model, ``-ot``
hybrids (tensor split over the local devices and whole layers on one remote device),
and the KV cache types. Each gets its memory at the asked context, the largest context
it fits (a binary search over the memory model, in steps of 256 cells) and its speed.
Ranked: those that fit first, then decode tok/s, then the largest context.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from patchkit.core.errors import ConfigError
from patchkit.plan.arrangement import Arrangement
from patchkit.plan.devices import Device
from patchkit.plan.memory import Memory, memory
from patchkit.plan.model import ModelShape
from patchkit.plan.speed import Speed, speed

__all__ = ["MAX_CTX", "Candidate", "PlanOptions", "Rig", "check_ctx", "evaluate", "max_ctx", "plan"]

MAX_CTX = 1 << 24
ROW_REASON = (
    "-sm row splits matrices only across the devices of one CUDA backend "
    "(ggml_backend_split_buffer_type, src/llama-model.cpp); RPC devices and the CPU have "
    "no split buffer type, and -sm tensor supersedes it"
)
TENSOR_FA_REASON = "SPLIT_MODE_TENSOR requires flash_attn to be enabled (src/llama-context.cpp)"
MAX_ORDERS = 6  # devices in a subset up to which every -dev order is tried


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rig:
    devices: tuple[Device, ...]  # accelerators and RPC devices, in the order given
    host: Device  # this machine's CPU and RAM


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanOptions:
    ctx: int
    cache_types: tuple[str, ...] = ("f16", "q8_0")
    modes: tuple[str, ...] = ("layer", "tensor")
    flash_attn: bool = True
    top: int = 0  # 0: keep all


@dataclasses.dataclass(frozen=True, kw_only=True)
class Candidate:
    arrangement: Arrangement
    memory: Memory | None
    speed: Speed | None
    fits: bool
    why_not: str
    max_ctx: int
    calibrated: bool

    @property
    def refused(self) -> bool:
        return self.memory is None


def check_ctx(ctx: int) -> int:
    if not 1 <= ctx <= MAX_CTX:
        raise ConfigError(
            f"context {ctx} is out of range (1 to {MAX_CTX})",
            hint="give the context in tokens, e.g. --ctx 32768 or --ctx 111K",
        )
    return ctx


def _why(mem: Memory) -> str:
    gib = 1 << 30
    return "; ".join(
        f"{d.label} needs {d.total / gib:.2f} GiB of {d.capacity / gib:.2f} GiB" for d in mem.over()
    )


def max_ctx(shape: ModelShape, arr: Arrangement, host: Device, limit: int) -> int:
    """The largest context (a multiple of 256) at which ``arr`` fits; 0 if none."""

    def fits(c: int) -> bool:
        return memory(shape, dataclasses.replace(arr, ctx=c), host_capacity=host.capacity).fits

    lo, hi = 0, max(1, limit // 256)
    if not fits(256):
        return 0
    lo = 1
    if fits(hi * 256):
        return hi * 256
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid * 256):
            lo = mid
        else:
            hi = mid
    return lo * 256


def evaluate(shape: ModelShape, arr: Arrangement, rig: Rig, *, ctx_limit: int) -> Candidate:
    mem = memory(shape, arr, host_capacity=rig.host.capacity)
    sp = speed(shape, arr, host=rig.host)
    used = [*arr.devices, *([arr.ot_device] if arr.ot_device else [])]
    if arr.cpu_layers or arr.split_mode == "none":
        used.append(rig.host)
    return Candidate(
        arrangement=arr,
        memory=mem,
        speed=sp,
        fits=mem.fits,
        why_not="" if mem.fits else _why(mem),
        max_ctx=max_ctx(shape, arr, rig.host, ctx_limit),
        calibrated=all(d.calibrated_bw_gbs > 0 for d in used),
    )


def refused(arr: Arrangement, why: str) -> Candidate:
    return Candidate(
        arrangement=arr, memory=None, speed=None, fits=False, why_not=why, max_ctx=0, calibrated=False
    )


def _norm(xs: list[float]) -> tuple[float, ...]:
    s = sum(xs)
    return tuple(x / s for x in xs) if s > 0 else tuple(1 / len(xs) for _ in xs)


def _ts(arr: Arrangement, values: list[float], rule: str, digits: int = 2) -> Arrangement:
    """``arr`` with ``-ts`` values rounded as printed (the shares are what llama.cpp gets)."""
    vals = tuple(round(v, digits) for v in values)
    return dataclasses.replace(arr, ts_values=vals, shares=_norm(list(vals)), ts_rule=rule)


def _layer_counts_best(shape: ModelShape, base: Arrangement, rig: Rig) -> tuple[float, ...] | None:
    """Whole layers, the fastest devices first, each up to what its memory holds at the
    context (every device gets at least one layer: it was chosen to be in the split)."""
    devs = base.devices
    n = shape.n_layer + 1
    order = sorted(range(len(devs)), key=lambda i: -devs[i].effective_bw)
    counts = [1] * len(devs)
    left = n - len(devs)
    if left < 0:
        return None
    for i in order:
        lo, hi = 0, left
        while lo < hi:  # the most extra layers device i takes with the rest on the later devices
            mid = (lo + hi + 1) // 2
            trial = counts.copy()
            trial[i] += mid
            rest = left - mid
            tail = [j for j in order if j != i and order.index(j) > order.index(i)]
            if tail:
                trial[tail[-1]] += rest
            else:
                trial[i] += rest
            arr = _ts(base, [float(c) for c in trial], "best", 0)
            mem = memory(shape, arr, host_capacity=rig.host.capacity)
            label = devs[i].label
            if all(d.fits for d in mem.devices if d.label == label):
                lo = mid
            else:
                hi = mid - 1
        counts[i] += lo
        left -= lo
    if left:
        counts[order[-1]] += left
    return tuple(float(c) for c in counts)  # layer counts


def _tensor_best(shape: ModelShape, base: Arrangement, rig: Rig) -> tuple[float, ...]:
    """Shares by effective bandwidth, each capped at what the device's memory holds."""
    devs = base.devices
    bw = [d.effective_bw for d in devs]
    total_need = memory(
        shape, dataclasses.replace(base, shares=_norm([1.0] * len(devs))), host_capacity=1 << 62
    )
    need = sum(m.total for m in total_need.devices[: len(devs)])
    caps = [d.capacity / need if need else 1.0 for d in devs]
    shares = list(_norm(bw))
    for _ in range(len(devs)):
        over = [i for i, s in enumerate(shares) if s > caps[i]]
        if not over:
            break
        spare = sum(shares[i] - caps[i] for i in over)
        for i in over:
            shares[i] = caps[i]
        free = [i for i in range(len(devs)) if i not in over and shares[i] < caps[i]]
        tot = sum(bw[i] for i in free)
        for i in free:
            shares[i] += spare * bw[i] / tot if tot else 0.0
    return _norm(shares)


def _variants(shape: ModelShape, rig: Rig, opts: PlanOptions) -> list[Arrangement | tuple[Arrangement, str]]:
    out: list[Arrangement | tuple[Arrangement, str]] = []
    devs = rig.devices
    for k in range(1, len(devs) + 1):
        for subset in itertools.combinations(devs, k):
            for mode in opts.modes:
                if mode == "tensor" and k == 1:
                    continue  # a meta device of one is layer split with more overhead
                orders: list[tuple[Device, ...]]
                if mode == "layer" and k <= MAX_ORDERS:
                    orders = list(itertools.permutations(subset))
                else:
                    orders = [subset]
                for order in orders:
                    for ct in opts.cache_types:
                        base = _ts(
                            Arrangement(
                                split_mode=mode,
                                devices=order,
                                shares=(),
                                cache_type=ct,
                                flash_attn=opts.flash_attn,
                                ctx=opts.ctx,
                            ),
                            [d.capacity / (1 << 30) for d in order],
                            "memory",
                        )
                        if mode == "tensor" and not shape.tensor_split_ok:
                            out.append(
                                (
                                    base,
                                    "LLAMA_SPLIT_MODE_TENSOR not implemented for architecture "
                                    f"'{shape.arch}'",
                                )
                            )
                            continue
                        if mode == "tensor" and not opts.flash_attn:
                            out.append((base, TENSOR_FA_REASON))
                            continue
                        out.append(base)
                        if k > 1:
                            out.append(_ts(base, [d.effective_bw / 1e9 for d in order], "bandwidth", 0))
                            best = (
                                _layer_counts_best(shape, base, rig)
                                if mode == "layer"
                                else _tensor_best(shape, base, rig)
                            )
                            if best is not None:
                                digits = 0 if mode == "layer" else 1
                                scale = 1.0 if mode == "layer" else 100.0
                                out.append(_ts(base, [b * scale for b in best], "best", digits))
    return out


def _with_cpu_layers(shape: ModelShape, arr: Arrangement, rig: Rig) -> Arrangement | None:
    """The fewest first layers on the CPU with which ``arr`` fits at its context."""
    for k in range(1, shape.n_layer + 1):
        a = dataclasses.replace(arr, cpu_layers=k)
        if memory(shape, a, host_capacity=rig.host.capacity).fits:
            return a
    return None


def _ot_hybrids(shape: ModelShape, rig: Rig, opts: PlanOptions) -> list[Arrangement]:
    """Tensor split over the local devices, the last layers whole on one remote device: the
    fewest layers with which everything fits, and as many as the remote device holds (the
    most context)."""
    local = tuple(d for d in rig.devices if not d.remote)
    remote = [d for d in rig.devices if d.remote]
    if len(local) < 2 or not remote or not shape.tensor_split_ok or not opts.flash_attn:
        return []
    out = []
    for r in remote:
        for ct in opts.cache_types:
            base = _ts(
                Arrangement(
                    split_mode="tensor", devices=local, shares=(), cache_type=ct, ctx=opts.ctx, ot_device=r
                ),
                [d.capacity / (1 << 30) for d in local],
                "memory",
            )
            fewest = most = None
            for k in range(1, shape.n_layer):
                a = dataclasses.replace(base, ot_layers=(shape.n_layer - k, shape.n_layer))
                mem = memory(shape, a, host_capacity=rig.host.capacity)
                if not all(m.fits for m in mem.devices if m.label == r.label):
                    break
                most = a
                if fewest is None and mem.fits:
                    fewest = a
            out += [a for a in {fewest, most} if a is not None]
    return out


def plan(shape: ModelShape, rig: Rig, opts: PlanOptions) -> list[Candidate]:
    """Every candidate, ranked best first (refused ones last)."""
    check_ctx(opts.ctx)
    limit = min(MAX_CTX, max(opts.ctx, shape.n_ctx_train))
    cands: list[Candidate] = []
    seen: set[tuple[object, ...]] = set()
    todo: list[Arrangement | tuple[Arrangement, str]] = []
    todo.append(Arrangement(split_mode="none", devices=(), shares=(), ctx=opts.ctx, cache_type="f16"))
    todo += _variants(shape, rig, opts)
    todo += _ot_hybrids(shape, rig, opts)
    for item in todo:
        if isinstance(item, tuple):
            cands.append(refused(*item))
            continue
        key = (
            item.split_mode,
            tuple(d.label for d in item.devices),
            tuple(round(s, 3) for s in item.shares),
            item.cache_type,
            item.cpu_layers,
            item.ot_layers,
            item.ot_device.label if item.ot_device else "",
        )
        if key in seen:
            continue
        seen.add(key)
        c = evaluate(shape, item, rig, ctx_limit=limit)
        if not c.fits and item.split_mode == "layer" and item.ts_rule != "bandwidth":
            spill = _with_cpu_layers(shape, item, rig)
            if spill is not None:
                cands.append(evaluate(shape, spill, rig, ctx_limit=limit))
        cands.append(c)
    if rig.devices:
        row = Arrangement(
            split_mode="row", devices=rig.devices, shares=_norm([1.0] * len(rig.devices)), ctx=opts.ctx
        )
        cands.append(refused(row, ROW_REASON))
    cands.sort(key=_rank)
    return cands[: opts.top] if opts.top else cands


def _rank(c: Candidate) -> tuple[int, int, int]:
    """Fits first; then decode speed, ties within 1 % broken by the larger context."""
    if c.refused:
        return (3, 0, 0)
    assert c.speed is not None
    tps = max(c.speed.decode_tps, 1e-9)
    return (0 if c.fits else (1 if c.max_ctx else 2), -round(math.log(tps) / math.log(1.01)), -c.max_ctx)
