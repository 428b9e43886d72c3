"""The x86-64 instruction set is said, not left to ggml's default (which SOURCE_DATE_EPOCH
and cross-compiling turn down to SSE2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.builder.configure import X86_64_ISA_DEFINES, offline_defines
from patchkit.spec.recipe import load_recipe
from patchkit.spec.series import load_series
from tests.fixtures.project import write_recipe


def _recipe(tmp_path: Path, extra: str = "") -> object:
    (tmp_path / "recipes").mkdir()
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "series").write_text("# series\n")
    path = write_recipe(
        tmp_path, "isa", url="https://example.invalid/llama.cpp", commit="a" * 40, extra=extra
    )
    return load_recipe(path, tmp_path, load_series(tmp_path / "patches"))


def test_x86_64_recipes_get_ggmls_own_non_native_instruction_set(tmp_path: Path) -> None:
    d = offline_defines(_recipe(tmp_path))  # type: ignore[arg-type]
    assert d["GGML_NATIVE"] == "OFF"
    for k in ("GGML_SSE42", "GGML_AVX", "GGML_AVX2", "GGML_BMI2", "GGML_FMA", "GGML_F16C"):
        assert d[k] == "ON"
    assert "GGML_AVX512" not in d  # not in ggml's set either: it would not run on most CPUs


@pytest.mark.parametrize(
    ("extra", "want"),
    [
        ("GGML_AVX2 = false\n", {"GGML_AVX2": "OFF", "GGML_AVX": "ON"}),  # the recipe wins
        ('\n[platform]\nos = "linux"\narch = "aarch64"\n', {}),  # not x86: nothing said
    ],
)
def test_a_recipe_overrides_and_other_archs_get_none(
    tmp_path: Path, extra: str, want: dict[str, str]
) -> None:
    d = offline_defines(_recipe(tmp_path, extra))  # type: ignore[arg-type]
    for k, v in want.items():
        assert d[k] == v
    if not want:
        assert not set(X86_64_ISA_DEFINES) & set(d)
