"""The imports of real mingw-w64 executables: a dynamically linked C++ exe needs mingw's
runtime DLLs (which Windows would look for in the current directory when they are not
shipped beside it); the toolchain's -static leaves only system DLLs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from patchkit.binary.pe_imports import read_imports, unshipped_imports

CXX = "x86_64-w64-mingw32-g++-posix"
pytestmark = pytest.mark.skipif(shutil.which(CXX) is None, reason="mingw-w64 is not installed")


def test_mingw_runtime_dlls_are_reported_unless_static(tmp_path: Path) -> None:
    src = tmp_path / "hello.cpp"
    src.write_text('#include <iostream>\nint main() { std::cout << "hi" << std::endl; }\n')
    dyn, static = tmp_path / "dyn.exe", tmp_path / "static.exe"
    for exe, flags in ((dyn, []), (static, ["-static"])):
        res = subprocess.run([CXX, "-O1", "-o", str(exe), str(src), *flags], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
    imports = read_imports(dyn)
    assert imports is not None
    missing = {d.lower() for d in unshipped_imports(imports, ["dyn.exe"])}
    assert "libstdc++-6.dll" in missing, imports
    # shipped beside the exe, they are found in the application's folder first
    assert unshipped_imports(imports, ["dyn.exe", *imports.dlls]) == ()
    imports = read_imports(static)
    assert imports is not None and imports.dlls
    assert unshipped_imports(imports, ["static.exe"]) == (), imports
