"""build-info.json: the kld / speed measurements of smoke checks, and old files still load."""

from __future__ import annotations

import json
import re

import pytest

from patchkit.core.errors import ConfigError
from patchkit.spec.buildinfo import BuildInfo, CheckResult, CheckStatus, KldRecord, SpeedRecord
from tests.fixtures.buildinfo import build_info_json

KLD = {
    "setup": "tensor split over two",
    "kind": "tensor-split",
    "mean_kld": 0.003897,
    "max_kld": 0.0753,
    "top1_pct": 95.785,
    "max_mean_kld": 0.015,
    "min_top1_pct": 93,
    "passed": True,
}
SPEED = {
    "test": "decode tg16",
    "tps": 114.2,
    "samples": 9,
    "reference_tps": 113.0,
    "ratio": 1.0106,
    "tolerance": 0.25,
    "noise": 0.02,
    "passed": True,
}


def _with_checks(*checks: dict) -> dict:
    return build_info_json(smoke={"status": "passed", "checks": list(checks)})


def test_an_old_file_without_measurements_loads_and_writes_back_the_same() -> None:
    old = _with_checks({"name": "generate", "status": "pass", "why": "ok", "seconds": 1.5})
    info = BuildInfo.from_json(old)
    assert info.smoke is not None
    c = info.smoke.checks[0]
    assert (c.model, c.kld, c.speed) == ("", (), ())
    assert info.to_json()["smoke"] == old["smoke"]  # no new keys appear


def test_measurements_round_trip() -> None:
    data = _with_checks(
        {
            "name": "kld",
            "status": "pass",
            "why": "w",
            "seconds": 20,
            "model": "m.gguf sha256=" + "ab" * 32,
            "kld": [KLD],
        },
        {
            "name": "speed",
            "status": "pass",
            "why": "w",
            "seconds": 9,
            "model": "m.gguf sha256=" + "ab" * 32,
            "speed": [SPEED],
        },
    )
    info = BuildInfo.from_json(json.loads(json.dumps(data)))
    assert info.smoke is not None
    kld, spd = info.smoke.checks
    assert kld.kld == (
        KldRecord(
            setup="tensor split over two",
            kind="tensor-split",
            mean_kld=0.003897,
            max_kld=0.0753,
            top1_pct=95.785,
            max_mean_kld=0.015,
            min_top1_pct=93.0,
            passed=True,
        ),
    )
    assert spd.speed[0].ratio == 1.0106 and spd.speed[0].passed is True
    assert BuildInfo.from_json(info.to_json()) == info
    alone = CheckResult(
        name="speed",
        status=CheckStatus.SKIP,
        why="no ref",
        speed=(SpeedRecord(test="decode tg16", tps=110.0, samples=3),),
    )
    assert CheckResult.to_json(alone)["speed"][0]["passed"] is None


@pytest.mark.parametrize(
    ("key", "bad", "dotted"),
    [
        ("kld", [dict(KLD, mean_kld="0.1")], "smoke.checks[0].kld[0].mean_kld"),
        ("kld", [dict(KLD, passed=1)], "smoke.checks[0].kld[0].passed"),
        ("kld", {"a": 1}, "smoke.checks[0].kld"),
        ("speed", [dict(SPEED, samples=1.5)], "smoke.checks[0].speed[0].samples"),
        ("speed", [dict(SPEED, ratio=[1])], "smoke.checks[0].speed[0].ratio"),
    ],
)
def test_a_wrong_measurement_is_named(key: str, bad: object, dotted: str) -> None:
    data = _with_checks({"name": "kld", "status": "pass", "why": "w", key: bad})
    with pytest.raises(ConfigError, match=re.escape(dotted) + " is missing"):
        BuildInfo.from_json(data)
