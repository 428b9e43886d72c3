"""The real-model checks against fake binaries: kld (a fake llama-perplexity replaying
REAL output, tests/fixtures/data/kld) and speed (fake llama-bench), with --reference."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from patchkit.smoke import checks
from patchkit.smoke.runner import run_smoke
from tests.fixtures.buildinfo import build_info_json, patch_json
from tests.fixtures.paths import BENCH_DATA, FAKE_BENCH, FAKE_LLAMA, FIXTURES

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="fake binaries are POSIX scripts"),
]
KLD_DATA = FIXTURES / "data" / "kld"
ZERO, TENSOR, WRONG = (
    KLD_DATA / f for f in ("rpc-82bb485.txt", "tensor-82bb485.txt", "rms-norm-divisor-82bb485.txt")
)
TOOLS = ("llama-cli", "ggml-rpc-server", "llama-perplexity")


def make_out(
    root: Path,
    *,
    kld: list[tuple[str, Path]] | None = None,
    rates: tuple[float, float] = (300.0, 100.0),
    patches: tuple[str, ...] = (checks.GUARD_PATCH,),
) -> Path:
    out = root / "out"
    (out / "bin").mkdir(parents=True)
    for t in TOOLS:
        shutil.copy(FAKE_LLAMA, out / "bin" / t)
        os.chmod(out / "bin" / t, 0o755)
    shutil.copy(FAKE_BENCH, out / "bin" / "llama-bench")
    os.chmod(out / "bin" / "llama-bench", 0o755)
    table = kld if kld is not None else [("tensor", TENSOR), ("", ZERO)]
    (out / "bin" / "fake.json").write_text(
        json.dumps({"mode": "ok", "piddir": str(root / "pids"), "kld": [[k, str(f)] for k, f in table]})
    )
    (out / "bin" / "bench.json").write_text(
        json.dumps(
            {
                "help": str(BENCH_DATA / "help-82bb485.txt"),
                "record": str(BENCH_DATA / "layer-2rpc-82bb485.json"),
                "rates": {"": list(rates)},
                "calls": str(root / "calls.jsonl"),
            }
        )
    )
    info = build_info_json(
        patches=[patch_json(p) for p in patches],
        artifacts=[
            {"target": t, "type": "EXECUTABLE", "path": f"bin/{t}", "sha256": "00" * 32, "size": 1}
            for t in ("llama-cli", "ggml-rpc-server", "llama-bench")
        ],
    )
    (out / "build-info.json").write_text(json.dumps(info))
    return out


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "real.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00not really")
    return path


def _check(report, name: str):
    return next(c for c in report.checks if c.name == name)


def test_kld_setups_pass_and_are_recorded(tmp_path: Path, model: Path) -> None:
    out = make_out(tmp_path / "a")
    report = run_smoke(out, env=dict(os.environ), only=("kld",), model=model)
    kld = _check(report, "kld")
    assert kld.status == "pass", kld.why
    assert [(r.setup, r.kind, r.passed) for r in kld.kld] == [
        ("one RPC server", "same-math", True),
        ("layer split over two", "same-math", True),
        ("tensor split over two", "tensor-split", True),
    ]  # no -ot setup: patch 2 is not in it
    assert kld.kld[0].mean_kld == 0.0 and kld.kld[0].top1_pct == 100.0
    assert "tensor split over two: mean KLD 0.0032, max 0.036, top-1 96.1 %" in kld.why
    assert "one RPC server: mean KLD 0.0000, max 0.000, top-1 100.0 %" in kld.why
    assert "real model says: 'the mat and slept'" in kld.why
    assert kld.model.startswith("real.gguf sha256=")
    saved = json.loads((out / "build-info.json").read_text())["smoke"]["checks"]
    assert next(c for c in saved if c["name"] == "kld")["kld"][2]["mean_kld"] == pytest.approx(
        0.003196, abs=1e-6
    )
    pids = [int(p.name) for p in (tmp_path / "a" / "pids").iterdir()]
    assert len(pids) == 2  # two servers, reused by every setup, and all stopped
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_meta_ot_setup_runs_with_patch_2(tmp_path: Path, model: Path) -> None:
    out = make_out(tmp_path / "a", patches=(checks.GUARD_PATCH, checks.META_OT_PATCH))
    kld = _check(run_smoke(out, env=dict(os.environ), only=("kld",), model=model), "kld")
    assert kld.status == "pass", kld.why
    assert kld.kld[-1].setup == "tensor split + layer 5 -ot on a third"


def test_tensor_split_beyond_its_threshold_fails(tmp_path: Path, model: Path) -> None:
    out = make_out(tmp_path / "a", kld=[("tensor", WRONG), ("", ZERO)])
    report = run_smoke(out, env=dict(os.environ), only=("kld",), model=model)
    kld = _check(report, "kld")
    assert kld.status == "fail" and report.status == "failed"
    assert "tensor split over two: mean KLD" in kld.why and "FAIL: tensor-split allows" in kld.why


def test_negative_control_against_a_reference(tmp_path: Path, model: Path) -> None:
    """A build whose CPU math is wrong agrees with itself (every setup passes) but not with a
    correct reference: the cross-build comparison fails."""
    good = make_out(tmp_path / "good")
    bad = make_out(tmp_path / "bad", kld=[("reference", WRONG), ("tensor", TENSOR), ("", ZERO)])
    report = run_smoke(bad, env=dict(os.environ), only=("kld",), model=model, reference=good)
    kld = _check(report, "kld")
    assert kld.status == "fail"
    assert [r.passed for r in kld.kld] == [True, True, True, False]
    assert kld.kld[-1].kind == "cross-build" and "CPU vs the reference's CPU" in kld.why
    same = run_smoke(
        good, env=dict(os.environ), only=("kld",), model=model, reference=make_out(tmp_path / "twin")
    )
    assert _check(same, "kld").status == "pass"


def test_a_crashing_perplexity_run_fails_naming_the_setup(tmp_path: Path, model: Path) -> None:
    out = make_out(tmp_path / "a", kld=[("nothing matches", ZERO)])
    kld = _check(run_smoke(out, env=dict(os.environ), only=("kld",), model=model), "kld")
    assert kld.status == "fail" and kld.why.startswith("one RPC server: llama-perplexity exit 1")


def test_speed_against_a_reference(tmp_path: Path, model: Path) -> None:
    ref = make_out(tmp_path / "ref", rates=(300.0, 100.0))
    same = make_out(tmp_path / "same", rates=(290.0, 98.0))
    spd = _check(run_smoke(same, env=dict(os.environ), only=("speed",), model=model, reference=ref), "speed")
    assert spd.status == "pass", spd.why
    assert [(r.test, r.samples) for r in spd.speed] == [("decode tg16", 9), ("prompt pp64", 9)]
    calls = [json.loads(ln) for ln in (tmp_path / "same" / "calls.jsonl").read_text().splitlines()]
    ref_calls = [json.loads(ln) for ln in (tmp_path / "ref" / "calls.jsonl").read_text().splitlines()]
    assert len(calls) == len(ref_calls) == 3 and calls[0] == ref_calls[0]  # same args, threads
    slow = make_out(tmp_path / "slow", rates=(290.0, 20.0))  # decode 5x slower
    bad = _check(run_smoke(slow, env=dict(os.environ), only=("speed",), model=model, reference=ref), "speed")
    assert bad.status == "fail" and "decode tg16 20.0 tok/s vs 100.0 (0.20x" in bad.why
    assert [r.passed for r in bad.speed] == [False, True]
    assert "noisy machine" not in bad.why  # the fake's samples spread 2 %: tolerance 25 %


def test_speed_without_a_reference_measures_and_skips(tmp_path: Path, model: Path) -> None:
    out = make_out(tmp_path / "a")
    spd = _check(run_smoke(out, env=dict(os.environ), only=("speed",), model=model), "speed")
    assert spd.status == "skip" and spd.why.startswith("no --reference to compare with; measured")
    assert [r.tps for r in spd.speed] == [100.0, 300.0]


def _fake_qemu(root: Path) -> Path:
    """A stand-in for qemu-x86_64: logs its arguments, drops ``-cpu MODEL``, runs the rest."""
    path = root / "fake-qemu"
    path.write_text(f'#!/bin/sh\necho "$@" >> "{root}/qemu.log"\nshift 2\nexec "$@"\n')
    path.chmod(0o755)
    return path


def test_kld_as_another_cpu_model_compares_with_the_native_run(tmp_path: Path, model: Path) -> None:
    """`--cpu`: this build under qemu vs itself run natively, over the first chunks only; no
    RPC setups (the same math on the same CPU), speed skipped, nothing recorded."""
    from patchkit.smoke.emulate import Emulation

    out = make_out(tmp_path / "a", kld=[("--chunks 4", TENSOR)])
    before = (out / "build-info.json").read_bytes()
    em = Emulation(qemu=str(_fake_qemu(tmp_path)), model="SandyBridge")
    report = run_smoke(out, env=dict(os.environ), only=("kld", "speed"), model=model, emulation=em)
    kld = _check(report, "kld")
    assert kld.status == "pass", kld.why
    assert [(r.setup, r.kind) for r in kld.kld] == [
        ("CPU under qemu -cpu SandyBridge vs natively", "cross-build")
    ]
    assert "4 chunks of 128 tokens" in kld.why and "real model says" in kld.why
    assert _check(report, "speed").status == "skip"
    assert (out / "build-info.json").read_bytes() == before
    runs = (tmp_path / "qemu.log").read_text().splitlines()
    # under qemu: the comparison and the words, never the native baseline
    assert [r.split()[:2] for r in runs] == [["-cpu", "SandyBridge"]] * 2
    assert "--kl-divergence" in runs[0].split() and "--chunks 4" in runs[0]
    assert "llama-cli" in runs[1]


def test_kld_as_another_cpu_model_fails_when_it_drifts(tmp_path: Path, model: Path) -> None:
    from patchkit.smoke.emulate import Emulation

    out = make_out(tmp_path / "a", kld=[("--chunks 4", WRONG)])
    em = Emulation(qemu=str(_fake_qemu(tmp_path)), model="Nehalem")
    report = run_smoke(out, env=dict(os.environ), only=("kld",), model=model, emulation=em)
    kld = _check(report, "kld")
    assert kld.status == "fail" and report.status == "failed"
    assert "CPU under qemu -cpu Nehalem vs natively: mean KLD" in kld.why and "FAIL: cross-build" in kld.why


def test_a_cuda_build_without_the_driver_runs_the_cpu_and_rpc_setups_and_says_so(
    tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from patchkit.smoke import runner

    out = make_out(tmp_path / "a")
    info = json.loads((out / "build-info.json").read_text())
    info["cuda"] = {"archs": [60, 86], "cmake_architectures": "60-real;86-real", "nvcc": "11.8", "proven": {}}
    info["cuda"]["toolkit"] = {"no_vmm": True}
    (out / "build-info.json").write_text(json.dumps(info))
    monkeypatch.setattr(runner, "_nvidia_driver_present", lambda: False)
    kld = _check(run_smoke(out, env=dict(os.environ), only=("kld",), model=model), "kld")
    assert kld.status == "pass", kld.why
    assert "first GPU (CUDA0)" not in [r.setup for r in kld.kld]
    assert "no NVIDIA driver here: the CUDA0 setup was not run" in kld.why
    # with the driver the CUDA0 setup runs (the fake perplexity answers it like the CPU)
    monkeypatch.setattr(runner, "_nvidia_driver_present", lambda: True)
    kld = _check(run_smoke(out, env=dict(os.environ), only=("kld",), model=model), "kld")
    assert kld.kld[0].setup == "first GPU (CUDA0)" and kld.kld[0].kind == "gpu", kld.why
