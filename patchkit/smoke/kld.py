"""The kld check: equivalence on a real model judged by distribution distance.

Greedy tokens are the wrong test on real weights: two correct setups that add partial
sums in another order (tensor split) drift apart after a few tokens, and a build with
subtly wrong math still writes fluent text. llama.cpp's own measure is the KL divergence
of the next-token distributions: ``llama-perplexity --kl-divergence-base`` writes the
baseline's log-probabilities over a text, ``--kl-divergence`` compares another run's
with them (mean / max KLD, how often the top token is the same).

Each setup of this build is compared with this build's CPU run; with ``--reference``
this build's CPU run is also compared with the reference build's CPU run. A comparison
passes when its mean KLD and same-top-token rate are within the thresholds of its kind
(``THRESHOLDS``, measured on SmolLM2-135M Q4_1 and documented in README).
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from patchkit.core.errors import ServerStartError
from patchkit.core.proc import RunResult
from patchkit.smoke.env import SmokeEnv
from patchkit.smoke.llama_output import servers, telling_line
from patchkit.spec.buildinfo import CheckResult, CheckStatus, KldRecord

__all__ = [
    "CTX",
    "EMULATED_CHUNKS",
    "THRESHOLDS",
    "KldStats",
    "Threshold",
    "check_kld",
    "judge",
    "parse_kld",
    "summary",
    "text_path",
]

META_OT_PATCH = "experimental-meta-ot-scheduling"
CTX = 128  # small context: a run over the text takes seconds
# one llama-perplexity run over the text: ~20 s on an idle core, but 10x that when the machine
# is busy (measured here with two builds running: 190 s per pass through an RPC server), and a
# busy machine must not fail the check; a run that hangs is still cut off
RUN_TIMEOUT = 900.0
TEXT = "kld-text.txt"  # ~13 KB of original prose, committed (patchkit/smoke/data)
GEN_PROMPT = "Write one sentence about a water mill."
# as another CPU model (--cpu) the binaries run under qemu, ~100x slower: the comparison reads
# the text's first chunks only (4 x 128 tokens; the second half of each is scored)
EMULATED_CHUNKS = 4


@dataclasses.dataclass(frozen=True, kw_only=True)
class Threshold:
    max_mean_kld: float
    min_top1_pct: float
    what: str


# Measured at 82bb48500a9a on SmolLM2-135M-Instruct Q4_1, -c 128, the committed text:
# moved but unchanged math gives 0.000000 / 100 %; tensor split (upstream's own, the vanilla
# build gives the same) 0.0039 / 95.8 %; a wrong rms_norm divisor (the negative control)
# fails every kind by a wide margin. See README, "Real-model checks".
THRESHOLDS: dict[str, Threshold] = {
    "same-math": Threshold(
        max_mean_kld=0.001, min_top1_pct=99.0, what="the same kernels, moved (one RPC server, layer split)"
    ),
    "tensor-split": Threshold(
        max_mean_kld=0.015,
        min_top1_pct=93.0,
        what="rows split over devices, partial sums reduced in another order",
    ),
    "gpu": Threshold(
        max_mean_kld=0.015,
        min_top1_pct=93.0,
        what="the build's first GPU (CUDA0) vs its CPU; not yet measured on a GPU",
    ),
    "cross-build": Threshold(
        max_mean_kld=0.015,
        min_top1_pct=93.0,
        what="another build (compiler, platform, patches, pin) vs --reference",
    ),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class KldStats:
    mean_kld: float
    max_kld: float
    top1_pct: float
    rms_dp_pct: float | None = None


_NUM = r"([-+]?(?:nan|inf|[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?))"
_MEAN = re.compile(r"^Mean\s+KLD:\s*" + _NUM, re.M | re.I)
_MAX = re.compile(r"^Maximum\s+KLD:\s*" + _NUM, re.M | re.I)
_TOP = re.compile(r"^Same\s+top\s+p:\s*" + _NUM, re.M | re.I)
_RMS = re.compile(r"^RMS\s+\S+\s*:\s*" + _NUM, re.M | re.I)


def parse_kld(text: str) -> KldStats | None:
    """The KL-divergence statistics of ``llama-perplexity --kl-divergence`` output (None
    when it printed none: too little text for one chunk, a crash, another tool)."""
    mean, mx, top = _MEAN.search(text), _MAX.search(text), _TOP.search(text)
    if mean is None or mx is None or top is None:
        return None
    rms = _RMS.search(text)
    return KldStats(
        mean_kld=float(mean.group(1)),
        max_kld=float(mx.group(1)),
        top1_pct=float(top.group(1)),
        rms_dp_pct=float(rms.group(1)) if rms else None,
    )


def judge(setup: str, kind: str, stats: KldStats) -> KldRecord:
    """A comparison passes when mean KLD <= and top-1 agreement >= its kind's thresholds
    (a NaN fails both)."""
    t = THRESHOLDS[kind]
    ok = (
        math.isfinite(stats.mean_kld)
        and stats.mean_kld <= t.max_mean_kld
        and math.isfinite(stats.top1_pct)
        and stats.top1_pct >= t.min_top1_pct
    )
    return KldRecord(
        setup=setup,
        kind=kind,
        mean_kld=stats.mean_kld,
        max_kld=stats.max_kld,
        top1_pct=stats.top1_pct,
        max_mean_kld=t.max_mean_kld,
        min_top1_pct=t.min_top1_pct,
        passed=ok,
    )


def summary(r: KldRecord) -> str:
    """'tensor split over two: mean KLD 0.0039, max 0.075, top-1 95.8 %' (+ the limits if failed)."""
    # KLD >= 0; llama-perplexity's float sums can print -0.000000
    s = (
        f"{r.setup}: mean KLD {max(r.mean_kld, 0.0) + 0.0:.4f}, max {max(r.max_kld, 0.0) + 0.0:.3f}, "
        f"top-1 {r.top1_pct:.1f} %"
    )
    if not r.passed:
        s += f" (FAIL: {r.kind} allows mean <= {r.max_mean_kld:g}, top-1 >= {r.min_top1_pct:g} %)"
    return s


def text_path() -> Path:
    """The committed text the perplexity runs read."""
    return Path(str(resources.files("patchkit.smoke") / "data" / TEXT))


# ---- running llama-perplexity -------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Setup:
    name: str
    kind: str
    servers: int
    args: tuple[str, ...]  # "{c}" is the third server's address
    needs: str = ""  # a patch the setup needs
    gpu: bool = False  # only for a CUDA build


SETUPS = (
    _Setup(name="first GPU (CUDA0)", kind="gpu", servers=0, args=("-dev", "CUDA0"), gpu=True),
    _Setup(name="one RPC server", kind="same-math", servers=1, args=("-dev", "RPC0")),
    _Setup(name="layer split over two", kind="same-math", servers=2, args=("-dev", "RPC0,RPC1")),
    _Setup(
        name="tensor split over two",
        kind="tensor-split",
        servers=2,
        args=("-dev", "RPC0,RPC1", "-sm", "tensor", "-fit", "off"),
    ),
    # every RPC buffer type is named RPC0[host:port], whatever the device's index
    _Setup(
        name="tensor split + layer 5 -ot on a third",
        kind="tensor-split",
        servers=3,
        args=("-dev", "RPC0,RPC1", "-sm", "tensor", "-fit", "off", "-ot", r"blk\.5\.=RPC0[{c}]"),
        needs=META_OT_PATCH,
    ),
)


_CPU = ("-dev", "none")  # the baseline is the CPU, also in a CUDA build


def _ppl(
    env: SmokeEnv, exe: Path, model: Path, text: Path, base: Path, *extra: str, compare: bool
) -> RunResult:
    # one thread: the distances do not depend on speed, and with as many threads as cores
    # ggml's spinning barriers collapse when anything else runs (a parallel build: 232 s per
    # pass instead of seconds), which would fail the check on a busy machine
    args = ["-m", str(model), "-f", str(text), "-c", str(CTX), "-t", "1", "--kl-divergence-base", str(base)]
    if compare:
        args.append("--kl-divergence")
    return env.run(exe, *args, *extra, timeout=max(env.timeout, RUN_TIMEOUT))


def _fail_line(label: str, r: RunResult) -> str:
    return f"{label}: llama-perplexity {r.brief()}: {telling_line(r)}"


def _real_text(env: SmokeEnv, model: Path) -> str:
    """Greedy words from the real model on this build's CPU (shown so a person sees it works)."""
    cli = env.exe("llama-cli")
    if cli is None:
        return ""
    r = env.run(
        cli,
        "-m",
        str(model),
        "-p",
        GEN_PROMPT,
        "-n",
        "24",
        "--temp",
        "0",
        "-c",
        "256",
        "-t",
        "1",
        "--seed",
        "1",
        "-st",
        "--simple-io",
        "--no-warmup",
    )
    if not r.ok:
        return ""
    text = r.stdout
    idx = text.rfind(GEN_PROMPT)
    if idx >= 0:
        text = text[idx + len(GEN_PROMPT) :]
    keep = [
        ln.strip()
        for ln in text.splitlines()
        if ln.strip() and not ln.lstrip().startswith(("[ Prompt:", "Exiting", ">"))
    ]
    return " ".join(keep)[:120]


