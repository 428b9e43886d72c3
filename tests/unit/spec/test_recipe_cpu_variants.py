"""`[build] cpu_variants`: parsed, checked against the pin's variants and the defines."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.core.errors import RecipeError
from patchkit.spec import cpuvariants
from patchkit.spec.recipe import list_recipes, load_recipe
from patchkit.spec.series import load_series
from tests.fixtures.paths import REPO

HEAD = f"""\
name = "t"
[upstream]
url = "https://example.invalid/llama.cpp"
commit = "{"a" * 40}"
[build]
targets = ["llama-cli"]
"""


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    (tmp_path / "recipes").mkdir()
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "series").write_text("# none\n")
    return tmp_path


def load(proj: Path, text: str):  # type: ignore[no-untyped-def]
    path = proj / "recipes" / "t.toml"
    path.write_text(text)
    return load_recipe(path, proj, load_series(proj / "patches"))


def test_a_list_of_variants_parses(proj: Path) -> None:
    r = load(proj, HEAD + 'cpu_variants = ["x64", "sse42", "haswell"]\n')
    assert r.build.cpu_variants == ("x64", "sse42", "haswell")


def test_absent_or_empty_keeps_one_backend(proj: Path) -> None:
    assert load(proj, HEAD).build.cpu_variants == ()
    assert load(proj, HEAD + "cpu_variants = []\n").build.cpu_variants == ()
    # not x86: nothing to choose, and absent is fine
    assert load(proj, HEAD + '[platform]\narch = "aarch64"\n').build.cpu_variants == ()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            'cpu_variants = ["x64", "haswel"]\n',
            "t.toml: build.cpu_variants[1]: 'haswel' is not a CPU variant of ggml at the pin",
        ),
        ('cpu_variants = ["x64", "x64"]\n', "build.cpu_variants[1]: 'x64' is listed twice"),
        ('cpu_variants = "all"\n', "build.cpu_variants"),
        ("cpu_variants = [1]\n", "build.cpu_variants[0]"),
        (
            'cpu_variants = ["x64"]\n[platform]\narch = "aarch64"\n',
            "build.cpu_variants: lists x86-64 CPU variants, but platform.arch is 'aarch64'",
        ),
        (
            'cpu_variants = ["x64"]\n[build.defines]\nGGML_NATIVE = true\n',
            "build.defines.GGML_NATIVE: is ON, but build.cpu_variants needs GGML_NATIVE=OFF",
        ),
        (
            'cpu_variants = ["x64"]\n[build.defines]\nBUILD_SHARED_LIBS = false\n',
            "build.defines.BUILD_SHARED_LIBS: is OFF, but build.cpu_variants needs BUILD_SHARED_LIBS=ON",
        ),
        (
            'cpu_variants = ["x64"]\n[build.defines]\nGGML_BACKEND_DL = false\n',
            "needs GGML_BACKEND_DL=ON",
        ),
    ],
)
def test_bad_lists_are_recipe_errors(proj: Path, extra: str, message: str) -> None:
    with pytest.raises(RecipeError) as e:
        load(proj, HEAD + extra)
    assert message in e.value.message
    assert e.value.exit_code == 3
    assert "\n" not in e.value.message


def test_a_misspelt_variant_gets_a_suggestion(proj: Path) -> None:
    with pytest.raises(RecipeError) as e:
        load(proj, HEAD + 'cpu_variants = ["sandybrige"]\n')
    assert e.value.message.endswith('(did you mean "sandybridge"?)')
    with pytest.raises(RecipeError) as e:
        load(proj, HEAD + 'cpu_variants = ["pentium"]\n')
    assert "'pentium' is not a CPU variant of ggml at the pin (it has x64, sse42," in e.value.message


def test_the_x86_64_recipes_build_every_variant_gcc_10_can(tmp_path: Path) -> None:
    series = load_series(REPO / "patches")
    seen = set()
    for path in list_recipes(REPO):
        r = load_recipe(path, REPO, series)
        if r.arch == "x86_64" and r.build.toolchain is None and r.os == "linux":
            assert r.build.cpu_variants == cpuvariants.DEFAULT_X86_64, r.name
            seen.add(r.name)
    assert {"cpu-rpc", "cuda-pascal-ampere", "cuda-turing-ampere"} <= seen
    win = load_recipe(REPO / "recipes" / "windows-cpu-rpc.toml", REPO, series)
    assert win.build.cpu_variants == cpuvariants.DEFAULT_X86_64
