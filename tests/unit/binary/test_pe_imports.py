"""Which imported DLLs Windows would look for in the current directory."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from patchkit.binary.pe_imports import PeFormatError, PeImports, read_imports, unshipped_imports


def test_system_and_shipped_dlls_are_not_reported() -> None:
    imports = PeImports(
        dlls=(
            "KERNEL32.dll",
            "msvcrt.dll",
            "api-ms-win-crt-runtime-l1-1-0.dll",
            "WS2_32.dll",
            "ggml.dll",
            "LLAMA.DLL",
            "libstdc++-6.dll",
            "cublas64_12.dll",
            "libgomp-1.dll",
        )
    )
    assert unshipped_imports(imports, ["ggml.dll", "llama.dll", "llama-cli.exe"]) == (
        "libstdc++-6.dll",
        "cublas64_12.dll",
        "libgomp-1.dll",
    )
    assert unshipped_imports(PeImports(dlls=()), []) == ()


def test_not_pe_is_none(tmp_path: Path) -> None:
    f = tmp_path / "x"
    f.write_bytes(b"\x7fELF" + bytes(100))
    assert read_imports(f) is None
    (tmp_path / "empty").write_bytes(b"")
    assert read_imports(tmp_path / "empty") is None


def test_broken_pe_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "x.exe"
    f.write_bytes(b"MZ" + b"\xff" * 300)
    with pytest.raises(PeFormatError, match="x.exe: not a readable PE file"):
        read_imports(f)


@pytest.mark.skipif(not hasattr(os, "symlink") or sys.platform == "win32", reason="POSIX links")
def test_links_and_folders_are_refused(tmp_path: Path) -> None:
    (tmp_path / "real.dll").write_bytes(b"MZ")
    (tmp_path / "link.dll").symlink_to("real.dll")
    with pytest.raises(PeFormatError, match="not a regular file"):
        read_imports(tmp_path / "link.dll")
    with pytest.raises(PeFormatError, match="not a regular file"):
        read_imports(tmp_path)
