"""A recipe's C library floor (`[release] glibc/glibcxx/cxxabi`) and its build root
(`[build] root`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.core.errors import RecipeError
from tests.unit.spec.test_recipe import GOOD, load, proj  # noqa: F401 (the fixture)


def test_floor_fields_become_symbol_version_families(proj: Path) -> None:  # noqa: F811
    r = load(proj, GOOD + '[release]\nglibc = "2.31"\nglibcxx = "3.4.28"\ncxxabi = "1.3.12"\n')
    assert r.release_floor == (("GLIBC", "2.31"), ("GLIBCXX", "3.4.28"), ("CXXABI", "1.3.12"))
    assert load(proj, GOOD + '[release]\nglibc = "2.17"\n').release_floor == (("GLIBC", "2.17"),)
    assert load(proj, GOOD).release_floor == ()


@pytest.mark.parametrize(
    ("line", "msg"),
    [
        ('glibc = "2"', r"release\.glibc: '2' is not a version"),
        ('glibc = "2.31 "', r"release\.glibc: '2.31 ' is not a version"),
        ('glibcxx = "3.4.x"', r"release\.glibcxx: '3.4.x' is not a version"),
        ('cxxabi = "1.3.12.1.1"', r"release\.cxxabi: .* is not a version"),
        ("glibc = 2.31", r"release\.glibc: must be"),
        ('glibcc = "2.31"', r"release\.glibcc: unknown key.*glibc"),
    ],
)
def test_a_bad_floor_is_one_line_naming_the_key(proj: Path, line: str, msg: str) -> None:  # noqa: F811
    with pytest.raises(RecipeError, match=msg):
        load(proj, GOOD + f"[release]\n{line}\n")


def test_build_root_is_a_root_name(proj: Path) -> None:  # noqa: F811
    text = GOOD.replace("[build]\n", '[build]\nroot = "debian11"\n')
    assert load(proj, text).build.root == "debian11"
    assert load(proj, GOOD).build.root is None
    for bad in ("../x", "Debian11", "", "a b", "debian13", "debian11\\n"):
        with pytest.raises(RecipeError, match="build.root: .* is not one of debian11, debian12"):
            load(proj, GOOD.replace("[build]\n", f'[build]\nroot = "{bad}"\n'))


def test_an_unknown_build_root_is_a_recipe_error_with_a_suggestion(proj: Path) -> None:  # noqa: F811
    """`root = "debian13"` passed the name pattern and failed at build time (exit 2): now
    the recipe error (exit 3) that `list` shows."""
    with pytest.raises(RecipeError, match="'debian13' is not one of debian11, debian12 .did you mean") as e:
        load(proj, GOOD.replace("[build]\n", '[build]\nroot = "debian13"\n'))
    assert e.value.exit_code == 3


def test_the_recipes_roots_are_the_ones_sysroot_prepares() -> None:
    from patchkit.builder.sysroot import KINDS
    from patchkit.spec.recipe import BUILD_ROOTS

    assert tuple(KINDS) == BUILD_ROOTS


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (GOOD.replace('name = "t"', 'name = "nl\\n"'), "name"),
        (GOOD + '[release]\nglibc = "2.31\\n"\n', "release.glibc"),
        (GOOD.replace('targets = ["llama-cli"]', 'targets = ["llama-cli\\n"]'), "build.targets"),
        (GOOD.replace("GGML_RPC = true", '"GGML_RPC\\n" = true'), "build.defines"),
        (GOOD + '[release]\nallow_system = ["libssl.so.3\\n"]\n', "release.allow_system"),
    ],
)
def test_a_final_newline_is_not_accepted_by_any_pattern(proj: Path, text: str, key: str) -> None:  # noqa: F811
    """`$` matches before a final newline: `glibc = "2.31\n"`, `name = "nl\n"` passed."""
    with pytest.raises(RecipeError) as e:
        load(proj, text)
    assert key in e.value.message and "\n" not in e.value.message, e.value.message


def test_the_shipped_portable_recipe_states_debian_11s_floor() -> None:
    from patchkit.spec.recipe import load_recipe
    from patchkit.spec.series import load_series
    from tests.fixtures.paths import REPO

    r = load_recipe(REPO / "recipes" / "cpu-rpc-portable.toml", REPO, load_series(REPO / "patches"))
    assert dict(r.release_floor) == {"GLIBC": "2.31", "GLIBCXX": "3.4.28", "CXXABI": "1.3.12"}
    assert r.build.root == "debian11"
    assert r.build.defines_dict["LLAMA_OPENSSL"] == "OFF"
    assert r.build.defines_dict["GGML_OPENMP"] == "OFF"


def test_list_shows_an_unknown_root_as_the_recipes_error(proj: Path) -> None:  # noqa: F811
    from click.testing import CliRunner

    from patchkit.cli import main

    (proj / "recipes" / "t.toml").write_text(GOOD.replace("[build]\n", '[build]\nroot = "debian13"\n'))
    r = CliRunner().invoke(main, ["--project", str(proj), "list"])
    assert r.exit_code == 3, r.output
    assert "build.root: 'debian13' is not one of debian11, debian12" in r.output
