"""The real-model checks (kld, speed) on real llama.cpp builds made by patchkit.

Skipped unless PATCHKIT_REALBUILD points at a build output dir and a real model is at hand
(`patchkit model get smollm2`, or PATCHKIT_MODEL). Optional:
  PATCHKIT_REALBUILD_REFERENCE=out/<other>   another build (a Windows build's Linux twin,
                                             the vanilla build): kld and speed against it
  PATCHKIT_REALBUILD_PERTURBED=out/<neg>     the negative control, built from
      tests/fixtures/data/negative-control (rms_norm's divisor wrong): its kld check
      against PATCHKIT_REALBUILD must fail while its own setups pass
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from patchkit.core.errors import ConfigError
from patchkit.smoke import kld
from patchkit.smoke.realmodel import find_model
from patchkit.smoke.runner import run_smoke
from patchkit.spec.buildinfo import read_build_info

REAL = os.environ.get("PATCHKIT_REALBUILD")
REFERENCE = os.environ.get("PATCHKIT_REALBUILD_REFERENCE")
PERTURBED = os.environ.get("PATCHKIT_REALBUILD_PERTURBED")
pytestmark = [
    pytest.mark.realbuild,
    pytest.mark.skipif(not REAL, reason="set PATCHKIT_REALBUILD=out/<recipe> (a real build)"),
]


def _tools(out: Path) -> tuple[Path, ...]:
    info = read_build_info(out)
    return (Path(info.build_dir) / "bin",) if info.build_dir else ()


def _model_at_import() -> Path | None:
    # looked up when the module is imported: the hermetic conftest later gives every test an
    # empty cache and no PATCHKIT_MODEL, so this is the user's real cache / setting
    try:
        found = find_model(env=os.environ) if REAL else None
    except ConfigError:
        return None
    return found.path if found else None


MODEL = _model_at_import()


@pytest.fixture
def model() -> Path:
    if MODEL is None:
        pytest.skip("no real model: run `patchkit model get smollm2` (or set PATCHKIT_MODEL)")
    return MODEL


def _check(report, name: str):
    return next(c for c in report.checks if c.name == name)


def test_kld_of_every_setup_is_within_its_limits(model: Path) -> None:
    out = Path(REAL or ".")
    report = run_smoke(
        out, env=dict(os.environ), only=("kld",), tool_dirs=_tools(out), record=False, model=model
    )
    c = _check(report, "kld")
    assert c.status == "pass", c.why
    kinds = {r.setup: r for r in c.kld}
    assert kinds["one RPC server"].mean_kld <= kld.THRESHOLDS["same-math"].max_mean_kld
    assert "tensor split over two" in kinds and "real model says:" in c.why


@pytest.mark.skipif(not REFERENCE, reason="set PATCHKIT_REALBUILD_REFERENCE=out/<other build>")
def test_against_the_reference_build(model: Path) -> None:
    out, ref = Path(REAL or "."), Path(REFERENCE or ".")
    report = run_smoke(
        out,
        env=dict(os.environ),
        only=("kld", "speed"),
        tool_dirs=_tools(out),
        record=False,
        model=model,
        reference=ref,
    )
    c, s = _check(report, "kld"), _check(report, "speed")
    assert c.status == "pass", c.why
    assert c.kld[-1].kind == "cross-build" and c.kld[-1].passed
    assert s.status == "pass", s.why


@pytest.mark.skipif(not PERTURBED, reason="set PATCHKIT_REALBUILD_PERTURBED=out/<negative control>")
def test_negative_control_fails_against_a_correct_build(model: Path) -> None:
    bad, good = Path(PERTURBED or "."), Path(REAL or ".")
    report = run_smoke(
        bad,
        env=dict(os.environ),
        only=("kld",),
        tool_dirs=_tools(bad),
        record=False,
        model=model,
        reference=good,
    )
    c = _check(report, "kld")
    assert c.status == "fail" and report.status == "failed", c.why
    cross = c.kld[-1]
    assert cross.kind == "cross-build" and not cross.passed
    assert all(r.passed for r in c.kld[:-1])  # it agrees with itself: only the reference catches it
    t = kld.THRESHOLDS["cross-build"]
    assert cross.mean_kld >= 2 * t.max_mean_kld, "the margin is too thin"
