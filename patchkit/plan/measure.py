"""Measuring arrangements with llama-bench, and learning from it.

``bench_argv`` is the llama-bench command of an arrangement (the same device names, split,
``-ts``, ``-ot`` and cache types as its llama-server line); ``run_bench`` runs it once
(``-o json``) and returns the decode and prompt tok/s. ``learn_device`` turns one measured
single-device run into that device's effective bandwidth (and prompt FLOP/s): the speed
model solved for the one unknown, with everything else in it (layer costs, the wire) as it
predicts them. ``attribute`` names the term of a prediction that a miss most likely sits in.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from patchkit.core.errors import SmokeError, ToolMissing
from patchkit.core.proc import run
from patchkit.plan.arrangement import Arrangement
from patchkit.plan.devices import Device
from patchkit.plan.model import ModelShape
from patchkit.plan.speed import LAYER_COST_S, PROMPT, Speed, speed

__all__ = ["Measured", "attribute", "bench_argv", "learn_device", "run_bench"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Measured:
    decode_tps: float
    prompt_tps: float
    argv: tuple[str, ...]


def bench_argv(
    bench: Path,
    model: Path,
    arr: Arrangement,
    *,
    n_layer: int,
    rig: tuple[Device, ...],
    n_gen: int = 32,
    reps: int = 3,
    threads: int = 0,
) -> list[str]:
    """llama-bench arguments for ``arr`` (its lists are ``/``-separated)."""
    srv = arr.command(str(model), n_layer=n_layer, rig=rig)
    opts = {srv[i]: srv[i + 1] for i in range(1, len(srv) - 1) if srv[i].startswith("-")}
    argv = [str(bench), "-m", str(model), "-p", str(PROMPT), "-n", str(n_gen), "-r", str(reps), "-o", "json"]
    if "--rpc" in opts:
        argv += ["--rpc", opts["--rpc"]]
    if arr.split_mode == "none":
        return [*argv, "-ngl", "0", *(["-t", str(threads)] if threads else [])]
    argv += ["-dev", opts["-dev"].replace(",", "/"), "-sm", arr.split_mode, "-ngl", opts["-ngl"]]
    if "-ts" in opts:
        argv += ["-ts", opts["-ts"].replace(",", "/")]
    argv += ["-fa", "1" if arr.flash_attn else "0"]
    if "-ctk" in opts:
        argv += ["-ctk", opts["-ctk"], "-ctv", opts["-ctv"]]
    if "-ot" in opts:
        argv += ["-ot", opts["-ot"]]
    if threads:
        argv += ["-t", str(threads)]
    return argv


def run_bench(argv: list[str], *, timeout: float = 900) -> Measured:
    if not Path(argv[0]).is_file():
        raise ToolMissing(f"no llama-bench at {argv[0]}", hint="point --bin at a build's bin/ folder")
    res = run(argv, timeout=timeout)
    if not res.ok:
        raise SmokeError(f"llama-bench failed ({res.brief()}): {res.last_line()}")
    try:
        rows = json.loads(res.stdout)
    except ValueError:
        raise SmokeError(f"llama-bench printed no JSON: {res.last_line()}") from None
    tg = [r["avg_ts"] for r in rows if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0]
    pp = [r["avg_ts"] for r in rows if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0]
    if not tg or not pp:
        raise SmokeError("llama-bench's JSON has no pp and tg rows")
    return Measured(decode_tps=float(tg[0]), prompt_tps=float(pp[0]), argv=tuple(argv))


def learn_device(
    shape: ModelShape, arr: Arrangement, host: Device, measured: Measured
) -> tuple[float, float]:
    """The (GB/s, prompt TFLOP/s) that make ``arr``'s one device match ``measured``."""
    d = arr.devices[0] if arr.devices else host
    sp = speed(shape, arr, host=host)
    t_dev = sp.device_s.get(d.label, 0.0)
    layers = shape.n_layer + 1
    fixed = layers * LAYER_COST_S["cpu" if d.kind == "cpu" else "gpu"]
    other = 1.0 / sp.decode_tps - t_dev
    nbytes = (t_dev - fixed) * d.effective_bw
    want = 1.0 / measured.decode_tps - other - fixed
    if want <= 0:
        want = (1.0 / measured.decode_tps) * 0.5
    bw = nbytes / want / 1e9
    flops_pred = _flops_of(d)
    t_pp_pred = PROMPT / sp.prompt_tps
    t_pp = PROMPT / measured.prompt_tps
    return bw, flops_pred * t_pp_pred / t_pp / 1e12 if t_pp > 0 else 0.0


def _flops_of(d: Device) -> float:
    from patchkit.plan.speed import PP_EFFICIENCY

    if d.kind == "cpu":
        return d.fp32_tflops * 1e12 * PP_EFFICIENCY["cpu"]
    return d.fp16_tflops * 1e12 * PP_EFFICIENCY["gpu"]


def attribute(sp: Speed) -> str:
    """The term of a prediction that carries the most of a token's time: the one a large
    miss names."""
    parts = dict(sp.device_s)
    for lk in sp.links:
        parts[f"link {lk.host} ({lk.round_trips_per_token:.0f} round trips, {lk.mb_per_token:.3g} MB)"] = (
            lk.seconds_per_token
        )
    return max(parts, key=lambda k: parts[k]) if parts else ""
