"""The smoke checks: prove on real binaries, on this machine, that the build works
and that each patch does what it claims.

Checks (each pass / fail / skip, with why):
  version          every built executable answers --version (or --help) with exit 0; with
                   CPU variants, the one loaded (under --cpu: the one its table names)
  generate         greedy tokens of a tiny local model: CPU == through one loopback RPC server
  tensor-split     the seed's failure: two loopback RPC servers, llama-bench -sm tensor on a
                   hybrid (recurrent) model; with the zero-byte guard the servers survive
  rpc-guard        protocol-level probe of the guard (patchkit.rpc.probe)
  meta-ot          patch 2: tensor split over two RPC servers + one layer -ot to a third;
                   greedy tokens must match the CPU run
  kld              a real model: KL divergence of each setup (and --reference) vs CPU
  speed            a real model: prompt/decode tok/s vs --reference
Everything listens on 127.0.0.1, on free ports, with time limits, and every server
is stopped when its check ends.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from patchkit.core.errors import RpcError, ServerStartError
from patchkit.core.proc import RunResult
from patchkit.rpc.probe import probe_zero_nbytes_guard
from patchkit.smoke.emulate import expected_variant, loaded_variant, unemulated_features
from patchkit.smoke.env import SmokeEnv
from patchkit.smoke.hybridmodel import write_tiny_qwen35
from patchkit.smoke.kld import check_kld
from patchkit.smoke.llama_output import servers, telling_line
from patchkit.smoke.speed import check_speed
from patchkit.smoke.tinymodel import write_tiny_llama
from patchkit.spec.buildinfo import CheckResult, CheckStatus

__all__ = ["CHECKS", "GUARD_PATCH", "META_OT_PATCH", "PROMPT", "Check", "generated_text"]

GUARD_PATCH = "rpc-deserialize-tensor-zero-nbytes"
META_OT_PATCH = "experimental-meta-ot-scheduling"
PROMPT = "the cat sat on"
PASS, FAIL, SKIP = CheckStatus.PASS, CheckStatus.FAIL, CheckStatus.SKIP


Check = Callable[[SmokeEnv], CheckResult]


def _result(name: str, start: float, status: CheckStatus, why: str) -> CheckResult:
    # ports are chosen at random: keep them out of the record so equal builds say the same
    why = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", why)
    return CheckResult(name=name, status=status, why=why, seconds=time.monotonic() - start)


def _patch_verdict(
    name: str, start: float, env: SmokeEnv, patch: str, ok: bool, passed: str, failed: str
) -> CheckResult:
    """The rule for checks that prove a patch: pass if it worked; without the patch in the
    build, upstream's failure is expected (skip, saying what happened); else fail."""
    in_build = patch in env.patches
    if ok:
        return _result(name, start, PASS, passed + ("" if in_build else f" (without {patch}!)"))
    if not in_build:
        return _result(name, start, SKIP, f"{patch} is not in this build; as expected: {failed}")
    return _result(name, start, FAIL, failed)


# ---- check 1: every binary answers ------------------------------------------------------


def check_version(env: SmokeEnv) -> CheckResult:
    start = time.monotonic()
    exes = env.executables()
    if not exes:
        return _result("version", start, FAIL, "build-info.json lists no executables")
    answered = []
    said = ""  # what ggml and qemu said while the binaries started
    for exe in exes:
        r = env.run(exe, "--version")
        text = r.stdout + r.stderr
        if not r.ok or "unknown argument" in text or "invalid argument" in text:
            r = env.run(exe, "--help")
            if not r.ok:
                return _result(
                    "version", start, FAIL, f"{exe.name} --version/--help: {r.brief()}: {telling_line(r)}"
                )
            answered.append(f"{exe.name} (--help)")
        else:
            answered.append(exe.name)
        said += r.stdout + r.stderr
    why = "answered: " + ", ".join(answered)
    if env.emulation is not None:
        why = f"under {env.emulation.describe()}: {why}"
    if env.info.cpu_variants is None:
        return _result("version", start, PASS, why)
    verdict, text = _variant_verdict(env, said)
    return _result("version", start, verdict, f"{why}; {text}")


