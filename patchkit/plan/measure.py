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
import statistics
from collections.abc import Callable
from pathlib import Path

from patchkit.core.errors import SmokeError, ToolMissing
from patchkit.core.proc import run
from patchkit.plan.arrangement import Arrangement
from patchkit.plan.devices import Device
from patchkit.plan.model import ModelShape
from patchkit.plan.speed import PROMPT, Speed, speed

__all__ = ["Measured", "affine_solve", "attribute", "bench_argv", "learn_device", "parse_bench", "run_bench"]


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
    n_prompt: int = PROMPT,
) -> list[str]:
    """llama-bench arguments for ``arr`` (its lists are ``/``-separated)."""
    srv = arr.command(str(model), n_layer=n_layer, rig=rig)
    opts = {srv[i]: srv[i + 1] for i in range(1, len(srv) - 1) if srv[i].startswith("-")}
    argv = [
        str(bench),
        "-m",
        str(model),
        "-p",
        str(n_prompt),
        "-n",
        str(n_gen),
        "-r",
        str(reps),
        "-o",
        "json",
    ]
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
    return parse_bench(res.stdout, argv, last_line=res.last_line())


def parse_bench(text: str, argv: list[str], *, last_line: str = "") -> Measured:
    """llama-bench's ``-o json`` output: the decode and prompt tok/s."""
    try:
        rows = json.loads(text)
    except ValueError:
        raise SmokeError(f"llama-bench printed no JSON: {last_line}") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise SmokeError("llama-bench's JSON is not a list of tests")
    tg = [_rate(r) for r in rows if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0]
    pp = [_rate(r) for r in rows if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0]
    if not tg or not pp:
        raise SmokeError("llama-bench's JSON has no pp and tg rows")
    return Measured(decode_tps=tg[0], prompt_tps=pp[0], argv=tuple(argv))


def _rate(row: dict[str, object]) -> float:
    """A test's tok/s: the median of its repetitions (one slow repetition on a busy machine
    moves the mean, not the median), else llama-bench's mean."""
    samples = row.get("samples_ts")
    if isinstance(samples, list) and samples and all(isinstance(x, (int, float)) for x in samples):
        return float(statistics.median(samples))
    return float(row["avg_ts"])  # type: ignore[arg-type]


def affine_solve(f: Callable[[float], float], target: float, x0: float) -> float:
    """The x with f(x) = target, for f affine in x (two evaluations); x0 where f(x0) > 0."""
    x0 = x0 if x0 > 0 else 1e-5
    y1, y2 = f(x0), f(2 * x0)
    slope = (y2 - y1) / x0
    if slope == 0:
        return x0
    return x0 + (target - y1) / slope


def learn_device(
    shape: ModelShape,
    arr: Arrangement,
    host: Device,
    measured: Measured,
    *,
    at_ctx: int | None = None,
    n_prompt: int = PROMPT,
) -> tuple[float, float]:
    """The (GB/s, prompt TFLOP/s) that make ``arr``'s one device match ``measured``: the
    speed model's time per token is affine in 1/bandwidth (and prompt time in 1/FLOP/s),
    everything else in it (layer and graph costs, the wire) as it predicts them."""
    d = arr.devices[0] if arr.devices else host

    def with_dev(nd: Device) -> tuple[Arrangement, Device]:
        if not arr.devices:
            return arr, nd
        return dataclasses.replace(arr, devices=(nd, *arr.devices[1:])), host

    def t_decode(inv_bw: float) -> float:
        a, h = with_dev(dataclasses.replace(d, calibrated_bw_gbs=1 / inv_bw / 1e9))
        return 1 / speed(shape, a, host=h, at_ctx=at_ctx).decode_tps

    key = "fp32_tflops" if d.kind == "cpu" else "fp16_tflops"

    def t_prompt(inv_tf: float) -> float:
        nd = (
            dataclasses.replace(d, fp32_tflops=1 / inv_tf)
            if d.kind == "cpu"
            else dataclasses.replace(d, fp16_tflops=1 / inv_tf)
        )
        a, h = with_dev(nd)
        return n_prompt / speed(shape, a, host=h, at_ctx=at_ctx, n_prompt=n_prompt).prompt_tps

    inv_bw = affine_solve(t_decode, 1 / measured.decode_tps, 1 / d.effective_bw)
    bw = 1 / inv_bw / 1e9 if inv_bw > 0 else d.effective_bw / 1e9 * 10
    inv_tf = affine_solve(t_prompt, n_prompt / measured.prompt_tps, 1 / getattr(d, key))
    tf = 1 / inv_tf if inv_tf > 0 else getattr(d, key) * 10
    return bw, tf * _pp_eff(d)


def _pp_eff(d: Device) -> float:
    from patchkit.plan.speed import PP_EFFICIENCY

    return PP_EFFICIENCY["cpu" if d.kind == "cpu" else "gpu"]


def attribute(sp: Speed) -> str:
    """The term of a prediction that carries the most of a token's time: the one a large
    miss names."""
    parts = dict(sp.device_s)
    for lk in sp.links:
        parts[f"link {lk.host} ({lk.round_trips_per_token:.0f} round trips, {lk.mb_per_token:.3g} MB)"] = (
            lk.seconds_per_token
        )
    return max(parts, key=lambda k: parts[k]) if parts else ""
