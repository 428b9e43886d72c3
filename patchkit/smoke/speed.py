"""The speed check: prompt and decode tokens/s of this build against ``--reference``.

Same real model, same threads, same llama-bench arguments for both builds, run in
alternating rounds (this, reference, this, ...) so that a load spike on the machine hits
both. Each test's samples (``samples_ts`` of ``-o json``) give a median per build; the
noise is the larger relative median absolute deviation of the two sample sets. A test
fails when this build's median is below the reference's by more than the tolerance:
``max(MIN_TOLERANCE, NOISE_FACTOR x noise)``, capped at ``MAX_TOLERANCE`` (so a 2x drop
always fails, however noisy the machine). Without ``--reference`` the check measures this
build and skips (nothing to compare with); the numbers are recorded all the same.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from patchkit.smoke.env import SmokeEnv
from patchkit.smoke.llama_output import telling_line
from patchkit.spec.buildinfo import CheckResult, CheckStatus, SpeedRecord

__all__ = [
    "MAX_TOLERANCE",
    "MIN_TOLERANCE",
    "NOISE_FACTOR",
    "bench_args",
    "check_speed",
    "compare",
    "parse_bench",
    "rel_mad",
]

N_PROMPT, N_GEN, REPS = 64, 16, 3
ROUNDS_REFERENCE = 3  # alternating rounds with a reference: 9 samples per build and test
ROUNDS_ALONE = 1
MIN_TOLERANCE = 0.25
NOISE_FACTOR = 3.0
MAX_TOLERANCE = 0.5
_MAX_OUTPUT = 4 << 20


def bench_args(model: Path, threads: int) -> list[str]:
    return [
        "-m",
        str(model),
        "-p",
        str(N_PROMPT),
        "-n",
        str(N_GEN),
        "-r",
        str(REPS),
        "-t",
        str(threads),
        "-o",
        "json",
    ]


def parse_bench(text: str) -> dict[str, list[float]]:
    """{"prompt pp64": [tok/s, ...], "decode tg16": [...]} from llama-bench ``-o json``
    (ValueError if it is not that)."""
    text = text[:_MAX_OUTPUT]
    start = text.find("[")
    if start < 0:
        raise ValueError("no JSON array in llama-bench's output")
    data = json.JSONDecoder().raw_decode(text[start:])[0]
    if not isinstance(data, list):
        raise ValueError("llama-bench's JSON is not a list of results")
    out: dict[str, list[float]] = {}
    for rec in data:
        if not isinstance(rec, dict):
            raise ValueError("llama-bench's JSON holds a non-object result")
        n_prompt, n_gen = rec.get("n_prompt"), rec.get("n_gen")
        samples = rec.get("samples_ts")
        if not isinstance(samples, list) or not samples:
            avg = rec.get("avg_ts")
            samples = [avg] if isinstance(avg, (int, float)) else []
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in samples) or not samples:
            raise ValueError("a llama-bench result has no tokens/s samples")
        if isinstance(n_prompt, int) and n_prompt > 0 and not n_gen:
            key = f"prompt pp{n_prompt}"
        elif isinstance(n_gen, int) and n_gen > 0 and not n_prompt:
            key = f"decode tg{n_gen}"
        else:
            continue
        out.setdefault(key, []).extend(float(x) for x in samples)
    if not out:
        raise ValueError("llama-bench printed no prompt or decode result")
    return out


def rel_mad(samples: Sequence[float]) -> float:
    """Median absolute deviation relative to the median (0 for a single sample)."""
    med = statistics.median(samples)
    if med <= 0:
        return 1.0
    return statistics.median(abs(x - med) for x in samples) / med


def compare(test: str, this: Sequence[float], ref: Sequence[float] | None) -> SpeedRecord:
    """One test's verdict: fail when this build's median drops below the reference's by
    more than the noise-aware tolerance."""
    tps = statistics.median(this)
    if not ref:
        return SpeedRecord(test=test, tps=round(tps, 2), samples=len(this), noise=round(rel_mad(this), 4))
    ref_tps = statistics.median(ref)
    noise = max(rel_mad(this), rel_mad(ref))
    tol = min(MAX_TOLERANCE, max(MIN_TOLERANCE, NOISE_FACTOR * noise))
    ratio = tps / ref_tps if ref_tps > 0 else 0.0
    return SpeedRecord(
        test=test,
        tps=round(tps, 2),
        samples=len(this),
        reference_tps=round(ref_tps, 2),
        ratio=round(ratio, 4),
        tolerance=round(tol, 4),
        noise=round(noise, 4),
        passed=ratio >= 1.0 - tol,
    )


def summary(r: SpeedRecord) -> str:
    s = f"{r.test} {r.tps:.1f} tok/s"
    if r.reference_tps is None or r.ratio is None or r.tolerance is None:
        return s
    s += f" vs {r.reference_tps:.1f} ({r.ratio:.2f}x, tolerance -{100 * r.tolerance:.0f} %)"
    return s if r.passed else s + " FAIL: slower than the reference"


def _bench(env: SmokeEnv, args: list[str]) -> dict[str, list[float]] | str:
    exe = env.exe("llama-bench")
    if exe is None:
        return "no llama-bench"
    r = env.run(exe, *args)
    if not r.ok:
        return f"llama-bench {r.brief()}: {telling_line(r)}"
    try:
        return parse_bench(r.stdout)
    except ValueError as e:
        return str(e)


def check_speed(env: SmokeEnv) -> CheckResult:
    start = time.monotonic()

    def done(status: CheckStatus, why: str, records: tuple[SpeedRecord, ...] = ()) -> CheckResult:
        return CheckResult(
            name="speed",
            status=status,
            why=why,
            seconds=time.monotonic() - start,
            model=env.model_label if records else "",
            speed=records,
        )

    if env.emulation is not None:
        return done(
            CheckStatus.SKIP,
            f"under {env.emulation.describe()}: an emulated CPU's speed says nothing of the build",
        )
    if env.exe("llama-bench") is None:
        return done(CheckStatus.SKIP, "llama-bench is not in this build")
    if env.model is None:
        return done(CheckStatus.SKIP, env.model_why)
    ref = env.reference_env()
    if ref is not None and ref.exe("llama-bench") is None:
        return done(CheckStatus.SKIP, "the reference build has no llama-bench")
    threads = max(1, min(os.cpu_count() or 1, 16))
    args = bench_args(env.model, threads)
    this: dict[str, list[float]] = {}
    other: dict[str, list[float]] = {}
    for _ in range(ROUNDS_REFERENCE if ref is not None else ROUNDS_ALONE):
        for e, into, label in ((env, this, "this build"), (ref, other, "the reference")):
            if e is None:
                continue
            got = _bench(e, args)
            if isinstance(got, str):
                return done(CheckStatus.FAIL, f"{label}: {got}")
            for k, v in got.items():
                into.setdefault(k, []).extend(v)
    records = tuple(
        compare(test, this[test], other.get(test) if ref is not None else None) for test in sorted(this)
    )
    said = ", ".join(summary(r) for r in records)
    said = re.sub(r"\s+", " ", said)
    where = f"same model, {threads} threads, median of {records[0].samples}"
    if ref is None:
        return done(CheckStatus.SKIP, f"no --reference to compare with; measured {said} ({where})", records)
    failed = [r for r in records if not r.passed]
    missing = [t for t in other if t not in this]
    if missing:
        return done(CheckStatus.FAIL, f"this build did not run {', '.join(missing)}", records)
    noisy = max((r.noise or 0.0) for r in records)
    if any(r.tolerance is not None and r.tolerance >= MAX_TOLERANCE for r in records):
        where += (
            f"; a noisy machine (relative MAD up to {100 * noisy:.0f} %): only a drop "
            f"beyond {100 * MAX_TOLERANCE:.0f} % is judged"
        )
    return done(CheckStatus.FAIL if failed else CheckStatus.PASS, f"{said} ({where})", records)
