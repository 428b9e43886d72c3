"""The CPU variant table (spec.cpuvariants): ggml's variants at the pin, its score, and
which variant each CPU model loads."""

from __future__ import annotations

import itertools

import pytest

from patchkit.spec import cpuvariants as cv


def test_the_table_is_ggmls_at_the_pin() -> None:
    # ggml/src/CMakeLists.txt at bb4caa754, lines 493-515: names, order, features
    assert [v.name for v in cv.VARIANTS] == [
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
        "alderlake",
        "sapphirerapids",
    ]
    assert cv.variant("sandybridge").features == ("SSE42", "AVX")
    assert cv.variant("piledriver").features == ("SSE42", "AVX", "F16C", "FMA")
    assert cv.variant("icelake").features[-3:] == ("AVX512", "AVX512_VBMI", "AVX512_VNNI")
    assert cv.variant("alderlake").features[-1] == "AVX_VNNI"
    # upstream adds these for GCC/Clang only (not MSVC)
    assert {v.name for v in cv.VARIANTS if not v.msvc} == {
        "ivybridge",
        "piledriver",
        "cooperlake",
        "zen4",
        "sapphirerapids",
    }
    with pytest.raises(KeyError):
        cv.variant("haswel")


def test_score_is_ggmls() -> None:
    # cpu-feats.cpp: 1 + the weight of each compiled feature; 0 if the CPU lacks one
    assert cv.score(cv.variant("x64"), ()) == 1
    assert cv.score(cv.variant("sse42"), {"SSE42"}) == 1 + 4
    assert cv.score(cv.variant("haswell"), {"SSE42", "AVX", "F16C", "FMA", "AVX2"}) == 0  # no BMI2
    assert cv.score(cv.variant("haswell"), {"SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2"}) == 64
    # AMX_TILE is compiled in but not checked; AMX_INT8 is
    spr = cv.variant("sapphirerapids")
    assert cv.score(spr, set(spr.features) - {"AMX_TILE"}) > 0
    assert cv.score(spr, set(spr.features) - {"AMX_INT8"}) == 0


def _models(built: tuple[str, ...]) -> dict[str, str | None]:
    return {(m.qemu or m.name): v for m, v in cv.model_table(built)}


def test_cpu_models_load_the_variant_of_their_generation() -> None:
    every = tuple(v.name for v in cv.VARIANTS)
    t = _models(every)
    assert t["qemu64"] == "x64" and t["Penryn"] == "x64"
    assert t["Nehalem"] == "sse42" and t["Westmere"] == "sse42"
    assert t["SandyBridge"] == "sandybridge" and t["Opteron_G4"] == "sandybridge"
    assert t["IvyBridge"] == "ivybridge"
    assert t["Opteron_G5"] == "piledriver"
    assert t["Haswell"] == t["Broadwell"] == t["EPYC"] == t["EPYC-Milan"] == "haswell"
    assert t["Skylake-Server"] == "skylakex"
    assert t["Cascadelake-Server"] == "cascadelake"
    assert t["Cooperlake"] == "cooperlake"
    assert t["Icelake-Server"] == "icelake"
    assert t["Alder Lake"] == "alderlake"
    assert t["Sapphire Rapids (Xeon Scalable 4th gen)"] == "sapphirerapids"
    assert t["Zen 4 (EPYC Genoa, Ryzen 7000)"] == "zen4"


def test_the_default_list_covers_every_model() -> None:
    """GCC 10 builds neither alderlake nor sapphirerapids: their CPUs load haswell and zen4."""
    assert "alderlake" not in cv.DEFAULT_X86_64 and "sapphirerapids" not in cv.DEFAULT_X86_64
    t = _models(cv.DEFAULT_X86_64)
    assert None not in t.values()
    assert t["Alder Lake"] == "haswell"
    assert t["Sapphire Rapids (Xeon Scalable 4th gen)"] == "zen4"
    # a list without the baseline leaves the oldest CPUs without a backend
    assert _models(("haswell",))["Nehalem"] is None


def test_no_model_is_given_a_variant_it_cannot_run() -> None:
    """Whatever is built, the chosen variant's features are the CPU's: no SIGILL."""
    names = [v.name for v in cv.VARIANTS]
    for k in (1, 2, 3):
        for built in itertools.combinations(names, k):
            for model, chosen in cv.model_table(built):
                if chosen is not None:
                    assert set(cv.variant(chosen).features) - {"AMX_TILE"} <= model.features, (
                        model.name,
                        chosen,
                    )


def test_names_and_files() -> None:
    assert cv.variant_of_target("ggml-cpu-haswell") == "haswell"
    assert cv.variant_of_target("ggml-cpu") is None and cv.variant_of_target("ggml-cpu-nope") is None
    assert cv.module_file("zen4", "linux") == "libggml-cpu-zen4.so"
    assert cv.module_file("zen4", "windows") == "ggml-cpu-zen4.dll"
