"""smoke.kld: the parser against REAL llama-perplexity output, the thresholds per kind."""

from __future__ import annotations

import math

import pytest

from patchkit.smoke import kld
from tests.fixtures.paths import FIXTURES

DATA = FIXTURES / "data" / "kld"


def _stats(name: str) -> kld.KldStats:
    got = kld.parse_kld((DATA / name).read_text(encoding="utf-8"))
    assert got is not None
    return got


def test_parse_real_outputs() -> None:
    same = _stats("rpc-82bb485.txt")
    assert (same.mean_kld, same.top1_pct) == (0.0, 100.0)
    tensor = _stats("tensor-82bb485.txt")
    assert 0.001 < tensor.mean_kld < 0.01 and 90.0 < tensor.top1_pct < 99.0
    assert tensor.max_kld > tensor.mean_kld and tensor.rms_dp_pct is not None
    wrong = _stats("rms-norm-divisor-82bb485.txt")
    assert wrong.mean_kld > 4 * tensor.mean_kld and wrong.top1_pct < tensor.top1_pct


@pytest.mark.parametrize(
    "text",
    [
        "",
        "perplexity: calculating perplexity over 20 chunks\n[1]12.3,[2]14.5\n",
        "kl_divergence: failed to open /tmp/base.bin\n",
        "Mean    KLD:   0.001 ±   0.0001\n",  # cut short: no max, no top-1
    ],
)
def test_no_statistics_is_none(text: str) -> None:
    assert kld.parse_kld(text) is None


def test_nan_fails_every_kind() -> None:
    nan = kld.parse_kld(
        "Mean    KLD:        nan ±        nan\nMaximum KLD:        nan\nSame top p:    nan ±   nan %\n"
    )
    assert nan is not None and math.isnan(nan.mean_kld)
    assert not any(kld.judge("x", kind, nan).passed for kind in kld.THRESHOLDS)


def test_thresholds_separate_the_real_numbers_with_a_margin() -> None:
    same, tensor, wrong = (_stats(f"{n}-82bb485.txt") for n in ("rpc", "tensor", "rms-norm-divisor"))
    assert kld.judge("rpc", "same-math", same).passed
    assert not kld.judge("tensor", "same-math", tensor).passed  # tensor split is not "same math"
    assert kld.judge("tensor", "tensor-split", tensor).passed
    for kind in kld.THRESHOLDS:
        assert not kld.judge("wrong", kind, wrong).passed, kind
    # the margin: both the correct and the wrong numbers are >= 2x away from the limit
    for kind in ("tensor-split", "cross-build"):
        t = kld.THRESHOLDS[kind]
        assert tensor.mean_kld * 2 <= t.max_mean_kld <= wrong.mean_kld / 2, kind
        assert wrong.top1_pct < t.min_top1_pct < tensor.top1_pct, kind


def test_summary_is_what_a_person_reads() -> None:
    rec = kld.judge(
        "tensor split over two",
        "tensor-split",
        kld.KldStats(mean_kld=0.003897, max_kld=0.0753, top1_pct=95.785),
    )
    assert kld.summary(rec) == "tensor split over two: mean KLD 0.0039, max 0.075, top-1 95.8 %"
    bad = kld.judge(
        "CPU vs the reference's CPU", "cross-build", kld.KldStats(mean_kld=0.06, max_kld=0.9, top1_pct=88.0)
    )
    assert kld.summary(bad).endswith("(FAIL: cross-build allows mean <= 0.015, top-1 >= 93 %)")


def test_the_committed_text_is_long_enough_for_many_chunks() -> None:
    text = kld.text_path().read_text(encoding="utf-8")
    assert 10_000 < len(text.encode()) < 20_000  # ~2,700 tokens: ~20 chunks of -c 128
    assert text.isascii()
