"""The shipping policy on a staged bin/: ELF search paths and PE imports (crafted files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.binary import shipping
from patchkit.binary.pe_imports import PeImports
from patchkit.binary.shipping import shipping_findings
from tests.fixtures.elf import make_elf


def test_bad_runpath_is_refused_naming_file_and_entry(tmp_path: Path) -> None:
    (tmp_path / "libggml.so").write_bytes(make_elf(runpath="$ORIGIN"))
    (tmp_path / "llama-cli").write_bytes(make_elf(runpath="$ORIGIN:"))
    (tmp_path / "zz-after").write_bytes(make_elf(runpath="/opt/lib"))
    (found,) = shipping_findings(tmp_path)  # nothing after the first refusal
    assert found.refused and found.file == "llama-cli"
    assert found.message.startswith("bin/llama-cli: RUNPATH entry '': empty entry")
    assert found.message.endswith("; shipped binaries may only search $ORIGIN")
    assert "CMAKE_INSTALL_RPATH" in found.hint


def test_good_files_have_no_findings(tmp_path: Path) -> None:
    (tmp_path / "libggml.so").write_bytes(make_elf(runpath=None))
    (tmp_path / "llama-cli").write_bytes(make_elf(runpath="$ORIGIN"))
    (tmp_path / "README").write_text("not a binary")
    assert shipping_findings(tmp_path) == ()


def test_malformed_elf_is_refused(tmp_path: Path) -> None:
    (tmp_path / "libx.so").write_bytes(make_elf(runpath="$ORIGIN")[:90])
    (found,) = shipping_findings(tmp_path)
    assert found.refused
    assert found.message.startswith("bin/libx.so: cannot read its dynamic section or imports: malformed ELF")


def test_pe_imports_nvidia_warns_and_others_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    imports = {
        "a.exe": PeImports(dlls=("KERNEL32.dll", "cudart64_12.dll", "ggml.dll")),
        "b.exe": PeImports(dlls=("cublas64_12.dll", "libgomp-1.dll")),
        "c.exe": PeImports(dlls=("libstdc++-6.dll",)),
    }
    for name in (*imports, "ggml.dll"):
        (tmp_path / name).write_bytes(b"MZ")
    monkeypatch.setattr(shipping, "read_imports", lambda f: imports.get(f.name, PeImports(dlls=())))
    found = shipping_findings(tmp_path)
    assert [(f.file, f.refused) for f in found] == [("a.exe", False), ("b.exe", False), ("b.exe", True)]
    assert found[0].message == (
        "bin/a.exe imports cudart64_12.dll (NVIDIA's runtime, not shipped): copy it next to the exe, "
        "or Windows looks for it in the current directory before PATH"
    )
    assert found[2].message == (
        "bin/b.exe imports libgomp-1.dll, which is neither shipped in bin/ nor a Windows system DLL: "
        "Windows would look for it in the current directory"
    )
    assert "-static" in found[2].hint
