"""CUDA in a recipe: GPU families -> archs, and the recipe checks of the [cuda] section."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.core.errors import RecipeError
from patchkit.spec.cuda import FAMILIES, KNOWN_SMS, family_of, resolve_archs, sm_label
from patchkit.spec.recipe import load_recipe
from tests.fixtures.cuda import (
    archs_of,
    empty_series,
    recipe_from,
)
from tests.fixtures.paths import REPO

# --------------------------------------------------------------------------------------
# families -> archs


def test_families_map_to_the_documented_sms() -> None:
    assert FAMILIES["pascal"] == (60, 61)
    assert FAMILIES["volta"] == (70,)
    assert FAMILIES["turing"] == (75,)
    assert FAMILIES["ampere"] == (80, 86)
    assert FAMILIES["ada"] == (89,)
    assert FAMILIES["hopper"] == (90,)


def test_rig_archs_get_real_sass_each_and_ptx_of_the_highest() -> None:
    a = archs_of("pascal", "turing", 86)
    assert a.sms == (60, 61, 75, 86)
    assert a.ptx == 86
    assert a.cmake == "60-real;61-real;75-real;86-real;86-virtual"
    assert a.names == ["sm_60", "sm_61", "sm_75", "sm_86"]


def test_families_and_numbers_merge_sorted_without_duplicates() -> None:
    a = archs_of("ampere", "sm_86", "Pascal", "compute_60", 89)
    assert a.sms == (60, 61, 80, 86, 89)
    assert a.cmake == "60-real;61-real;80-real;86-real;89-real;89-virtual"
    assert a.requested == ("ampere", "sm_86", "Pascal", "compute_60", "89")


@pytest.mark.parametrize(
    ("word", "expect"),
    [
        ("pascall", 'did you mean "pascal"'),
        ("amper", 'did you mean "ampere"'),
        ("86-real", "not a GPU family or SM number"),
        ("sm_99", "sm_99 is not a CUDA architecture"),
        ("85", "sm_85 is not a CUDA architecture"),
    ],
)
def test_unknown_arch_names_are_recipe_errors(word: str, expect: str) -> None:
    with pytest.raises(RecipeError, match="cuda.archs") as e:
        archs_of("turing", word, source="x.toml")
    assert expect in e.value.message
    assert e.value.message.startswith("x.toml: cuda.archs[1]")
    assert e.value.exit_code == 3


# --------------------------------------------------------------------------------------
# recipes


def test_shipped_cuda_recipes_validate(tmp_path: Path) -> None:
    series = empty_series(tmp_path)
    for name in ("cuda-pascal-ampere", "windows-cuda-pascal-ampere"):
        r = load_recipe(REPO / "recipes" / f"{name}.toml", REPO, series)
        assert r.cuda is not None
        a = r.cuda.archs
        assert a.cmake == "60-real;61-real;75-real;86-real;86-virtual"
        assert set(r.build.targets) == {"llama-server", "llama-cli", "llama-bench", "ggml-rpc-server"}
        assert r.build.defines_dict["GGML_RPC"] == "ON"
        assert r.cuda is not None and not r.cuda.fa_all_quants
    win = load_recipe(REPO / "recipes" / "windows-cuda-pascal-ampere.toml", REPO, series)
    assert win.os == "windows" and win.build.generator == "Ninja" and win.build.toolchain is None


@pytest.mark.parametrize(
    ("body", "expect"),
    [
        (
            '[build]\ntargets = ["t"]\n[build.defines]\nCMAKE_CUDA_ARCHITECTURES = "86"\n'
            '[cuda]\narchs = ["ampere"]\n',
            "set cuda.archs instead",
        ),
        (
            '[build]\ntargets = ["t"]\n[build.defines]\nGGML_NATIVE = true\n[cuda]\narchs = ["ampere"]\n',
            "GGML_NATIVE = ON",
        ),
        (
            '[build]\ntargets = ["t"]\n[build.defines]\nGGML_CUDA = false\n[cuda]\narchs = ["ampere"]\n',
            "contradicts",
        ),
        ('[build]\ntargets = ["t"]\n[build.defines]\nGGML_CUDA = true\n', "no [cuda] section"),
        ('[build]\ntargets = ["t"]\n[cuda]\narchs = ["turing", "ampre"]\n', 'did you mean "ampere"'),
        (
            '[build]\ntargets = ["t"]\ntoolchain = "tc.cmake"\n[platform]\nos = "windows"\n'
            '[cuda]\narchs = ["turing"]\n',
            "needs MSVC",
        ),
    ],
)
def test_recipe_validation_errors(tmp_path: Path, body: str, expect: str) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "tc.cmake").write_text("")
    with pytest.raises(RecipeError) as e:
        recipe_from(tmp_path, body)  # checked once, when the recipe loads
    assert expect in e.value.message
    assert e.value.message.startswith("recipes/r.toml: ")


def test_recipe_without_cuda_has_no_cuda_spec(tmp_path: Path) -> None:
    assert recipe_from(tmp_path, '[build]\ntargets = ["t"]\n').cuda is None


def test_resolve_archs_directly() -> None:
    a = resolve_archs([86, " Ampere ", "SM_75", "compute_90"], source="r.toml")
    assert (a.sms, a.ptx) == ((75, 80, 86, 90), 90)
    assert a.cmake == "75-real;80-real;86-real;90-real;90-virtual"
    assert a.requested == ("86", " Ampere ", "SM_75", "compute_90")  # as the recipe said
    assert a.to_json() == {
        "sms": [75, 80, 86, 90],
        "ptx": 90,
        "requested": list(a.requested),
        "cmake": "75-real;80-real;86-real;90-real;90-virtual",
    }
    assert a.describe() == "sm_75 (turing), sm_80 (ampere), sm_86 (ampere), sm_90 (hopper)"
    assert a.describe([120]) == "sm_120"
    one = resolve_archs(["maxwell"])
    assert one.sms == (50, 52) and one.cmake == "50-real;52-real;52-virtual"


def test_resolve_archs_refusals() -> None:
    with pytest.raises(RecipeError, match=r"^r.toml: cuda.archs must name at least one GPU family$"):
        resolve_archs([], source="r.toml")
    with pytest.raises(RecipeError) as e:
        resolve_archs(["ampere", 99], source="r.toml")
    assert e.value.message == "r.toml: cuda.archs[1]: sm_99 is not a CUDA architecture"
    assert "86" in e.value.hint
    with pytest.raises(RecipeError, match=r"cuda.archs\[0\]: True is not a GPU family") as e:
        resolve_archs([True], source="r.toml")
    assert "families: maxwell, pascal" in e.value.hint


def test_family_and_labels() -> None:
    assert [family_of(s) for s in (52, 61, 70, 75, 86, 89, 90, 120)] == [
        "maxwell",
        "pascal",
        "volta",
        "turing",
        "ampere",
        "ada",
        "hopper",
        None,
    ]
    assert sm_label(61) == "sm_61 (pascal)" and sm_label(120) == "sm_120"
    assert all(sm in KNOWN_SMS for sms in FAMILIES.values() for sm in sms)