def check_kld(env: SmokeEnv) -> CheckResult:
    start = time.monotonic()

    def done(status: CheckStatus, why: str, records: tuple[KldRecord, ...] = ()) -> CheckResult:
        why = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", why)
        return CheckResult(
            name="kld",
            status=status,
            why=why,
            seconds=time.monotonic() - start,
            model=env.model_label if records else "",
            kld=records,
        )

    ppl = env.exe("llama-perplexity")
    if ppl is None:
        return done(CheckStatus.SKIP, "llama-perplexity was not built (a [smoke] tools target)")
    if env.model is None:
        return done(CheckStatus.SKIP, env.model_why)
    model, text = env.model, text_path()
    if env.emulation is not None:
        return _emulated(env, ppl, model, text, done)
    base = env.workdir / "kld-base.bin"
    cpu = _ppl(env, ppl, model, text, base, *_CPU, compare=False)
    if not cpu.ok:
        return done(CheckStatus.FAIL, _fail_line("CPU baseline", cpu))
    records: list[KldRecord] = []
    notes: list[str] = []
    setups = [s for s in SETUPS if (not s.needs or s.needs in env.patches) and (not s.gpu or env.gpu)]
    if env.info.cuda is not None and not env.gpu:
        notes.append("no NVIDIA driver here: the CUDA0 setup was not run")
    if env.exe("ggml-rpc-server") is None:
        notes.append("no ggml-rpc-server: no RPC setup")
        setups = [s for s in setups if not s.servers]
    with servers(env.workdir / "logs") as procs:
        addrs: list[str] = []
        for s in setups:
            try:
                while len(addrs) < s.servers:
                    addrs.append(env.rpc_server(procs, f"kld-{len(addrs)}"))
            except ServerStartError as e:
                return done(CheckStatus.FAIL, f"{s.name}: {e}", tuple(records))
            extra = [a.replace("{c}", addrs[-1]) if "{c}" in a else a for a in s.args]
            rpc = ("--rpc", ",".join(addrs[: s.servers])) if s.servers else ()
            r = _ppl(env, ppl, model, text, base, *rpc, *extra, compare=True)
            stats = parse_kld(r.output) if r.ok else None
            if stats is None:
                return done(CheckStatus.FAIL, _fail_line(s.name, r), tuple(records))
            records.append(judge(s.name, s.kind, stats))
    ref = env.reference_env()
    if ref is not None:
        ref_ppl = ref.exe("llama-perplexity")
        if ref_ppl is None:
            notes.append("the reference has no llama-perplexity: builds not compared")
        else:
            ref_base = env.workdir / "kld-base-reference.bin"
            r = _ppl(ref, ref_ppl, model, text, ref_base, *_CPU, compare=False)
            if not r.ok:
                return done(CheckStatus.FAIL, _fail_line("reference CPU baseline", r), tuple(records))
            r = _ppl(env, ppl, model, text, ref_base, *_CPU, compare=True)
            stats = parse_kld(r.output) if r.ok else None
            if stats is None:
                return done(CheckStatus.FAIL, _fail_line("CPU vs the reference's CPU", r), tuple(records))
            records.append(judge("CPU vs the reference's CPU", "cross-build", stats))
    said = [summary(r) for r in records] + notes
    words = _real_text(env, model)
    if words:
        said.append(f"real model says: {words!r}")
    if not records:  # nothing was compared: not a pass
        return done(CheckStatus.SKIP, "; ".join(["CPU baseline ran, nothing to compare", *said]))
    failed = [r for r in records if not r.passed]
    return done(CheckStatus.FAIL if failed else CheckStatus.PASS, "; ".join(said), tuple(records))


