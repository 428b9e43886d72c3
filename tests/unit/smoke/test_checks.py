"""The smoke checks' verdicts and records (smoke.checks), without running a binary."""

from __future__ import annotations

from pathlib import Path

from patchkit.core.proc import RunResult
from patchkit.smoke import checks
from patchkit.smoke.env import SmokeEnv
from patchkit.spec.buildinfo import BuildInfo, CheckStatus
from tests.fixtures.buildinfo import build_info_json, patch_json


def test_recorded_reasons_carry_no_random_ports() -> None:
    r = checks._result("meta-ot", 0.0, CheckStatus.SKIP, "buffer (RPC0[127.0.0.1:50341]) and 127.0.0.1:4242")
    assert r.why == "buffer (RPC0[127.0.0.1:<port>]) and 127.0.0.1:<port>"


def _env(
    tmp_path: Path, patches: tuple[str, ...] = (checks.GUARD_PATCH,), executables: bool = True
) -> SmokeEnv:
    out = tmp_path / "out"
    (out / "bin").mkdir(parents=True)
    arts = (
        [
            {
                "target": "llama-cli",
                "type": "EXECUTABLE",
                "path": "bin/llama-cli",
                "sha256": "0" * 64,
                "size": 1,
            }
        ]
        if executables
        else []
    )
    data = build_info_json(patches=[patch_json(p) for p in patches], artifacts=arts)
    return SmokeEnv(
        out_dir=out, info=BuildInfo.from_json(data), workdir=tmp_path / "work", timeout=5, base_env={}
    )


def _text(stdout: str) -> str:
    return checks.generated_text(RunResult(args=(), returncode=0, stdout=stdout, stderr="", seconds=0))


def test_generated_text_drops_the_prompt_echo_and_banners() -> None:
    out = (
        f"build: 1 (fake)\n> {checks.PROMPT} the mat and slept\n\n"
        "[ Prompt: 1 t/s | Generation: 2 t/s ]\nExiting...\n"
    )
    assert _text(out) == "the mat and slept"
    assert _text(f"{checks.PROMPT} one\n{checks.PROMPT} two\nlines\n") == "two\nlines"  # the last echo
    assert _text("no prompt here\n") == "no prompt here"
    assert _text("") == ""


def test_patch_verdicts(tmp_path: Path) -> None:
    with_guard, without = _env(tmp_path / "a"), _env(tmp_path / "b", patches=())
    verdict = checks._patch_verdict
    ok = verdict("x", 0.0, with_guard, checks.GUARD_PATCH, True, "works", "broke")
    assert (ok.status, ok.why) == (CheckStatus.PASS, "works")
    lucky = verdict("x", 0.0, without, checks.GUARD_PATCH, True, "works", "broke")
    assert (lucky.status, lucky.why) == (CheckStatus.PASS, f"works (without {checks.GUARD_PATCH}!)")
    bad = verdict("x", 0.0, with_guard, checks.GUARD_PATCH, False, "works", "broke")
    assert (bad.status, bad.why) == (CheckStatus.FAIL, "broke")
    expected = verdict("x", 0.0, without, checks.GUARD_PATCH, False, "works", "broke at 127.0.0.1:5")
    assert expected.status is CheckStatus.SKIP
    assert (
        expected.why == f"{checks.GUARD_PATCH} is not in this build; as expected: broke at 127.0.0.1:<port>"
    )


def test_checks_without_their_binaries_skip_or_fail_without_running_anything(tmp_path: Path) -> None:
    env = _env(tmp_path / "a")  # build-info lists llama-cli, but bin/ is empty
    results = {name: check(env) for name, check in checks.CHECKS.items() if name != "version"}
    assert {n: (r.status, r.why) for n, r in results.items()} == {
        "generate": (CheckStatus.SKIP, "llama-cli is not in this build"),
        "tensor-split": (CheckStatus.SKIP, "needs llama-bench and ggml-rpc-server"),
        "rpc-guard": (CheckStatus.SKIP, "ggml-rpc-server is not in this build"),
        "meta-ot": (CheckStatus.SKIP, "needs llama-cli and ggml-rpc-server"),
        "kld": (CheckStatus.SKIP, "llama-perplexity was not built (a [smoke] tools target)"),
        "speed": (CheckStatus.SKIP, "llama-bench is not in this build"),
    }
    none = checks.check_version(_env(tmp_path / "b", executables=False))
    assert (none.status, none.why) == (CheckStatus.FAIL, "build-info.json lists no executables")
    assert list(checks.CHECKS) == [
        "version",
        "generate",
        "tensor-split",
        "rpc-guard",
        "meta-ot",
        "kld",
        "speed",
    ]


def test_the_hybrid_model_is_written_here_once(tmp_path: Path) -> None:
    from gguf import GGUFReader

    env = _env(tmp_path)  # no test-llama-archs anywhere
    made = checks.hybrid_model(env)
    assert made == env.workdir / "qwen35" / "qwen35-dense.gguf"
    assert GGUFReader(str(made)).fields["general.architecture"].contents() == "qwen35"
    mtime = made.stat().st_mtime_ns
    assert checks.hybrid_model(env) == made and made.stat().st_mtime_ns == mtime  # reused


def test_the_tiny_model_is_written_once(tmp_path: Path) -> None:
    env = _env(tmp_path)
    env.workdir.mkdir()
    path = checks.tiny_llama(env)
    assert path == env.workdir / "tiny-llama.gguf" and path.read_bytes()[:4] == b"GGUF"
    mtime = path.stat().st_mtime_ns
    assert checks.tiny_llama(env) == path and path.stat().st_mtime_ns == mtime