def _variant_verdict(env: SmokeEnv, said: str) -> tuple[CheckStatus, str]:
    """Which CPU variant the binaries loaded; as another CPU model (--cpu), whether it is the
    one build-info's table names for that model (less what qemu cannot emulate)."""
    assert env.info.cpu_variants is not None
    loaded = loaded_variant(said)
    if loaded is None:  # llama-cli logs through llama's logger, which keeps this line to itself
        return PASS, "none of its executables said which CPU variant it loaded (ggml-rpc-server --help does)"
    got = f"loaded the CPU variant {loaded}"
    if env.emulation is None:
        return PASS, got
    known, want, lost = expected_variant(
        env.emulation.model, env.info.cpu_variants.names, unemulated_features(said)
    )
    if not known:
        return PASS, f"{got} (the variant table has no {env.emulation.model})"
    note = f" (qemu cannot emulate {', '.join(lost)})" if lost else ""
    if loaded == want:
        return PASS, f"{got}, as the variant table says for {env.emulation.model}{note}"
    return FAIL, f"{got}; the variant table says {want or 'none'} for {env.emulation.model}{note}"


# ---- models -----------------------------------------------------------------------------


def tiny_llama(env: SmokeEnv) -> Path:
    path = env.workdir / "tiny-llama.gguf"
    if not path.exists():
        write_tiny_llama(path)
    return path


def hybrid_model(env: SmokeEnv) -> Path:
    """A random qwen35 (attention + gated delta net) model, written here (smoke.hybridmodel):
    upstream's test-llama-archs cannot write one in a GGML_BACKEND_DL build."""
    path = env.workdir / "qwen35" / "qwen35-dense.gguf"
    if not path.exists():
        write_tiny_qwen35(path)
    return path


# ---- check 2: CPU vs RPC greedy tokens ---------------------------------------------------


def _generate(env: SmokeEnv, cli: Path, model: Path, *extra: str) -> RunResult:
    return env.run(
        cli,
        "-m",
        str(model),
        "-p",
        PROMPT,
        "-n",
        "16",
        "--temp",
        "0",
        "-c",
        "256",
        "--seed",
        "1",
        "-st",
        "--simple-io",
        "--no-warmup",
        *extra,
    )


def generated_text(r: RunResult) -> str:
    """The generated text from llama-cli's stdout (the prompt echo and banners removed)."""
    text = r.stdout
    idx = text.rfind(PROMPT)
    if idx >= 0:
        text = text[idx + len(PROMPT) :]
    lines = [ln.rstrip() for ln in text.splitlines()]
    keep = [ln for ln in lines if ln and not ln.startswith(("[ Prompt:", "Exiting", ">"))]
    return "\n".join(keep).strip()


def _rpc_generate(env: SmokeEnv, server_env: SmokeEnv, cli: Path, model: Path, name: str) -> RunResult | str:
    """Generate with ``env``'s llama-cli through one ggml-rpc-server of ``server_env``."""
    with servers(env.workdir / "logs") as procs:
        try:
            addr = server_env.rpc_server(procs, name)
        except ServerStartError as e:
            return str(e)
        return _generate(env, cli, model, "--rpc", addr, "-dev", "RPC0")


def check_generate(env: SmokeEnv) -> CheckResult:
    start = time.monotonic()
    cli = env.exe("llama-cli")
    if cli is None:
        return _result("generate", start, SKIP, "llama-cli is not in this build")
    model = tiny_llama(env)
    cpu = _generate(env, cli, model)
    if not cpu.ok:
        return _result("generate", start, FAIL, f"CPU run: {cpu.brief()}: {telling_line(cpu)}")
    cpu_text = generated_text(cpu)
    if not cpu_text:
        return _result("generate", start, FAIL, "CPU run generated no text")
    runs = [("CPU", env, None), ("RPC", env, env)]
    ref = env.reference_env()
    if ref is not None:
        runs += [("reference CPU", ref, None), ("client -> reference RPC server", env, ref)]
    said = []
    for label, client_env, server_env in runs[1:]:
        client = client_env.exe("llama-cli")
        if server_env is not None and server_env.exe("ggml-rpc-server") is None:
            said.append(f"{label}: no ggml-rpc-server, not compared")
            continue
        assert client is not None
        r = (
            _generate(client_env, client, model)
            if server_env is None
            else _rpc_generate(client_env, server_env, client, model, "rpc")
        )
        if isinstance(r, str):
            return _result("generate", start, FAIL, f"{label}: {r}")
        if not r.ok:
            return _result("generate", start, FAIL, f"{label} run: {r.brief()}: {telling_line(r)}")
        text = generated_text(r)
        if text != cpu_text:
            return _result(
                "generate", start, FAIL, f"tokens differ: CPU {cpu_text[:60]!r} vs {label} {text[:60]!r}"
            )
        said.append(label)
    return _result("generate", start, PASS, f"CPU == {' == '.join(said)}: {cpu_text[:60]!r}")


# ---- check 3: the seed's failure ---------------------------------------------------------


