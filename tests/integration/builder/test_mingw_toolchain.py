"""The shipped mingw-w64 toolchain and its compat header, with the real cross compilers."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.paths import MINGW_COMPAT, MINGW_TOOLCHAIN

TOOLCHAIN = MINGW_TOOLCHAIN
COMPAT = MINGW_COMPAT


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
    return subprocess.run(
        [_cc(), "-c", str(src), "-o", str(src.with_suffix(".o")), *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_compat_header_supplies_what_ggml_cpu_uses(tmp_path: Path) -> None:
    src = tmp_path / "prio.c"
    src.write_text(GGML_CPU_USE)
    plain = _compile(src)
    if plain.returncode == 0:
        pytest.skip("these mingw-w64 headers already have THREAD_POWER_THROTTLING_STATE")
    assert "THREAD_POWER_THROTTLING" in plain.stderr
    fixed = _compile(src, "-include", str(COMPAT))
    assert fixed.returncode == 0, fixed.stderr


def test_compat_header_is_inert_with_newer_headers(tmp_path: Path) -> None:
    """With mingw-w64 >= 11 (simulated) the header defines nothing, so no redefinition."""
    fake = tmp_path / "fake-v11"
    fake.mkdir()
    (fake / "_mingw.h").write_text(
        "#include_next <_mingw.h>\n#undef __MINGW64_VERSION_MAJOR\n#define __MINGW64_VERSION_MAJOR 11\n"
    )
    src = tmp_path / "v11.c"
    src.write_text("#include <windows.h>\n" + V11_DECLS + "int x(void) { return 0; }\n")
    as_v11 = _compile(src, "-I", str(fake), "-include", str(COMPAT))
    assert as_v11.returncode == 0, as_v11.stderr
    as_v10 = _compile(src, "-include", str(COMPAT))  # control: the guard is what matters
    assert as_v10.returncode != 0 and "redefinition" in as_v10.stderr


def test_compat_header_does_not_pull_in_windows_h(tmp_path: Path) -> None:
    """Sources set NOMINMAX before <windows.h>; the forced include must not include it first."""
    src = tmp_path / "minmax.cpp"
    src.write_text(
        "#define NOMINMAX\n#include <windows.h>\n#include <algorithm>\n"
        "int f(int a, int b) { return std::max(a, b) + std::min(a, b); }\n"
        "#ifdef max\n#error max is a macro\n#endif\n"
    )
    cxx = _cc().replace("gcc-posix", "g++-posix")
    done = subprocess.run(
        [cxx, "-c", str(src), "-o", str(tmp_path / "m.o"), "-include", str(COMPAT)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_toolchain_builds_a_static_windows_exe(tmp_path: Path) -> None:
    _cc()
    cmake, ninja = shutil.which("cmake"), shutil.which("ninja")
    if not (cmake and ninja and shutil.which(OBJDUMP)):
        pytest.skip("cmake, ninja or mingw objdump missing")
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(tc C CXX)\nadd_executable(tc main.cpp prio.c)\n"
    )
    (src / "prio.c").write_text(GGML_CPU_USE)
    (src / "main.cpp").write_text(
        '#include <thread>\n#include <cstdio>\nextern "C" int disable_throttling(void);\n'
        'int main() { std::thread t([]{ std::puts("thread"); }); t.join();\n'
        "  return disable_throttling() ? 0 : 1; }\n"
    )
    build = tmp_path / "build"
    for cmd in (
        [
            cmake,
            "-S",
            str(src),
            "-B",
            str(build),
            "-G",
            "Ninja",
            f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN}",
            "-DCMAKE_BUILD_TYPE=Release",
        ],
        [cmake, "--build", str(build)],
    ):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    dump = subprocess.run(
        [OBJDUMP, "-p", str(build / "tc.exe")], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "Magic\t\t\t020b" in dump
    dlls = set(re.findall(r"DLL Name: (\S+)", dump))
    assert dlls, dump
    assert not {d for d in dlls if re.match(r"(?i)lib(stdc\+\+|gcc|winpthread|gomp)", d)}, dlls
