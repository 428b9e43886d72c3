"""The import check (release.imports) on crafted ELF files and resolution rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.release.imports import Binary, check_imports, read_binary
from tests.fixtures.elf import make_elf
from tests.fixtures.pe import synth_pe


def _elf(
    path: str,
    *needed: str,
    runpath: str | None = "$ORIGIN",
    soname: str | None = None,
    rpath: str | None = None,
) -> Binary:
    return Binary(
        path=path,
        format="elf",
        needed=needed,
        runpath=tuple(runpath.split(":")) if runpath is not None else (),
        rpath=tuple(rpath.split(":")) if rpath is not None else (),
        soname=soname,
    )


def _check(*bins: Binary, files: list[str] | None = None, os_name: str = "linux") -> list[str]:
    paths = files if files is not None else [b.path for b in bins]
    return list(check_imports(bins, os_name=os_name, files=paths).problems)


def test_origin_system_and_driver_resolve() -> None:
    cli = _elf("bin/llama-cli", "libllama.so", "libggml.so", "libstdc++.so.6", "libc.so.6")
    llama = _elf("bin/libllama.so", "libggml.so", "libm.so.6", soname="libllama.so")
    ggml = _elf("bin/libggml.so", "libgomp.so.1", "libcuda.so.1", soname="libggml.so")
    report = check_imports(
        [cli, llama, ggml],
        os_name="linux",
        files=["bin/llama-cli", "bin/libllama.so", "bin/libggml.so", "LICENSE"],
    )
    assert report.ok, report.problems
    assert report.summary().to_json() == {
        "system": ["libc.so.6", "libgomp.so.1", "libm.so.6", "libstdc++.so.6"],
        "driver": ["libcuda.so.1"],
    }
    assert (
        "bin/llama-cli: libllama.so (bin/libllama.so), libggml.so (bin/libggml.so), "
        "libstdc++.so.6 (system), libc.so.6 (system)" in report.lines()
    )


def test_an_unknown_library_is_refused_naming_file_and_library() -> None:
    problems = _check(_elf("bin/llama-server", "libssl.so.3", "libc.so.6"))
    assert problems == [
        "bin/llama-server needs libssl.so.3: not in the release and not an allowed system library"
    ]


def test_a_library_in_bin_needs_an_origin_search_path() -> None:
    lib = _elf("bin/libggml.so", "libc.so.6", soname="libggml.so")
    for runpath in (None, "/home/u/build/bin", "", "lib"):
        exe = _elf("bin/llama-cli", "libggml.so", runpath=runpath)
        problems = _check(exe, lib)
        assert len(problems) == 1 and problems[0].startswith("bin/llama-cli needs libggml.so: "), (
            runpath,
            problems,
        )
    # ${ORIGIN}, a DT_RPATH, and $ORIGIN/../lib all count
    assert _check(_elf("bin/x", "libggml.so", runpath="${ORIGIN}"), lib) == []
    assert _check(_elf("bin/x", "libggml.so", runpath=None, rpath="$ORIGIN"), lib) == []
    assert _check(_elf("bin/x", "libg.so", runpath="$ORIGIN/../lib"), _elf("lib/libg.so", "libc.so.6")) == []
    # a RUNPATH hides the RPATH (the loader ignores DT_RPATH when DT_RUNPATH is there)
    assert _check(_elf("bin/x", "libggml.so", runpath="/opt", rpath="$ORIGIN"), lib)


def test_a_library_loaded_by_a_parent_is_found_by_its_soname() -> None:
    # the loader reuses libcublasLt loaded by the executable for libcublas without RUNPATH
    exe = _elf("bin/x", "libcublasLt.so.13", "libcublas.so.13")
    blas = _elf("bin/libcublas.so.13", "libcublasLt.so.13", runpath=None)
    lt = _elf("bin/libcublasLt.so.13", "libc.so.6")
    assert _check(exe, blas, lt) == []
    # alone (nobody loads it first), the same library does not resolve
    assert _check(blas, lt)


def test_a_path_import_and_a_foreign_format_are_refused() -> None:
    assert _check(_elf("bin/x", "/usr/lib/libfoo.so")) == [
        "bin/x needs /usr/lib/libfoo.so: a path, not a library name"
    ]
    pe = Binary(path="bin/x.exe", format="pe", needed=("KERNEL32.dll",))
    assert _check(pe) == ["bin/x.exe: a PE file in a linux release"]


def test_windows_rules() -> None:
    exe = Binary(
        path="bin/llama-cli.exe",
        format="pe",
        needed=(
            "KERNEL32.dll",
            "ggml.dll",
            "api-ms-win-crt-runtime-l1-1-0.dll",
            "nvcuda.dll",
            "WS2_32.dll",
            "msvcrt.dll",
        ),
    )
    dll = Binary(path="bin/GGML.DLL", format="pe", needed=("MSVCP140.dll", "cublas64_12.dll"))
    report = check_imports(
        [exe, dll], os_name="windows", files=["bin/llama-cli.exe", "bin/GGML.DLL", "bin/cublas64_12.dll"]
    )
    # the Visual C++ runtime is not part of Windows: ship it, or link it statically
    assert list(report.problems) == [
        "bin/GGML.DLL needs MSVCP140.dll: not in bin/ and not a Windows system DLL"
    ]
    assert report.needs("driver") == ["nvcuda.dll"]


def test_read_binary_elf_pe_and_others(tmp_path: Path) -> None:
    f = tmp_path / "libx.so"
    f.write_bytes(make_elf(needed=("libc.so.6", "libm.so.6"), runpath="$ORIGIN", soname="libx.so"))
    b = read_binary(f, "bin/libx.so")
    assert b is not None and b.needed == ("libc.so.6", "libm.so.6") and b.runpath == ("$ORIGIN",)
    pe = tmp_path / "x.exe"
    pe.write_bytes(synth_pe())
    b = read_binary(pe, "bin/x.exe")
    assert b is not None and b.format == "pe" and b.needed == ()
    text = tmp_path / "LICENSE"
    text.write_text("MIT\n")
    assert read_binary(text, "LICENSE") is None
    bad = tmp_path / "bad.so"
    bad.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 20)
    with pytest.raises(ValueError, match="bin/bad.so: not a readable ELF file"):
        read_binary(bad, "bin/bad.so")
    junk = tmp_path / "junk.dll"
    junk.write_bytes(b"MZ" + b"\xff" * 100)
    with pytest.raises(ValueError, match="bin/junk.dll: not a readable PE file"):
        read_binary(junk, "bin/junk.dll")
    link = tmp_path / "link.so"
    link.symlink_to(f)
    with pytest.raises(ValueError, match="symbolic link"):
        read_binary(link, "bin/link.so")


def test_allow_system_extends_the_set_and_is_recorded() -> None:
    exe = _elf("bin/llama-cli", "libssl.so.3", "libcrypto.so.3", "libc.so.6")
    assert len(_check(exe)) == 2
    report = check_imports(
        [exe], os_name="linux", files=["bin/llama-cli"], allow=["libssl.so.3", "libcrypto.so.3"]
    )
    assert report.ok
    assert report.summary().to_json() == {
        "system": ["libc.so.6", "libcrypto.so.3", "libssl.so.3"],
        "driver": [],
        "allowed_extra": ["libcrypto.so.3", "libssl.so.3"],
    }
    pe = Binary(path="bin/x.exe", format="pe", needed=("VCRUNTIME140.dll",))
    assert check_imports([pe], os_name="windows", files=["bin/x.exe"], allow=["vcruntime140.dll"]).ok


def test_release_and_verify_with_allow_system(tmp_path: Path) -> None:
    import json

    from patchkit.core.errors import ReleaseError
    from patchkit.release.verify import verify_dir
    from tests.fixtures.release import do_release, make_build
    from tests.fixtures.wheels import set_binary

    build = make_build(tmp_path)
    set_binary(build, "bin/llama-cli", make_elf(needed=("libssl.so.3", "libc.so.6"), runpath="$ORIGIN"))
    with pytest.raises(ReleaseError, match="bin/llama-cli needs libssl.so.3"):
        do_release(build, tmp_path / "dist")
    with pytest.raises(ReleaseError, match="not a library file name"):
        do_release(build, tmp_path / "dist", allow_system=("../x",))
    r = do_release(build, tmp_path / "dist", allow_system=("libssl.so.3",))
    manifest = json.loads(r.manifest.read_text())
    assert manifest["imports"]["allowed_extra"] == ["libssl.so.3"]
    assert "libssl.so.3" in manifest["imports"]["system"]
    assert verify_dir(tmp_path / "dist").differences == ()


def test_the_recipe_documents_its_extra_system_libraries(tmp_path: Path) -> None:
    """`[release] allow_system` of the recipe, then --allow-system, no name twice."""
    from patchkit.release.release import ReleaseOptions, _allowed_system
    from patchkit.spec.recipe import load_recipe
    from patchkit.spec.series import load_series
    from tests.fixtures.paths import REPO

    recipe = load_recipe(REPO / "recipes" / "cpu-rpc.toml", REPO, load_series(REPO / "patches"))
    assert recipe.release_allow_system == ("libssl.so.3", "libcrypto.so.3")
    opts = ReleaseOptions(
        build_dir=tmp_path, out_dir=tmp_path, recipe=recipe, allow_system=("libcrypto.so.3", "libz.so.1")
    )
    assert _allowed_system(opts) == ("libssl.so.3", "libcrypto.so.3", "libz.so.1")
    assert _allowed_system(ReleaseOptions(build_dir=tmp_path, out_dir=tmp_path)) == ()
