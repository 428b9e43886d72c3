"""The import check on real binaries: ELF built with gcc (NEEDED through $ORIGIN, a
library outside the allowed set) and PE built with mingw-w64 (DLL imports); and the
release/verify refusal (exit 12) through the command line."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from patchkit.cli import main
from patchkit.release.imports import check_imports, read_binary
from tests.fixtures.paths import PE_PROGS
from tests.fixtures.release import make_build
from tests.fixtures.wheels import set_binary

MINGW_CC = "x86_64-w64-mingw32-gcc-posix"
LIB_C = "int patchkit_answer(void) { return 42; }\n"
MAIN_C = "int patchkit_answer(void);\nint main(void) { return patchkit_answer() == 42 ? 0 : 1; }\n"
ZLIB_C = "#include <zlib.h>\nint main(void) { return zlibVersion()[0] == 0; }\n"


def gcc(tmp: Path, *args: str) -> None:
    if not shutil.which("gcc"):
        pytest.skip("gcc not installed")
    subprocess.run(["gcc", *args], cwd=tmp, check=True, capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def elf_bins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("elf")
    (d / "lib.c").write_text(LIB_C)
    (d / "main.c").write_text(MAIN_C)
    gcc(d, "-shared", "-fPIC", "-Wl,-soname,libanswer.so", "lib.c", "-o", "libanswer.so")
    gcc(d, "main.c", "-L.", "-lanswer", "-Wl,-rpath,$ORIGIN", "-o", "with-origin")
    gcc(d, "main.c", "-L.", "-lanswer", "-o", "no-runpath")
    gcc(d, "main.c", "-L.", "-lanswer", f"-Wl,-rpath,{d}", "-o", "host-runpath")
    return d


def _check(folder: Path, names: list[str], os_name: str = "linux") -> list[str]:
    bins = []
    for n in names:
        b = read_binary(folder / n, f"bin/{n}")
        assert b is not None
        bins.append(b)
    return list(check_imports(bins, os_name=os_name, files=[f"bin/{n}" for n in names]).problems)


def test_gcc_binaries(elf_bins: Path) -> None:
    b = read_binary(elf_bins / "with-origin", "bin/with-origin")
    assert b is not None and "libanswer.so" in b.needed and "libc.so.6" in b.needed
    assert _check(elf_bins, ["with-origin", "libanswer.so"]) == []
    # the library is there, but nothing tells the loader to look beside the program
    assert _check(elf_bins, ["no-runpath", "libanswer.so"]) == [
        "bin/no-runpath needs libanswer.so: bin/libanswer.so is there, but bin/no-runpath has "
        "no $ORIGIN RUNPATH to find it"
    ]
    # the builder's folder is no place on a user's machine
    problems = _check(elf_bins, ["host-runpath", "libanswer.so"])
    assert len(problems) == 1 and problems[0].startswith("bin/host-runpath needs libanswer.so")
    # and without the library in bin/, it is named
    assert _check(elf_bins, ["with-origin"]) == [
        "bin/with-origin needs libanswer.so: not in the release and not an allowed system library"
    ]


def test_a_system_library_outside_the_allowed_set_is_refused(tmp_path: Path) -> None:
    if not Path("/usr/include/zlib.h").is_file():
        pytest.skip("zlib1g-dev not installed")
    (tmp_path / "z.c").write_text(ZLIB_C)
    gcc(tmp_path, "z.c", "-lz", "-o", "uses-zlib")
    assert _check(tmp_path, ["uses-zlib"]) == [
        "bin/uses-zlib needs libz.so.1: not in the release and not an allowed system library"
    ]


@pytest.fixture(scope="module")
def pe_bins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not shutil.which(MINGW_CC):
        pytest.skip(f"{MINGW_CC} not installed (apt install gcc-mingw-w64-x86-64-posix)")
    d = tmp_path_factory.mktemp("pe")
    run = [MINGW_CC, "-O2"]
    subprocess.run(
        [
            *run,
            "-shared",
            str(PE_PROGS / "lib.c"),
            "-o",
            str(d / "lib.dll"),
            f"-Wl,--out-implib,{d / 'liblib.a'}",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    subprocess.run(
        [*run, str(PE_PROGS / "uses_lib.c"), "-o", str(d / "uses_lib.exe"), f"-L{d}", "-llib", "-lws2_32"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    subprocess.run(
        [*run, str(PE_PROGS / "hello.c"), "-o", str(d / "hello.exe")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return d


def test_mingw_binaries(pe_bins: Path) -> None:
    b = read_binary(pe_bins / "uses_lib.exe", "bin/uses_lib.exe")
    assert b is not None and b.format == "pe"
    low = {n.lower() for n in b.needed}
    assert {"lib.dll", "kernel32.dll", "ws2_32.dll"} <= low, b.needed
    assert _check(pe_bins, ["uses_lib.exe", "lib.dll", "hello.exe"], "windows") == []
    assert _check(pe_bins, ["uses_lib.exe"], "windows") == [
        "bin/uses_lib.exe needs lib.dll: not in bin/ and not a Windows system DLL"
    ]


def test_release_and_verify_refuse_through_the_cli(elf_bins: Path, tmp_path: Path) -> None:
    build = make_build(tmp_path)
    set_binary(build, "bin/llama-cli", (elf_bins / "with-origin").read_bytes())
    dist = tmp_path / "dist"
    r = CliRunner().invoke(main, ["release", "--build-dir", str(build), "--out", str(dist)])
    assert r.exit_code == 12, r.output
    assert "bin/llama-cli needs libanswer.so" in r.output and "Traceback" not in r.output
    assert not dist.exists()
    # with the library in the build, it releases and verifies, and the check is shown
    lib = (elf_bins / "libanswer.so").read_bytes()
    (build / "bin" / "libanswer.so").write_bytes(lib)
    import json

    from patchkit.core.fs import sha256_bytes

    info = json.loads((build / "build-info.json").read_text())
    info["artifacts"].append(
        {
            "target": "answer",
            "type": "SHARED_LIBRARY",
            "path": "bin/libanswer.so",
            "sha256": sha256_bytes(lib),
            "size": len(lib),
        }
    )
    (build / "build-info.json").write_text(json.dumps(info))
    r = CliRunner().invoke(main, ["release", "--build-dir", str(build), "--out", str(dist)])
    assert r.exit_code == 0, r.output
    assert "bin/llama-cli: libanswer.so (bin/libanswer.so), libc.so.6 (system)" in r.output
    r = CliRunner().invoke(main, ["verify", str(dist)])
    assert r.exit_code == 0, r.output
