"""ggml's x86-64 CPU backend variants, and which one a given CPU model loads.

With ``GGML_BACKEND_DL=ON`` and ``GGML_CPU_ALL_VARIANTS=ON`` ggml builds its CPU backend
once per variant as a loadable module (``libggml-cpu-<name>.so``, Windows
``ggml-cpu-<name>.dll``, the CMake target ``ggml-cpu-<name>``) and, at start-up, loads the
one whose score on this CPU is highest (``ggml_backend_cpu_x86_score``): a variant built
with a feature scores 0 on a CPU without it, every feature it has adds its weight.

:data:`VARIANTS` is the table at the pinned llama.cpp (bb4caa754,
``ggml/src/CMakeLists.txt`` lines 485-515, the weights from
``ggml/src/ggml-cpu/arch/x86/cpu-feats.cpp``), :data:`CPU_MODELS` the CPUs (qemu's model
names where qemu has one) with the features ggml checks, and :func:`model_table` the
variant each of them loads from a given set of built variants.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

__all__ = [
    "AVX512",
    "CPU_MODELS",
    "DEFAULT_X86_64",
    "FEATURE_WEIGHTS",
    "VARIANTS",
    "CpuModel",
    "Variant",
    "best_variant",
    "model_table",
    "module_file",
    "score",
    "variant",
    "variant_of_target",
]

# ggml's names for what a variant is compiled with (GGML_<feature>); AVX512 stands for
# AVX512F + CD + VL + DQ + BW, as ggml's score checks them
AVX512 = "AVX512"

# ggml_backend_cpu_x86_score: 1 + the weight of every feature the variant was built with,
# or 0 when the CPU lacks one of them. AMX_TILE is compiled in but not checked.
FEATURE_WEIGHTS: Mapping[str, int] = {
    "FMA": 1,
    "F16C": 1 << 1,
    "SSE42": 1 << 2,
    "BMI2": 1 << 3,
    "AVX": 1 << 4,
    "AVX2": 1 << 5,
    "AVX_VNNI": 1 << 6,
    AVX512: 1 << 7,
    "AVX512_VBMI": 1 << 8,
    "AVX512_BF16": 1 << 9,
    "AVX512_VNNI": 1 << 10,
    "AMX_INT8": 1 << 11,
}


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str  # the tag: target ggml-cpu-<name>
    features: tuple[str, ...]  # GGML_<feature> turned on for it
    msvc: bool = True  # does upstream define it for MSVC builds too


_HASWELL = ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2")

# In upstream's order (ggml/src/CMakeLists.txt at bb4caa754).
VARIANTS: tuple[Variant, ...] = (
    Variant("x64", ()),
    Variant("sse42", ("SSE42",)),
    Variant("sandybridge", ("SSE42", "AVX")),
    Variant("ivybridge", ("SSE42", "AVX", "F16C"), msvc=False),
    Variant("piledriver", ("SSE42", "AVX", "F16C", "FMA"), msvc=False),
    Variant("haswell", _HASWELL),
    Variant("skylakex", (*_HASWELL, AVX512)),
    Variant("cannonlake", (*_HASWELL, AVX512, "AVX512_VBMI")),
    Variant("cascadelake", (*_HASWELL, AVX512, "AVX512_VNNI")),
    Variant("icelake", (*_HASWELL, AVX512, "AVX512_VBMI", "AVX512_VNNI")),
    Variant("cooperlake", (*_HASWELL, AVX512, "AVX512_VNNI", "AVX512_BF16"), msvc=False),
    Variant("zen4", (*_HASWELL, AVX512, "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"), msvc=False),
    Variant("alderlake", (*_HASWELL, "AVX_VNNI")),
    Variant(
        "sapphirerapids",
        (*_HASWELL, AVX512, "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_TILE", "AMX_INT8"),
        msvc=False,
    ),
)
_BY_NAME = {v.name: v for v in VARIANTS}

# The recipes' default: every variant GCC 10 (Debian 11's, the oldest compiler patchkit
# builds releases with) can compile. alderlake (-mavxvnni) and sapphirerapids (-mamx-*)
# need GCC 11; their CPUs load haswell and zen4 instead, so every x86-64 CPU is covered.
DEFAULT_X86_64: tuple[str, ...] = (
    "x64",
    "sse42",
    "sandybridge",
    "ivybridge",
    "piledriver",
    "haswell",
    "skylakex",
    "cannonlake",
    "cascadelake",
    "icelake",
    "cooperlake",
    "zen4",
)


@dataclasses.dataclass(frozen=True)
class CpuModel:
    name: str  # as people say it
    qemu: str | None  # qemu-x86_64 -cpu NAME, when qemu (7.2) has the model
    features: frozenset[str]  # those of FEATURE_WEIGHTS (and AMX_TILE) the CPU has


def _cpu(name: str, qemu: str | None, *features: str) -> CpuModel:
    return CpuModel(name, qemu, frozenset(features))


_HSW = ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2")
_SKX = (*_HSW, AVX512)

# Oldest first. The features are the CPUID bits ggml's score reads (qemu's model
# definitions for the qemu ones: target/i386/cpu.c).
CPU_MODELS: tuple[CpuModel, ...] = (
    _cpu("qemu64 (x86-64 baseline)", "qemu64"),
    _cpu("Core 2 (Conroe)", "Conroe"),
    _cpu("Core 2 (Penryn)", "Penryn"),
    _cpu("Nehalem", "Nehalem", "SSE42"),
    _cpu("Westmere", "Westmere", "SSE42"),
    _cpu("Atom (Denverton)", "Denverton", "SSE42"),
    _cpu("Sandy Bridge (Xeon E5 v1)", "SandyBridge", "SSE42", "AVX"),
    _cpu("Bulldozer (Opteron 62xx)", "Opteron_G4", "SSE42", "AVX"),
    _cpu("Ivy Bridge (Xeon E5 v2)", "IvyBridge", "SSE42", "AVX", "F16C"),
    _cpu("Piledriver (Opteron 63xx)", "Opteron_G5", "SSE42", "AVX", "F16C", "FMA"),
    _cpu("Haswell (Xeon E5 v3)", "Haswell", *_HSW),
    _cpu("Broadwell (Xeon E5 v4)", "Broadwell", *_HSW),
    _cpu("Skylake (client)", "Skylake-Client", *_HSW),
    _cpu("Zen 1 (EPYC Naples)", "EPYC", *_HSW),
    _cpu("Zen 2 (EPYC Rome)", "EPYC-Rome", *_HSW),
    _cpu("Zen 3 (EPYC Milan)", "EPYC-Milan", *_HSW),
    _cpu("Skylake-SP (Xeon Scalable 1st gen)", "Skylake-Server", *_SKX),
    _cpu("Cannon Lake", None, *_SKX, "AVX512_VBMI"),
    _cpu("Cascade Lake (Xeon Scalable 2nd gen)", "Cascadelake-Server", *_SKX, "AVX512_VNNI"),
    _cpu("Cooper Lake", "Cooperlake", *_SKX, "AVX512_VNNI", "AVX512_BF16"),
    _cpu("Ice Lake-SP (Xeon Scalable 3rd gen)", "Icelake-Server", *_SKX, "AVX512_VBMI", "AVX512_VNNI"),
    _cpu("Alder Lake", None, *_HSW, "AVX_VNNI"),
    _cpu(
        "Sapphire Rapids (Xeon Scalable 4th gen)",
        None,
        *_SKX,
        "AVX_VNNI",
        "AVX512_VBMI",
        "AVX512_VNNI",
        "AVX512_BF16",
        "AMX_TILE",
        "AMX_INT8",
    ),
    _cpu("Zen 4 (EPYC Genoa, Ryzen 7000)", None, *_SKX, "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"),
)


def variant(name: str) -> Variant:
    """The variant called ``name``; KeyError for a name the pin does not know."""
    return _BY_NAME[name]


def variant_of_target(target: str) -> str | None:
    """``ggml-cpu-haswell`` -> ``haswell``; None for any other target."""
    if target.startswith("ggml-cpu-") and target[len("ggml-cpu-") :] in _BY_NAME:
        return target[len("ggml-cpu-") :]
    return None


def module_file(name: str, os_name: str) -> str:
    """The module a variant builds: ``libggml-cpu-<name>.so`` / ``ggml-cpu-<name>.dll``."""
    return f"ggml-cpu-{name}.dll" if os_name == "windows" else f"libggml-cpu-{name}.so"


def score(v: Variant, cpu: Iterable[str]) -> int:
    """ggml's score of variant ``v`` on a CPU with ``cpu`` features: 0 when it cannot run."""
    have = frozenset(cpu)
    total = 1
    for feature in v.features:
        weight = FEATURE_WEIGHTS.get(feature)
        if weight is None:
            continue  # AMX_TILE: compiled in, not checked
        if feature not in have:
            return 0
        total += weight
    return total


def best_variant(cpu: Iterable[str], built: Iterable[str]) -> str | None:
    """The variant ggml loads on this CPU from ``built`` (the highest score, the first of
    equals in upstream's order); None when none of them can run on it."""
    have = frozenset(cpu)
    names = set(built)
    best: tuple[int, str] | None = None
    for v in VARIANTS:
        if v.name in names:
            s = score(v, have)
            if s > 0 and (best is None or s > best[0]):
                best = (s, v.name)
    return best[1] if best else None


def model_table(built: Iterable[str]) -> tuple[tuple[CpuModel, str | None], ...]:
    """Each known CPU model and the variant it loads from ``built`` (None: none runs)."""
    names = tuple(built)
    return tuple((m, best_variant(m.features, names)) for m in CPU_MODELS)
