"""Recipe validation: every bad input gets a one-line error naming the file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.core.errors import RecipeError
from patchkit.spec.recipe import load_recipe, resolve_recipe_path
from patchkit.spec.series import load_series
from tests.fixtures.paths import REPO

COMMIT = "a" * 40
GOOD = f"""\
name = "t"
[upstream]
url = "https://example.invalid/llama.cpp"
commit = "{COMMIT}"
[build]
targets = ["llama-cli"]
[build.defines]
GGML_RPC = true
"""


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    (tmp_path / "recipes").mkdir()
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "series").write_text(
        "0001-guard.patch sha256=" + "0" * 64 + "\n0002-exp.patch sha256=" + "0" * 64 + "\n"
    )
    for name, exp in (("0001-guard.patch", "no"), ("0002-exp.patch", "yes")):
        (tmp_path / "patches" / name).write_text(
            f"Subject: s\nWhy: w\nUpstream-Status: pending\nWhen: ..\nExperimental: {exp}\n"
            f"Default: {'no' if exp == 'yes' else 'yes'}\n\n"
            "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
        )
    (tmp_path / "toolchain.cmake").write_text("# tc\n")
    return tmp_path


def load(proj: Path, text: str):
    path = proj / "recipes" / "t.toml"
    path.write_text(text)
    return load_recipe(path, proj, load_series(proj / "patches"))


def test_good_recipe_parses_into_frozen_dataclass(proj: Path) -> None:
    r = load(proj, GOOD)
    assert r.name == "t"
    assert r.upstream.commit == COMMIT
    assert r.build.targets == ("llama-cli",)
    assert r.build.defines_dict == {"GGML_RPC": "ON"}
    assert r.patch_names == ("guard",)  # default patches only, not the experimental one
    assert len(r.sha256) == 64
    with pytest.raises(AttributeError):
        r.name = "x"  # type: ignore[misc]


def test_experimental_patch_needs_opt_in(proj: Path) -> None:
    text = GOOD.replace('name = "t"', 'name = "t"\npatches = ["exp", "guard"]\nallow_experimental = true')
    r = load(proj, text)
    assert r.patch_names == ("guard", "exp")  # series order, not recipe order


BAD = [
    ("unknown top key", "nmae = 'x'\n" + GOOD, 'nmae: unknown key (did you mean "name"?)'),
    (
        "unknown section key",
        GOOD.replace("url =", "ulr =", 1),
        'upstream.ulr: unknown key (did you mean "url"?)',
    ),
    (
        "unknown build key",
        GOOD.replace("targets =", "target =", 1),
        'build.target: unknown key (did you mean "targets"?)',
    ),
    ("short commit", GOOD.replace(COMMIT, "abc123"), "upstream.commit: 'abc123' must be a full 40-hex-digit"),
    ("uppercase commit", GOOD.replace(COMMIT, "A" * 40), "upstream.commit:"),
    ("commit wrong type", GOOD.replace(f'"{COMMIT}"', "123"), "upstream.commit: must be str, not int"),
    ("missing upstream", GOOD.split("[upstream]")[0] + "[build]\ntargets=['x']\n", "upstream: is required"),
    (
        "missing url",
        GOOD.replace('url = "https://example.invalid/llama.cpp"\n', ""),
        "upstream.url: is required",
    ),
    ("missing name", GOOD.replace('name = "t"\n', ""), "name: is required"),
    ("bad name", GOOD.replace('name = "t"', 'name = "My Recipe"'), "name: 'My Recipe' must be lowercase"),
    ("empty targets", GOOD.replace('["llama-cli"]', "[]"), "build.targets: must not be empty"),
    (
        "targets not list",
        GOOD.replace('["llama-cli"]', '"llama-cli"'),
        "build.targets: must be list, not str",
    ),
    (
        "duplicate target",
        GOOD.replace('["llama-cli"]', '["a", "a"]'),
        "build.targets[1]: 'a' is listed twice",
    ),
    (
        "unknown patch",
        GOOD.replace('name = "t"', 'name = "t"\npatches = ["gaurd"]'),
        "patches[0]: 'gaurd' is not in patches/series (did you mean \"guard\"?)",
    ),
    (
        "experimental without opt-in",
        GOOD.replace('name = "t"', 'name = "t"\npatches = ["exp"]'),
        "patches[0]: 'exp' is experimental",
    ),
    ("define bad value", GOOD + "X = [1]\n", "build.defines.X: must be a string, integer or boolean"),
    (
        "define bad name",
        GOOD + '"BAD-NAME" = 1\n',
        "build.defines.BAD-NAME: is not a valid CMake variable name",
    ),
    (
        "toolchain escapes",
        GOOD.replace("[build.defines]", 'toolchain = "../../etc/passwd"\n[build.defines]'),
        "build.toolchain: '../../etc/passwd' escapes the project folder",
    ),
    (
        "toolchain absolute",
        GOOD.replace("[build.defines]", 'toolchain = "/etc/passwd"\n[build.defines]'),
        "build.toolchain: '/etc/passwd' must be relative",
    ),
    (
        "toolchain missing",
        GOOD.replace("[build.defines]", 'toolchain = "nope.cmake"\n[build.defines]'),
        "build.toolchain: 'nope.cmake' does not exist",
    ),
    (
        "bad os",
        GOOD + '[platform]\nos = "windwos"\n',
        "platform.os: 'windwos' is not one of linux, windows, macos (did you mean \"windows\"?)",
    ),
    (
        "bad build type",
        GOOD.replace("[build.defines]", 'build_type = "release"\n[build.defines]'),
        "build.build_type: 'release' is not one of",
    ),
    ("bool as str", 'allow_experimental = "yes"\n' + GOOD, "allow_experimental: must be bool, not str"),
    ("not toml", "name = \n", "not valid TOML"),
    (
        "rpc client not a target",
        GOOD + '[windows]\nrpc_clients = ["llama-clli"]\n',
        "windows.rpc_clients[0]: 'llama-clli' is not in build.targets (did you mean \"llama-cli\"?)",
    ),
    ("cuda without archs", GOOD + "[cuda]\n", "cuda.archs: is required"),
]


@pytest.mark.parametrize(("case", "text", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_recipe_one_line_error(proj: Path, case: str, text: str, message: str) -> None:
    with pytest.raises(RecipeError) as exc:
        load(proj, text)
    msg = str(exc.value)
    assert msg.startswith("recipes/t.toml: "), msg
    assert message in msg, msg
    assert "\n" not in msg
    assert exc.value.exit_code == 3


def test_resolve_recipe_by_name_with_suggestion(proj: Path) -> None:
    (proj / "recipes" / "cpu-rpc.toml").write_text(GOOD)
    assert resolve_recipe_path("cpu-rpc", proj) == proj / "recipes" / "cpu-rpc.toml"
    with pytest.raises(RecipeError, match='did you mean "cpu-rpc"'):
        resolve_recipe_path("cpu-rcp", proj)
    with pytest.raises(RecipeError, match="does not exist"):
        resolve_recipe_path("nope/x.toml", proj)


def test_shipped_recipes_validate() -> None:
    root = REPO
    series = load_series(root / "patches")
    recipes = sorted((root / "recipes").glob("*.toml"))
    assert any(p.stem == "cpu-rpc" for p in recipes)
    for path in recipes:
        r = load_recipe(path, root, series)
        assert r.upstream.commit and r.build.targets
    cpu = load_recipe(root / "recipes" / "cpu-rpc.toml", root, series)
    assert cpu.upstream.commit == "bb4caa7540188872173c44d161602d9271386413"
    assert set(cpu.build.targets) == {"llama-cli", "llama-server", "ggml-rpc-server", "llama-bench"}


def test_release_allow_system_is_a_list_of_library_names(proj: Path) -> None:
    r = load(proj, GOOD + '[release]\nallow_system = ["libssl.so.3", "libcrypto.so.3"]\n')
    assert r.release_allow_system == ("libssl.so.3", "libcrypto.so.3")
    assert load(proj, GOOD).release_allow_system == ()
    for bad, msg in (
        ('["../libx.so"]', "is not a valid name"),
        ('"libssl.so.3"', "release.allow_system"),
        ('["a", "a"]', "listed twice"),
    ):
        with pytest.raises(RecipeError, match=msg):
            load(proj, GOOD + f"[release]\nallow_system = {bad}\n")
    with pytest.raises(RecipeError, match="release.allow"):
        load(proj, GOOD + '[release]\nallow = ["libssl.so.3"]\n')