def _emulated(
    env: SmokeEnv,
    ppl: Path,
    model: Path,
    text: Path,
    done: Callable[[CheckStatus, str, tuple[KldRecord, ...]], CheckResult],
) -> CheckResult:
    """As another CPU model: this build's CPU under qemu vs the reference's CPU run natively
    (the reference is this build itself unless --reference names another), over the first
    :data:`EMULATED_CHUNKS` chunks; the RPC setups are the same math on the same CPU and stay out."""
    assert env.emulation is not None
    ref = env.reference_env()
    if ref is None:
        return done(CheckStatus.SKIP, "no native run to compare with", ())
    ref_ppl = ref.exe("llama-perplexity")
    if ref_ppl is None:
        return done(CheckStatus.SKIP, "the reference has no llama-perplexity: nothing to compare", ())
    chunks = ("--chunks", str(EMULATED_CHUNKS))
    native = "natively" if ref.out_dir.resolve() == env.out_dir.resolve() else "the reference natively"
    setup = f"CPU under {env.emulation.describe()} vs {native}"
    base = env.workdir / "kld-base-native.bin"
    r = _ppl(ref, ref_ppl, model, text, base, *_CPU, *chunks, compare=False)
    if not r.ok:
        return done(CheckStatus.FAIL, _fail_line("native CPU baseline", r), ())
    r = _ppl(env, ppl, model, text, base, *_CPU, *chunks, compare=True)
    stats = parse_kld(r.output) if r.ok else None
    if stats is None:
        return done(CheckStatus.FAIL, _fail_line(setup, r), ())
    record = judge(setup, "cross-build", stats)
    said = [summary(record), f"{EMULATED_CHUNKS} chunks of {CTX} tokens"]
    words = _real_text(env, model)
    if words:
        said.append(f"real model says: {words!r}")
    return done(CheckStatus.PASS if record.passed else CheckStatus.FAIL, "; ".join(said), (record,))
