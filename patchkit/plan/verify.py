"""`plan --calibrate` and `plan --verify N`: measure arrangements on the devices that are
here (this machine's CPU, RPC servers it reaches), set the measurements beside the
predictions, and learn from them.

- calibrate: each such device alone, once (llama-bench), gives its effective bandwidth and
  prompt FLOP/s (``measure.learn_device``), written to the cache's calibration.
- verify: the top N arrangements and llama.cpp's default one (layer split over every device,
  RPC devices first, ``-ts`` by free memory); a miss over ``MISS`` names the term that
  carries most of the prediction and, when that is one device, re-learns that device from
  the run (the calibration is updated in the cache).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from patchkit.plan import calibration as cal
from patchkit.plan.arrangement import Arrangement
from patchkit.plan.measure import Measured, affine_solve, attribute, bench_argv, learn_device, run_bench
from patchkit.plan.model import ModelShape
from patchkit.plan.planner import Candidate, Rig, evaluate
from patchkit.plan.speed import hop_cost, speed

__all__ = ["MISS", "VerifyRow", "calibrate", "checkable", "default_arrangement", "verify"]

MISS = 0.25  # a prediction this far off says which term was wrong

Runner = Callable[[list[str]], Measured]


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifyRow:
    description: str
    predicted_decode: float
    measured_decode: float
    predicted_prompt: float
    measured_prompt: float
    miss_term: str  # "" when within MISS
    argv: tuple[str, ...]

    @property
    def decode_ratio(self) -> float:
        return self.predicted_decode / self.measured_decode if self.measured_decode else 0.0

    @property
    def prompt_ratio(self) -> float:
        return self.predicted_prompt / self.measured_prompt if self.measured_prompt else 0.0


def checkable(arr: Arrangement) -> bool:
    """Whether every device the arrangement uses is here: the host CPU or an RPC server."""
    used = [*arr.devices, *([arr.ot_device] if arr.ot_device else [])]
    return arr.split_mode != "row" and all(d.remote for d in used)


def default_arrangement(rig: Rig, ctx: int) -> Arrangement:
    """What llama.cpp does without -dev/-sm/-ts: layer split over every device, RPC devices
    first (src/llama.cpp), split points by free memory."""
    devs = tuple([d for d in rig.devices if d.remote] + [d for d in rig.devices if not d.remote])
    if not devs:
        return Arrangement(split_mode="none", devices=(), shares=(), ctx=ctx)
    free = tuple(float(d.vram) for d in devs)
    total = sum(free)
    return Arrangement(
        split_mode="layer",
        devices=devs,
        shares=tuple(f / total for f in free),
        ts_values=tuple(round(f / (1 << 30), 2) for f in free),
        ts_rule="llama.cpp default",
        ctx=ctx,
    )


def _bench(
    shape: ModelShape, arr: Arrangement, rig: Rig, bench: Path, model: Path, runner: Runner | None, reps: int
) -> Measured:
    argv = bench_argv(bench, model, arr, n_layer=shape.n_layer, rig=rig.devices, reps=reps)
    return (runner or run_bench)(argv)


def calibrate(
    shape: ModelShape,
    rig: Rig,
    *,
    bench: Path,
    model: Path,
    ctx: int,
    store: Path,
    runner: Runner | None = None,
    reps: int = 3,
) -> list[str]:
    """Each device that is here, alone (its effective bandwidth and FLOP/s), and with two or
    more RPC devices a layer split over them (their fixed cost per token); saved to
    ``store``. One line per thing learned."""
    c = cal.load(store)
    learned: list[str] = []
    targets = [d for d in rig.devices if d.remote]
    for d in [rig.host, *targets]:
        if d is rig.host:
            arr = Arrangement(split_mode="none", devices=(), shares=(), ctx=ctx)
        else:
            arr = Arrangement(split_mode="layer", devices=(d,), shares=(1.0,), ctx=ctx)
        m = _bench(shape, arr, rig, bench, model, runner, reps)
        bw, tf = learn_device(shape, arr, rig.host, m)
        c.devices[d.label] = cal.DeviceCal(
            bw_gbs=round(bw, 3), pp_tflops=round(tf, 4), source="plan --calibrate", when=cal.stamp()
        )
        learned.append(f"{d.label}: {bw:.3g} GB/s effective, prompt {tf:.3g} TFLOP/s")
    if len(targets) >= 2:  # a layer split over them: the fixed cost each adds per token
        devs = tuple(dataclasses.replace(d, calibrated_bw_gbs=c.devices[d.label].bw_gbs) for d in targets)
        arr = Arrangement(
            split_mode="layer",
            devices=devs,
            shares=tuple(1 / len(devs) for _ in devs),
            ts_values=tuple(1.0 for _ in devs),
            ctx=ctx,
        )
        m = _bench(shape, arr, rig, bench, model, runner, reps)

        def t(h: float) -> float:
            a = dataclasses.replace(arr, devices=tuple(dataclasses.replace(d, hop_cost_s=h) for d in devs))
            return 1 / speed(shape, a, host=rig.host).decode_tps

        hop = max(0.0, affine_solve(t, 1 / m.decode_tps, hop_cost(devs[0])))
        for d in targets:
            c.devices[d.label] = dataclasses.replace(c.devices[d.label], hop_cost_s=round(hop, 7))
        learned.append(f"{len(targets)} remote devices in a layer split: {hop * 1e6:.0f} us each per token")
    cal.save(store, c)
    return learned


def verify(
    shape: ModelShape,
    rig: Rig,
    cands: list[Candidate],
    n: int,
    *,
    bench: Path,
    model: Path,
    ctx: int,
    store: Path,
    runner: Runner | None = None,
    reps: int = 3,
) -> list[VerifyRow]:
    """The top ``n`` checkable arrangements and llama.cpp's default, measured."""
    picked = [c.arrangement for c in cands if c.fits and checkable(c.arrangement)][:n]
    default = default_arrangement(rig, ctx)
    if checkable(default) and default.devices:
        picked.append(default)
    c = cal.load(store)
    rows = []
    for arr in picked:
        pred = evaluate(shape, arr, rig, ctx_limit=ctx)
        sp = pred.speed
        assert sp is not None
        m = _bench(shape, arr, rig, bench, model, runner, reps)
        miss = ""
        if abs(sp.decode_tps / m.decode_tps - 1) > MISS:
            miss = attribute(sp)
            dev = next((d for d in [*arr.devices, rig.host] if d.label == miss), None)
            if dev is not None and len(arr.devices) <= 1:
                bw, tf = learn_device(shape, arr, rig.host, m)
                c.devices[dev.label] = cal.DeviceCal(
                    bw_gbs=round(bw, 3), pp_tflops=round(tf, 4), source="plan --verify", when=cal.stamp()
                )
                miss += f" (its bandwidth re-learned: {bw:.3g} GB/s)"
        rows.append(
            VerifyRow(
                description=arr.describe(),
                predicted_decode=sp.decode_tps,
                measured_decode=m.decode_tps,
                predicted_prompt=sp.prompt_tps,
                measured_prompt=m.prompt_tps,
                miss_term=miss,
                argv=m.argv,
            )
        )
    cal.save(store, c)
    return rows