def check_tensor_split(env: SmokeEnv) -> CheckResult:
    start = time.monotonic()
    bench, server = env.exe("llama-bench"), env.exe("ggml-rpc-server")
    if bench is None or server is None:
        return _result("tensor-split", start, SKIP, "needs llama-bench and ggml-rpc-server")
    model = hybrid_model(env)
    with servers(env.workdir / "logs") as procs:
        try:
            a, b = env.rpc_server(procs, "rpc-a"), env.rpc_server(procs, "rpc-b")
        except ServerStartError as e:
            return _result("tensor-split", start, FAIL, str(e))
        r = env.run(
            bench,
            "-m",
            str(model),
            "-rpc",
            f"{a},{b}",
            "-sm",
            "tensor",
            "-dev",
            "RPC0/RPC1",
            "-p",
            "16",
            "-n",
            "4",
            "-r",
            "1",
            "-o",
            "json",
        )
        dead = [p for p in procs.procs if p.poll() is not None]
        tails = "; ".join(procs.log_tail(p, 1) for p in dead)
    what = f"llama-bench {r.brief()}; {len(dead)} of 2 RPC servers died" + (f" ({tails})" if tails else "")
    return _patch_verdict(
        "tensor-split", start, env, GUARD_PATCH, r.ok and not dead, "runs; both RPC servers alive", what
    )


# ---- check 4: the guard, at protocol level -----------------------------------------------


def check_rpc_guard(env: SmokeEnv) -> CheckResult:
    start = time.monotonic()
    if env.exe("ggml-rpc-server") is None:
        return _result("rpc-guard", start, SKIP, "ggml-rpc-server is not in this build")
    with servers(env.workdir / "logs") as procs:
        try:
            addr = env.rpc_server(procs)
        except ServerStartError as e:
            return _result("rpc-guard", start, FAIL, str(e))
        host, port = addr.rsplit(":", 1)
        try:
            report = probe_zero_nbytes_guard(host, int(port), timeout=min(env.timeout, 20))
        except RpcError as e:
            return _result("rpc-guard", start, FAIL, f"probe failed: {e.message}")
    verdict = f"verdict {report.verdict}: " + ", ".join(f"{c.name} {c.outcome.value}" for c in report.cases)
    return _patch_verdict("rpc-guard", start, env, GUARD_PATCH, report.ok, verdict, verdict)


# ---- check 5: patch 2, a whole layer -ot onto a third device in tensor mode -------------


def check_meta_ot(env: SmokeEnv) -> CheckResult:
    start = time.monotonic()
    cli, server = env.exe("llama-cli"), env.exe("ggml-rpc-server")
    if cli is None or server is None:
        return _result("meta-ot", start, SKIP, "needs llama-cli and ggml-rpc-server")
    model = tiny_llama(env)
    cpu = _generate(env, cli, model)
    if not cpu.ok:
        return _result("meta-ot", start, FAIL, f"CPU run: {cpu.brief()}: {telling_line(cpu)}")
    with servers(env.workdir / "logs") as procs:
        try:
            a, b, c = (env.rpc_server(procs, f"rpc-{n}") for n in "abc")
        except ServerStartError as e:
            return _result("meta-ot", start, FAIL, str(e))
        # every RPC buffer type is named RPC0[host:port], whatever the device's index
        r = _generate(
            env,
            cli,
            model,
            "--rpc",
            f"{a},{b},{c}",
            "-sm",
            "tensor",
            "-dev",
            "RPC0,RPC1",
            "-ot",
            rf"blk\.1\.=RPC0[{c}]",
            "-fit",
            "off",
        )
    cpu_text, ot_text = generated_text(cpu), generated_text(r)
    what = (
        f"llama-cli {r.brief()}: {telling_line(r)}"
        if not r.ok
        else f"tokens differ: CPU {cpu_text[:40]!r} vs -ot {ot_text[:40]!r}"
    )
    return _patch_verdict(
        "meta-ot",
        start,
        env,
        META_OT_PATCH,
        r.ok and ot_text == cpu_text,
        f"tensor split over 2 RPC servers + layer 1 on a third == CPU: {cpu_text[:40]!r}",
        what,
    )


CHECKS: dict[str, Check] = {
    "version": check_version,
    "generate": check_generate,
    "tensor-split": check_tensor_split,
    "rpc-guard": check_rpc_guard,
    "meta-ot": check_meta_ot,
    "kld": check_kld,  # a real model: KL divergence of each setup vs CPU (smoke.kld)
    "speed": check_speed,  # a real model: tok/s vs --reference (smoke.speed)
}
