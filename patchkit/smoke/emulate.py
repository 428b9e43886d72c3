"""Running a build's binaries on another x86-64 CPU model: qemu user mode.

``patchkit smoke OUTDIR --cpu SandyBridge`` runs this build's binaries under
``qemu-x86_64 -cpu SandyBridge``: a release is meant for machines older (or newer) than the
build host, and the CPU variants it ships claim which CPU loads which. This module finds
qemu, checks the model name against qemu's own list, and reads what a run says about the
CPU variant ggml loaded and the features qemu could not give the program (TCG emulates no
AVX-512: a ``-cpu Skylake-Server`` process runs without it, and says so on stderr).
"""

from __future__ import annotations

import dataclasses
import platform
import re
import shutil
from collections.abc import Callable, Mapping

from patchkit.core.errors import ConfigError, ToolMissing
from patchkit.core.proc import RunResult, run
from patchkit.spec.cpuvariants import AVX512, CPU_MODELS, CpuModel, best_variant

__all__ = [
    "QEMU_FEATURES",
    "Emulation",
    "expected_variant",
    "find_emulation",
    "loaded_variant",
    "qemu_models",
    "unemulated_features",
]

_QEMU = ("qemu-x86_64", "qemu-x86_64-static")

# qemu's names of the CPUID features ggml's variant score reads -> ggml's names
QEMU_FEATURES: Mapping[str, str] = {
    "sse4.2": "SSE42",
    "sse4_2": "SSE42",
    "avx": "AVX",
    "f16c": "F16C",
    "fma": "FMA",
    "avx2": "AVX2",
    "bmi2": "BMI2",
    "avx-vnni": "AVX_VNNI",
    "avx512f": AVX512,
    "avx512cd": AVX512,
    "avx512vl": AVX512,
    "avx512dq": AVX512,
    "avx512bw": AVX512,
    "avx512vbmi": "AVX512_VBMI",
    "avx512vnni": "AVX512_VNNI",
    "avx512-bf16": "AVX512_BF16",
    "amx-tile": "AMX_TILE",
    "amx-int8": "AMX_INT8",
}

# ggml's load_backend: "load_backend: loaded CPU backend from /opt/llama/bin/libggml-cpu-haswell.so"
# (Windows: "... from Z:\\opt\\llama\\bin\\ggml-cpu-haswell.dll")
_LOADED = re.compile(r"loaded CPU backend from \S*?ggml-cpu-([A-Za-z0-9_]+)\.(?:so|dll)\b")
# qemu-x86_64: warning: TCG doesn't support requested feature: CPUID.07H:EBX.avx512f [bit 16]
_UNSUPPORTED = re.compile(r"doesn't support requested feature: \S+?\.([A-Za-z0-9_.-]+) \[bit")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Emulation:
    """This build's binaries run as ``qemu -cpu model``."""

    qemu: str
    model: str

    @property
    def launcher(self) -> tuple[str, ...]:
        return (self.qemu, "-cpu", self.model)

    def describe(self) -> str:
        return f"qemu -cpu {self.model}"


def qemu_models(text: str) -> tuple[str, ...]:
    """The model names of ``qemu-x86_64 -cpu help`` (``x86 Haswell  Intel Core ...``)."""
    names = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "x86":
            names.append(parts[1])
    return tuple(names)


def find_emulation(
    model: str,
    *,
    os_name: str,
    arch: str,
    env: Mapping[str, str],
    which: Callable[[str], str | None] = shutil.which,
    machine: str | None = None,
    run_: Callable[..., RunResult] = run,
) -> Emulation:
    """qemu user mode for a Linux x86_64 build on this machine, as CPU ``model``.

    ConfigError when the build is not one qemu-x86_64 runs or ``model`` is not one of
    qemu's; ToolMissing when qemu is not installed.
    """
    if os_name != "linux" or arch != "x86_64":
        raise ConfigError(
            f"--cpu runs Linux x86_64 builds under qemu-x86_64; this build is {os_name} {arch}",
            hint="leave out --cpu for this build",
        )
    host = (machine if machine is not None else platform.machine()).lower()
    if host not in ("x86_64", "amd64"):
        raise ConfigError(
            f"--cpu needs an x86_64 machine (qemu user mode changes the CPU model, not the "
            f"instruction set); this one is {host}",
            hint="run it on an x86_64 Linux machine",
        )
    qemu = next((p for p in (which(name) for name in _QEMU) if p), None)
    if qemu is None:
        raise ToolMissing(
            "--cpu needs qemu-x86_64 (qemu user mode), which is not installed",
            hint="apt-get install qemu-user (Debian/Ubuntu), dnf install qemu-user (Fedora)",
        )
    r = run_([qemu, "-cpu", "help"], timeout=30, env=dict(env), start_error="result")
    known = qemu_models(r.stdout)
    if not known:
        raise ToolMissing(f"{qemu} -cpu help listed no CPU models ({r.brief()})", hint="reinstall qemu-user")
    if model not in known:
        close = [k for k in known if k.lower() == model.lower()]
        listed = f"`{qemu} -cpu help` lists them, e.g. {', '.join(known[:6])}"
        hint = f"did you mean {close[0]}?" if close else listed
        raise ConfigError(f"--cpu {model!r} is not a CPU model qemu knows", hint=hint)
    return Emulation(qemu=qemu, model=model)


def loaded_variant(text: str) -> str | None:
    """The CPU variant a run loaded (``haswell``), from ggml's ``load_backend`` line."""
    m = _LOADED.search(text)
    return m.group(1) if m else None


def unemulated_features(text: str) -> tuple[str, ...]:
    """The CPUID features qemu said it could not give the program (``avx512f``, ...)."""
    return tuple(dict.fromkeys(m.group(1) for m in _UNSUPPORTED.finditer(text)))


def _model(qemu_name: str) -> CpuModel | None:
    return next((m for m in CPU_MODELS if m.qemu == qemu_name), None)


def expected_variant(
    qemu_name: str, built: tuple[str, ...], unemulated: tuple[str, ...]
) -> tuple[bool, str | None, tuple[str, ...]]:
    """Which of ``built`` ggml should load as ``qemu -cpu qemu_name``: (known, variant,
    ggml features qemu left out). ``known`` is False for a model the table lacks."""
    model = _model(qemu_name)
    if model is None:
        return False, None, ()
    lost = tuple(dict.fromkeys(QEMU_FEATURES[f] for f in unemulated if f in QEMU_FEATURES))
    have = model.features - frozenset(lost)
    return True, best_variant(have, built), tuple(f for f in lost if f in model.features)
