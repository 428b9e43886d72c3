"""The CPU model table against qemu's CPU models: a probe reads the CPUID bits ggml's
score reads, run under ``qemu-x86_64 -cpu MODEL``, must find the features the table
gives each model (qemu's TCG has no AVX-512, so the AVX-512 models are not compared)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from patchkit.spec import cpuvariants as cv

QEMU = shutil.which("qemu-x86_64")
pytestmark = pytest.mark.skipif(
    QEMU is None or shutil.which("gcc") is None, reason="needs qemu-x86_64 (qemu-user) and gcc"
)

PROBE = r"""
#include <cpuid.h>
#include <stdio.h>
int main(void) {
    unsigned a, b, c, d, a7 = 0, b7 = 0, c7 = 0, d7 = 0, a71 = 0, x;
    __get_cpuid(1, &a, &b, &c, &d);
    if (__get_cpuid_max(0, 0) >= 7) {
        __cpuid_count(7, 0, a7, b7, c7, d7);
        __cpuid_count(7, 1, a71, x, x, x);
    }
#define P(name, cond) if (cond) printf("%s ", name)
    P("SSE42", c >> 20 & 1); P("AVX", c >> 28 & 1); P("F16C", c >> 29 & 1); P("FMA", c >> 12 & 1);
    P("AVX2", b7 >> 5 & 1); P("BMI2", b7 >> 8 & 1);
    P("AVX512", (b7 >> 16 & 1) && (b7 >> 17 & 1) && (b7 >> 28 & 1) && (b7 >> 30 & 1) && (b7 >> 31 & 1));
    P("AVX512_VBMI", c7 >> 1 & 1); P("AVX512_VNNI", c7 >> 11 & 1); P("AVX512_BF16", a71 >> 5 & 1);
    P("AVX_VNNI", a71 >> 4 & 1); P("AMX_TILE", d7 >> 24 & 1); P("AMX_INT8", d7 >> 25 & 1);
    printf("\n");
    return 0;
}
"""


def test_qemu_models_have_the_features_the_table_says(tmp_path: Path) -> None:
    (tmp_path / "probe.c").write_text(PROBE)
    subprocess.run(
        ["gcc", "-O1", "-static", "probe.c", "-o", "probe"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=120,
    )
    compared = []
    for model in cv.CPU_MODELS:
        if model.qemu is None or cv.AVX512 in model.features:
            continue
        res = subprocess.run(
            [str(QEMU), "-cpu", model.qemu, str(tmp_path / "probe")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 0, res.stderr
        assert frozenset(res.stdout.split()) == model.features, (model.qemu, res.stdout)
        compared.append(model.qemu)
    assert {"qemu64", "Nehalem", "SandyBridge", "IvyBridge", "Opteron_G5", "Haswell"} <= set(compared)
