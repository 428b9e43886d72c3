"""Smoke orchestration against fake binaries: ports, timeouts, verdicts, clean-up."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from patchkit.smoke import checks
from patchkit.smoke import runner as smoke
from patchkit.smoke.env import SmokeEnv
from patchkit.smoke.runner import run_smoke
from tests.fixtures.buildinfo import build_info_json, patch_json
from tests.fixtures.paths import FAKE_LLAMA, RPC_SERVER

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="fake binaries are POSIX scripts"),
]
FAKE = FAKE_LLAMA
TOOLS = ("llama-cli", "llama-bench", "ggml-rpc-server", "test-llama-archs")


def make_out(tmp_path: Path, mode: str = "ok", patches: tuple[str, ...] = (checks.GUARD_PATCH,)) -> Path:
    out = tmp_path / "out"
    (out / "bin").mkdir(parents=True)
    for t in TOOLS:
        shutil.copy(FAKE, out / "bin" / t)
        os.chmod(out / "bin" / t, 0o755)
    (out / "bin" / "fake.json").write_text(
        json.dumps({"mode": mode, "piddir": str(tmp_path / "pids"), "rpc_server": str(RPC_SERVER)})
    )
    info = build_info_json(
        patches=[patch_json(p) for p in patches],
        artifacts=[
            {"target": t, "type": "EXECUTABLE", "path": f"bin/{t}", "sha256": "00" * 32, "size": 1}
            for t in TOOLS[:3]
        ],
    )
    (out / "build-info.json").write_text(json.dumps(info))
    return out


def alive_pids(tmp_path: Path) -> list[int]:
    piddir = tmp_path / "pids"
    alive = []
    for p in piddir.iterdir() if piddir.exists() else []:
        try:
            os.kill(int(p.name), 0)
        except ProcessLookupError:
            continue
        alive.append(int(p.name))
    return alive


def statuses(report) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


def test_all_checks_pass_and_servers_are_stopped(tmp_path: Path) -> None:
    out = make_out(tmp_path)
    report = run_smoke(out, env=dict(os.environ), skip=("rpc-guard",), tool_dirs=(out / "bin",))
    st = statuses(report)
    assert st == {
        "version": "pass",
        "generate": "pass",
        "tensor-split": "pass",
        "rpc-guard": "skip",
        "meta-ot": "pass",
        "kld": "skip",
        "speed": "skip",
    }  # no real model here
    gen = next(c for c in report.checks if c.name == "generate")
    assert "the mat and slept" in gen.why
    ver = next(c for c in report.checks if c.name == "version")
    assert "ggml-rpc-server (--help)" in ver.why  # --version is not understood: fell back
    assert report.status == "passed"
    # 1 for generate + 2 for tensor split + 3 for meta-ot
    assert len(list((tmp_path / "pids").iterdir())) == 6
    assert alive_pids(tmp_path) == []
    recorded = json.loads((out / "build-info.json").read_text())["smoke"]
    assert recorded["status"] == "passed" and len(recorded["checks"]) == 7


def test_unguarded_server_abort_is_reported(tmp_path: Path) -> None:
    out = make_out(tmp_path, mode="rpc-abort")
    report = run_smoke(out, env=dict(os.environ), only=("tensor-split",), tool_dirs=(out / "bin",))
    ts = next(c for c in report.checks if c.name == "tensor-split")
    assert ts.status == "fail"
    assert "2 RPC servers died" in ts.why and "GGML_ASSERT" in ts.why
    assert report.status == "failed"
    assert alive_pids(tmp_path) == []


def test_abort_without_the_patch_is_expected_not_a_failure(tmp_path: Path) -> None:
    out = make_out(tmp_path, mode="rpc-abort", patches=())
    report = run_smoke(out, env=dict(os.environ), only=("tensor-split",), tool_dirs=(out / "bin",))
    ts = next(c for c in report.checks if c.name == "tensor-split")
    assert ts.status == "skip"
    assert "is not in this build; as expected" in ts.why and "died" in ts.why


def test_rpc_tokens_differing_fails(tmp_path: Path) -> None:
    out = make_out(tmp_path, mode="differ")
    report = run_smoke(out, env=dict(os.environ), only=("generate",))
    gen = next(c for c in report.checks if c.name == "generate")
    assert gen.status == "fail" and "tokens differ" in gen.why


def test_crashing_binaries_fail_version(tmp_path: Path) -> None:
    out = make_out(tmp_path, mode="crash")
    report = run_smoke(out, env=dict(os.environ), only=("version",))
    assert statuses(report)["version"] == "fail"
    assert "exit 1" in report.checks[0].why


def test_the_hybrid_model_needs_no_test_llama_archs(tmp_path: Path) -> None:
    # a GGML_BACKEND_DL build's test-llama-archs writes no model: the smoke writes its own
    out = make_out(tmp_path)
    (out / "bin" / "test-llama-archs").unlink()
    report = run_smoke(out, env=dict(os.environ), only=("tensor-split",))
    ts = next(c for c in report.checks if c.name == "tensor-split")
    assert (ts.status, ts.why) == ("pass", "runs; both RPC servers alive")


def test_ctrl_c_during_a_check_still_stops_servers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = make_out(tmp_path)
    real = SmokeEnv.run

    def interrupted(self, exe, *args, timeout=None):
        if "--rpc" in args:
            raise KeyboardInterrupt
        return real(self, exe, *args, timeout=timeout)

    monkeypatch.setattr(SmokeEnv, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_smoke(out, env=dict(os.environ), only=("generate",))
    assert len(list((tmp_path / "pids").iterdir())) == 1
    assert alive_pids(tmp_path) == []


def test_smoke_cli_exit_code(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from patchkit.cli import main

    out = make_out(tmp_path, mode="differ")
    r = CliRunner().invoke(main, ["smoke", str(out), "--only", "generate"])
    assert r.exit_code == 7, r.output
    assert "smoke failed: generate" in r.output
    r = CliRunner().invoke(main, ["smoke", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "no finished build" in r.output


@pytest.mark.parametrize(
    ("mode", "patches", "status", "text"),
    [
        ("proto-patched", (checks.GUARD_PATCH,), "pass", "verdict patched"),
        ("proto-unpatched", (checks.GUARD_PATCH,), "fail", "verdict unpatched"),
        ("proto-unpatched", (), "skip", "is not in this build; as expected: verdict unpatched"),
    ],
)
def test_rpc_guard_check(tmp_path: Path, mode: str, patches: tuple[str, ...], status: str, text: str) -> None:
    out = make_out(tmp_path, mode=mode, patches=patches)
    report = run_smoke(out, env=dict(os.environ), only=("rpc-guard",))
    guard = next(c for c in report.checks if c.name == "rpc-guard")
    assert guard.status == status, guard.why
    assert text in guard.why
    assert alive_pids(tmp_path) == []


def test_reference_build_tokens_and_cross_rpc(tmp_path: Path) -> None:
    ours = make_out(tmp_path / "a")
    ref = make_out(tmp_path / "b")
    report = run_smoke(ours, env=dict(os.environ), only=("generate",), reference=ref)
    gen = next(c for c in report.checks if c.name == "generate")
    assert gen.status == "pass", gen.why
    assert "CPU == RPC == reference CPU == client -> reference RPC server" in gen.why
    # a reference whose RPC generation differs is caught
    other = make_out(tmp_path / "c", mode="differ")
    report = run_smoke(other, env=dict(os.environ), only=("generate",), reference=ref)
    assert report.checks[1].status == "fail" and "tokens differ" in report.checks[1].why


def test_partial_run_from_the_cli_is_recorded_as_partial(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from patchkit.cli import main

    out = make_out(tmp_path)
    r = CliRunner().invoke(main, ["smoke", str(out), "--only", "version"])
    assert r.exit_code == 0, r.output
    # the verdicts are the result: one line per check, then the status, on stdout
    lines = r.stdout.splitlines()
    assert lines[0].startswith("  ✓ pass version (") and "): answered: llama-cli" in lines[0]
    assert lines[1].startswith("  - skip generate (") and lines[1].endswith(": skipped on request")
    assert lines[-1] == "smoke partial" and len(lines) == len(checks.CHECKS) + 1
    assert "▸ smoke" in r.stderr and "pass version" not in r.stderr
    assert json.loads((out / "build-info.json").read_text())["smoke"]["status"] == "partial"


def test_a_binary_that_cannot_run_fails_its_check(tmp_path: Path) -> None:
    out = make_out(tmp_path)
    (out / "bin" / "llama-cli").chmod(0o644)  # unpacked without the exec bit
    report = run_smoke(out, env=dict(os.environ), only=("version",))
    v = report.checks[0]
    assert v.status == "fail" and "cannot run" in v.why


def test_cuda_build_linking_the_driver_skips_without_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = make_out(tmp_path)
    info = json.loads((out / "build-info.json").read_text())
    info["cuda"] = {
        "archs": [60, 86],
        "cmake_architectures": "60-real;86-real",
        "nvcc": "12.4",
        "proven": {},
        "toolkit": {"no_vmm": False},
    }
    (out / "build-info.json").write_text(json.dumps(info))
    monkeypatch.setattr(smoke, "_nvidia_driver_present", lambda: False)
    report = run_smoke(out, env=dict(os.environ))
    assert report.status == "skipped"
    assert [c.name for c in report.checks] == ["all"]
    assert "links the NVIDIA driver" in report.checks[0].why
    # built with GGML_CUDA_NO_VMM (no libcuda): the CPU checks run
    info["cuda"]["toolkit"]["no_vmm"] = True
    (out / "build-info.json").write_text(json.dumps(info))
    assert run_smoke(out, env=dict(os.environ), only=("version",)).checks[0].status == "pass"
    # CPU variants (GGML_BACKEND_DL): libggml-cuda is a module that fails to load without the
    # driver, and the tools run on the CPU: the checks run
    info["cuda"]["toolkit"]["no_vmm"] = False
    info["cpu_variants"] = {
        "variants": [{"name": "x64", "file": "bin/libggml-cpu-x64.so", "features": []}],
        "models": [],
    }
    info["artifacts"].append(
        {
            "target": "ggml-cpu-x64",
            "type": "MODULE_LIBRARY",
            "path": "bin/libggml-cpu-x64.so",
            "sha256": "00" * 32,
            "size": 1,
        }
    )
    (out / "build-info.json").write_text(json.dumps(info))
    assert run_smoke(out, env=dict(os.environ), only=("version",)).checks[0].status == "pass"
