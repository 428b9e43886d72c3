"""builder.variants: the defines, the configure's include, the targets, the record."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.builder import cmake as cm
from patchkit.builder import variants
from patchkit.builder.configure import X86_64_ISA_DEFINES, offline_defines
from patchkit.core.errors import BuildError, RecipeError
from patchkit.spec.recipe import Recipe, load_recipe
from patchkit.spec.series import load_series
from tests.fixtures.project import write_recipe


def _recipe(tmp_path: Path, extra: str = "") -> Recipe:
    (tmp_path / "recipes").mkdir(exist_ok=True)
    (tmp_path / "patches").mkdir(exist_ok=True)
    (tmp_path / "patches" / "series").write_text("# series\n")
    path = write_recipe(
        tmp_path,
        "v",
        url="https://example.invalid/llama.cpp",
        commit="a" * 40,
        targets='["llama-cli"]',
        extra=extra,
    )
    return load_recipe(path, tmp_path, load_series(tmp_path / "patches"))


def _with(tmp_path: Path, names: str) -> Recipe:
    # [build.defines] is the last table write_recipe writes: put the list before it
    r = _recipe(tmp_path)
    text = r.path.read_text().replace("[build.defines]", f"cpu_variants = {names}\n\n[build.defines]")
    r.path.write_text(text)
    return load_recipe(r.path, tmp_path, load_series(tmp_path / "patches"))


def test_variants_configure_loadable_backends_without_the_single_isa(tmp_path: Path) -> None:
    r = _with(tmp_path, '["x64", "haswell"]')
    d = offline_defines(r)
    assert d["GGML_BACKEND_DL"] == "ON" and d["GGML_CPU_ALL_VARIANTS"] == "ON"
    assert d["GGML_NATIVE"] == "OFF" and d["BUILD_SHARED_LIBS"] == "ON"
    assert d["PATCHKIT_CPU_VARIANTS"] == "x64;haswell"
    assert not set(X86_64_ISA_DEFINES) & set(d)  # each variant says its own
    assert variants.build_targets(r) == ("llama-cli", "ggml-cpu-x64", "ggml-cpu-haswell")


def test_without_variants_nothing_changes(tmp_path: Path) -> None:
    r = _recipe(tmp_path)
    d = offline_defines(r)
    assert "GGML_BACKEND_DL" not in d and "PATCHKIT_CPU_VARIANTS" not in d
    assert d["GGML_AVX2"] == "ON"
    assert variants.variant_defines(r) == {}
    assert variants.include_define(r, tmp_path) == {}
    assert variants.build_targets(r) == ("llama-cli",)
    assert variants.variants_record(r, []) is None


def test_the_include_is_written_once_and_only_for_the_configure(tmp_path: Path) -> None:
    r = _with(tmp_path, '["x64"]')
    work = tmp_path / "work"
    work.mkdir()
    d = variants.configure_defines(r, {"A": "1"}, work)
    inc = Path(d["CMAKE_PROJECT_ggml_INCLUDE"])
    assert d["A"] == "1" and inc.parent == work
    text = inc.read_text()
    assert "variable_watch(GGML_CPU_TAG_NAME" in text and "PATCHKIT_CPU_VARIANTS" in text
    before = inc.stat().st_mtime_ns
    variants.configure_defines(r, {}, work)
    assert inc.stat().st_mtime_ns == before  # unchanged: not rewritten
    assert "CMAKE_PROJECT_ggml_INCLUDE" not in offline_defines(r)  # never recorded


def _model(*names: str) -> cm.CodeModel:
    targets = {
        str(i): cm.Target(name=n, type="MODULE_LIBRARY", artifacts=(), dependencies=())
        for i, n in enumerate(names)
    }
    return cm.CodeModel(targets=targets, compilers={})


def test_a_chosen_variant_the_upstream_lacks_is_a_recipe_error(tmp_path: Path) -> None:
    r = _with(tmp_path, '["x64", "zen4"]')
    variants.check_variants(r, _model("ggml", "ggml-cpu-x64", "ggml-cpu-zen4"))
    with pytest.raises(RecipeError) as e:
        variants.check_variants(r, _model("ggml", "ggml-cpu-x64"))
    assert "defines no CPU variant 'zen4'" in e.value.message and e.value.exit_code == 3
    with pytest.raises(RecipeError) as e:
        variants.check_variants(r, _model("ggml", "ggml-cpu", "ggml-cpu-x64", "ggml-cpu-zen4"))
    assert "GGML_CPU_ALL_VARIANTS had no effect" in e.value.message


def test_the_record_lists_modules_and_the_model_table(tmp_path: Path) -> None:
    r = _with(tmp_path, '["haswell", "x64"]')
    arts = [
        cm.Artifact(target="llama-cli", type="EXECUTABLE", path=tmp_path / "bin" / "llama-cli"),
        cm.Artifact(target="ggml-cpu-x64", type="MODULE_LIBRARY", path=tmp_path / "bin/libggml-cpu-x64.so"),
        cm.Artifact(
            target="ggml-cpu-haswell", type="MODULE_LIBRARY", path=tmp_path / "bin/libggml-cpu-haswell.so"
        ),
    ]
    rec = variants.variants_record(r, arts)
    assert rec is not None
    assert rec.names == ("x64", "haswell")  # upstream's order
    assert rec.variants[1].file == "bin/libggml-cpu-haswell.so"
    table = {m.qemu: m.variant for m in rec.models}
    assert table["SandyBridge"] == "x64" and table["Haswell"] == "haswell"
    with pytest.raises(BuildError):
        variants.variants_record(r, arts[:2])
