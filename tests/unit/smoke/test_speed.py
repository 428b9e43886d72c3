"""smoke.speed: llama-bench's JSON, medians, the noise-aware tolerance (no process runs)."""

from __future__ import annotations

import json

import pytest

from patchkit.smoke import speed
from tests.fixtures.paths import BENCH_DATA


def test_parse_real_llama_bench_json() -> None:
    got = speed.parse_bench((BENCH_DATA / "layer-2rpc-82bb485.json").read_text())
    assert got["prompt pp64"] == [16073.8, 63681.3, 60674.0]
    assert set(got) == {"prompt pp64", next(k for k in got if k.startswith("decode tg"))}
    # banners before the JSON (a logger on stdout) do not matter
    assert speed.parse_bench(
        "load_backend: x\n" + json.dumps([{"n_prompt": 0, "n_gen": 16, "avg_ts": 9.5}])
    ) == {"decode tg16": [9.5]}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no json",
        "{}",
        "[1]",
        '[{"n_prompt": 64, "n_gen": 0}]',
        '[{"n_prompt": 64, "n_gen": 0, "samples_ts": ["x"]}]',
        '[{"n_prompt": 64, "n_gen": 16, "samples_ts": [1.0]}]',
    ],
)
def test_parse_refuses_what_is_not_a_result(text: str) -> None:
    with pytest.raises(ValueError):
        speed.parse_bench(text)


def test_equal_speed_passes_and_a_big_drop_fails() -> None:
    ref = [100.0, 101.0, 99.0, 100.5, 98.0]
    same = speed.compare("decode tg16", [99.0, 100.0, 101.0], ref)
    assert (
        same.passed and same.tolerance == speed.MIN_TOLERANCE and same.ratio == pytest.approx(1.0, abs=0.02)
    )
    slow = speed.compare("decode tg16", [20.0, 21.0, 19.0], ref)  # 5x slower: what users shipped
    assert slow.passed is False and slow.ratio == pytest.approx(0.2)
    just = speed.compare("decode tg16", [76.0, 76.0, 76.0], ref)  # -24 %: within 25 %
    assert just.passed
    assert speed.compare("decode tg16", [74.0, 74.0, 74.0], ref).passed is False  # -26 %


def test_the_tolerance_grows_with_noise_but_a_2x_drop_always_fails() -> None:
    noisy_ref = [100.0, 60.0, 140.0, 100.0, 70.0, 130.0]  # rel. MAD 0.3
    r = speed.compare("prompt pp64", [65.0, 66.0, 64.0], noisy_ref)
    assert r.noise == pytest.approx(0.3) and r.tolerance == speed.MAX_TOLERANCE and r.passed
    assert speed.compare("prompt pp64", [45.0, 46.0, 44.0], noisy_ref).passed is False
    mid = speed.compare("prompt pp64", [100.0, 90.0, 110.0], [100.0, 100.0, 100.0])  # MAD 0.1
    assert mid.tolerance == pytest.approx(0.3)


def test_without_a_reference_it_only_measures() -> None:
    r = speed.compare("decode tg16", [10.0, 12.0, 11.0], None)
    assert (r.tps, r.samples, r.passed, r.reference_tps, r.ratio) == (11.0, 3, None, None, None)
    assert speed.summary(r) == "decode tg16 11.0 tok/s"


def test_summary_says_ratio_and_tolerance() -> None:
    r = speed.compare("decode tg16", [50.0], [100.0])
    assert speed.summary(r) == (
        "decode tg16 50.0 tok/s vs 100.0 (0.50x, tolerance -25 %) FAIL: slower than the reference"
    )


def test_rel_mad() -> None:
    assert speed.rel_mad([5.0]) == 0.0
    assert speed.rel_mad([10.0, 10.0, 13.0]) == 0.0
    assert speed.rel_mad([8.0, 10.0, 12.0]) == pytest.approx(0.2)
    assert speed.rel_mad([0.0, 0.0]) == 1.0
