"""The shipped recipes load; [windows] sizes are validated; the mingw-w64 toolchain works."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from patchkit.core.errors import RecipeError
from patchkit.model.recipe import list_recipes, load_recipe
from patchkit.model.series import Series, load_series
from tests.fixtures.paths import REPO

ROOT = REPO
TOOLCHAIN = ROOT / "toolchains" / "mingw-w64-x86_64.cmake"
COMPAT = ROOT / "toolchains" / "mingw-w64-compat.h"
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
    assert r.upstream.commit == "82bb48500a9a6b3374da2cf5811695369278e4d3"
    assert r.build.toolchain == TOOLCHAIN
    assert set(r.build.targets) == {"llama-cli", "llama-server", "ggml-rpc-server", "llama-bench"}
    d = r.build.defines_dict
    for key, value in {"GGML_RPC": "ON", "LLAMA_BUILD_SERVER": "ON", "BUILD_SHARED_LIBS": "OFF",
                       "GGML_NATIVE": "OFF", "LLAMA_BUILD_UI": "OFF",
                       "LLAMA_USE_PREBUILT_UI": "OFF", "GGML_OPENMP": "OFF",
                       "LLAMA_OPENSSL": "OFF"}.items():
        assert d[key] == value, key
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


@pytest.mark.parametrize(("windows", "needle"), [
    ('stack_reserve = "256MB"\n', "windows.stack_reserve: size '256MB' is ambiguous"),
    ('stack_reserve = "1000"\n', "windows.stack_reserve: '1000' must be a positive multiple"),
    ('stack_reserve = "0"\n', "windows.stack_reserve: '0' must be a positive multiple"),
    ('stack_reserve = "lots"\n', "windows.stack_reserve: size 'lots' is not a size"),
    ('stack_reserve = 268435456\n', "windows.stack_reserve: must be str"),
    ('stack_reserve = "1MiB"\nstack_commit = "2MiB"\n',
     "windows.stack_commit: '2MiB' is larger than stack_reserve '1MiB'"),
    ('stack_commit = "6000"\n', "windows.stack_commit: '6000' must be a positive multiple"),
    ('rpc_clients = ["llama-clli"]\n', 'not in build.targets (did you mean "llama-cli"?)'),
])
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
    assert 'CMAKE_C_FLAGS_INIT "-include' in text and 'CMAKE_CXX_FLAGS_INIT "-include' in text
    assert 'CMAKE_EXE_LINKER_FLAGS_INIT "-static"' in text
    assert "__MINGW64_VERSION_MAJOR < 11" in COMPAT.read_text()


# ---------------------------------------------------------------- with the real compilers

CC = "x86_64-w64-mingw32-gcc-posix"
OBJDUMP = "x86_64-w64-mingw32-objdump"

# What ggml/src/ggml-cpu/ggml-cpu.c (82bb48500a9a, ggml_thread_apply_priority) does.
GGML_CPU_USE = """\
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
int disable_throttling(void) {
    THREAD_POWER_THROTTLING_STATE t;
    ZeroMemory(&t, sizeof(t));
    t.Version     = THREAD_POWER_THROTTLING_CURRENT_VERSION;
    t.ControlMask = THREAD_POWER_THROTTLING_EXECUTION_SPEED;
    t.StateMask   = 0;
    return SetThreadInformation(GetCurrentThread(), ThreadPowerThrottling, &t, sizeof(t));
}
"""

# What mingw-w64 v11+ headers declare themselves (processthreadsapi.h).
V11_DECLS = """\
#define THREAD_POWER_THROTTLING_CURRENT_VERSION 1
#define THREAD_POWER_THROTTLING_EXECUTION_SPEED 0x1
typedef struct _THREAD_POWER_THROTTLING_STATE {
    ULONG Version; ULONG ControlMask; ULONG StateMask;
} THREAD_POWER_THROTTLING_STATE;
"""


def _cc() -> str:
    cc = shutil.which(CC)
    if not cc:
        pytest.skip(f"{CC} not installed")
    return cc


def _compile(src: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_cc(), "-c", str(src), "-o", str(src.with_suffix(".o")), *flags],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.integration
def test_compat_header_supplies_what_ggml_cpu_uses(tmp_path: Path) -> None:
    src = tmp_path / "prio.c"
    src.write_text(GGML_CPU_USE)
    plain = _compile(src)
    if plain.returncode == 0:
        pytest.skip("these mingw-w64 headers already have THREAD_POWER_THROTTLING_STATE")
    assert "THREAD_POWER_THROTTLING" in plain.stderr
    fixed = _compile(src, "-include", str(COMPAT))
    assert fixed.returncode == 0, fixed.stderr


@pytest.mark.integration
def test_compat_header_is_inert_with_newer_headers(tmp_path: Path) -> None:
    """With mingw-w64 >= 11 (simulated) the header defines nothing, so no redefinition."""
    fake = tmp_path / "fake-v11"
    fake.mkdir()
    (fake / "_mingw.h").write_text("#include_next <_mingw.h>\n#undef __MINGW64_VERSION_MAJOR\n"
                                   "#define __MINGW64_VERSION_MAJOR 11\n")
    src = tmp_path / "v11.c"
    src.write_text("#include <windows.h>\n" + V11_DECLS + "int x(void) { return 0; }\n")
    as_v11 = _compile(src, "-I", str(fake), "-include", str(COMPAT))
    assert as_v11.returncode == 0, as_v11.stderr
    as_v10 = _compile(src, "-include", str(COMPAT))  # control: the guard is what matters
    assert as_v10.returncode != 0 and "redefinition" in as_v10.stderr


@pytest.mark.integration
def test_compat_header_does_not_pull_in_windows_h(tmp_path: Path) -> None:
    """Sources set NOMINMAX before <windows.h>; the forced include must not include it first."""
    src = tmp_path / "minmax.cpp"
    src.write_text("#define NOMINMAX\n#include <windows.h>\n#include <algorithm>\n"
                   "int f(int a, int b) { return std::max(a, b) + std::min(a, b); }\n"
                   "#ifdef max\n#error max is a macro\n#endif\n")
    cxx = _cc().replace("gcc-posix", "g++-posix")
    done = subprocess.run([cxx, "-c", str(src), "-o", str(tmp_path / "m.o"), "-include",
                           str(COMPAT)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.integration
def test_toolchain_builds_a_static_windows_exe(tmp_path: Path) -> None:
    _cc()
    cmake, ninja = shutil.which("cmake"), shutil.which("ninja")
    if not (cmake and ninja and shutil.which(OBJDUMP)):
        pytest.skip("cmake, ninja or mingw objdump missing")
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(tc C CXX)\n"
        "add_executable(tc main.cpp prio.c)\n")
    (src / "prio.c").write_text(GGML_CPU_USE)
    (src / "main.cpp").write_text(
        "#include <thread>\n#include <cstdio>\nextern \"C\" int disable_throttling(void);\n"
        "int main() { std::thread t([]{ std::puts(\"thread\"); }); t.join();\n"
        "  return disable_throttling() ? 0 : 1; }\n")
    build = tmp_path / "build"
    for cmd in ([cmake, "-S", str(src), "-B", str(build), "-G", "Ninja",
                 f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN}", "-DCMAKE_BUILD_TYPE=Release"],
                [cmake, "--build", str(build)]):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    dump = subprocess.run([OBJDUMP, "-p", str(build / "tc.exe")], capture_output=True,
                          text=True, check=True, timeout=60).stdout
    assert "Magic\t\t\t020b" in dump
    dlls = set(re.findall(r"DLL Name: (\S+)", dump))
    assert dlls, dump
    assert not {d for d in dlls if re.match(r"(?i)lib(stdc\+\+|gcc|winpthread|gomp)", d)}, dlls
