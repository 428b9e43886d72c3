"""The shipped recipes load; [windows] sizes are validated; the mingw-w64 toolchain file
says what it must (tests/integration/builder/test_mingw_toolchain.py compiles with it)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from patchkit.core.errors import RecipeError
from patchkit.spec.recipe import list_recipes, load_recipe
from patchkit.spec.series import Series, load_series
from tests.fixtures.paths import MINGW_COMPAT, MINGW_TOOLCHAIN, REPO

ROOT = REPO
TOOLCHAIN = MINGW_TOOLCHAIN
COMPAT = MINGW_COMPAT
MIB = 1 << 20


def shipped_series(tmp_path: Path) -> Series:
    """The worktree's patches/series if it has one, else an empty series."""
    if (ROOT / "patches" / "series").is_file():
        return load_series(ROOT / "patches")
    return Series(directory=tmp_path, patches=())


def test_every_shipped_recipe_loads(tmp_path: Path) -> None:
    series = shipped_series(tmp_path)
    paths = list_recipes(ROOT)
    assert ROOT / "recipes" / "windows-cpu-rpc.toml" in paths
    for path in paths:
        recipe = load_recipe(path, ROOT, series)
        assert recipe.name == path.stem


def test_windows_cpu_rpc_recipe(tmp_path: Path) -> None:
    r = load_recipe(ROOT / "recipes" / "windows-cpu-rpc.toml", ROOT, shipped_series(tmp_path))
    assert r.os == "windows" and r.arch == "x86_64"
    assert r.upstream.url == "https://github.com/ggml-org/llama.cpp"
    assert r.upstream.commit == "bb4caa7540188872173c44d161602d9271386413"
    assert r.build.toolchain == TOOLCHAIN
    assert set(r.build.targets) == {"llama-cli", "llama-server", "ggml-rpc-server", "llama-bench"}
    d = r.build.defines_dict
    for key, value in {
        "GGML_RPC": "ON",
        "LLAMA_BUILD_SERVER": "ON",
        "GGML_NATIVE": "OFF",
        "LLAMA_BUILD_UI": "OFF",
        "LLAMA_USE_PREBUILT_UI": "OFF",
        "GGML_OPENMP": "OFF",
        "LLAMA_OPENSSL": "OFF",
    }.items():
        assert d[key] == value, key
    # loadable CPU variants (ggml-cpu-<name>.dll) need shared libraries
    assert "BUILD_SHARED_LIBS" not in d
    assert r.build.cpu_variants[0] == "x64" and "haswell" in r.build.cpu_variants
    assert r.windows is not None
    assert r.windows.stack_reserve_bytes == 256 * MIB
    assert r.windows.stack_commit_bytes is None
    assert r.windows.rpc_clients == ("llama-cli", "llama-server", "llama-bench")


def _project(tmp_path: Path, windows: str) -> Path:
    proj = tmp_path / "proj"
    (proj / "recipes").mkdir(parents=True)
    (proj / "patches").mkdir()
    (proj / "toolchains").mkdir()
    shutil.copy(TOOLCHAIN, proj / "toolchains")
    text = (ROOT / "recipes" / "windows-cpu-rpc.toml").read_text()
    text = text[: text.index("[windows]")] + "[windows]\n" + windows
    path = proj / "recipes" / "w.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("windows", "needle"),
    [
        ('stack_reserve = "256MB"\n', "windows.stack_reserve: size '256MB' is ambiguous"),
        ('stack_reserve = "1000"\n', "windows.stack_reserve: '1000' must be a positive multiple"),
        ('stack_reserve = "0"\n', "windows.stack_reserve: '0' must be a positive multiple"),
        ('stack_reserve = "lots"\n', "windows.stack_reserve: size 'lots' is not a size"),
        ("stack_reserve = 268435456\n", "windows.stack_reserve: must be str"),
        (
            'stack_reserve = "1MiB"\nstack_commit = "2MiB"\n',
            "windows.stack_commit: '2MiB' is larger than stack_reserve '1MiB'",
        ),
        ('stack_commit = "6000"\n', "windows.stack_commit: '6000' must be a positive multiple"),
        ('rpc_clients = ["llama-clli"]\n', 'not in build.targets (did you mean "llama-cli"?)'),
    ],
)
def test_windows_section_is_validated(tmp_path: Path, windows: str, needle: str) -> None:
    path = _project(tmp_path, windows)
    with pytest.raises(RecipeError) as exc:
        load_recipe(path, path.parents[1], Series(directory=tmp_path, patches=()))
    assert needle in exc.value.message
    assert exc.value.message.startswith("recipes/w.toml: ")


def test_windows_section_sizes_accepted(tmp_path: Path) -> None:
    path = _project(tmp_path, 'stack_reserve = "0x10000000"\nstack_commit = "64 KiB"\n')
    r = load_recipe(path, path.parents[1], Series(directory=tmp_path, patches=()))
    assert r.windows is not None
    assert (r.windows.stack_reserve_bytes, r.windows.stack_commit_bytes) == (256 * MIB, 65536)


def test_toolchain_file_content() -> None:
    text = TOOLCHAIN.read_text()
    assert re.search(r"set\(CMAKE_SYSTEM_NAME Windows\)", text)
    assert "-gcc-posix" in text and "-g++-posix" in text and "-windres" in text
    for mode in ("PROGRAM NEVER", "LIBRARY ONLY", "INCLUDE ONLY", "PACKAGE ONLY"):
        assert f"CMAKE_FIND_ROOT_PATH_MODE_{mode}" in text
    # the compat header force-included, and aligned vector moves assembled as unaligned ones
    # (AVX values spilled to Windows' 16-byte-aligned stack), for C and C++
    flags = re.search(r'set\(PATCHKIT_MINGW_FLAGS "(.*)"\)', text)
    assert flags is not None
    assert flags.group(1).startswith('-include \\"${PATCHKIT_MINGW_COMPAT_H}\\"')
    assert "-Wa,-muse-unaligned-vector-move" in flags.group(1)
    assert 'CMAKE_C_FLAGS_INIT "${PATCHKIT_MINGW_FLAGS}"' in text
    assert 'CMAKE_CXX_FLAGS_INIT "${PATCHKIT_MINGW_FLAGS}"' in text
    assert 'CMAKE_EXE_LINKER_FLAGS_INIT "-static"' in text
    assert "__MINGW64_VERSION_MAJOR < 11" in COMPAT.read_text()
