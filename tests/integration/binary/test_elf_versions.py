"""The version needs of a real C++ program compiled here, against binutils' own reading
(``objdump -p``'s "Version References")."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from patchkit.binary.elf import newest_versions, read_dynamic, version_key

CXX = shutil.which("g++") or shutil.which("c++")
pytestmark = pytest.mark.skipif(
    CXX is None or shutil.which("objdump") is None, reason="no C++ compiler or objdump"
)


def _objdump_needs(path: Path) -> dict[str, list[str]]:
    """{library: [versions]} from objdump -p's Version References."""
    out = subprocess.run(["objdump", "-p", str(path)], capture_output=True, text=True, check=True).stdout
    refs = out.split("Version References:", 1)[1]
    needs: dict[str, list[str]] = {}
    lib = ""
    for line in refs.splitlines():
        m = re.match(r"^\s+required from (\S+):", line)
        if m:
            lib = m.group(1)
            needs[lib] = []
            continue
        m = re.match(r"^\s+0x[0-9a-f]+ 0x[0-9a-f]+ \d+ (\S+)$", line)
        if m and lib:
            needs[lib].append(m.group(1))
    return needs


def test_a_real_program_s_needs_match_objdump(tmp_path: Path) -> None:
    assert CXX is not None
    src = tmp_path / "hello.cpp"
    src.write_text(
        "#include <iostream>\n#include <stdexcept>\n#include <string>\n"
        "int main(int argc, char **argv) { try { if (argc > 5) throw std::runtime_error(argv[0]); }"
        " catch (const std::exception &e) { std::cout << e.what(); } std::cout << std::to_string(argc)"
        " << std::endl; }\n"
    )
    exe = tmp_path / "hello"
    res = subprocess.run([CXX, "-O1", "-o", str(exe), str(src)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    dyn = read_dynamic(exe)
    assert dyn is not None
    ours = {n.library: list(n.versions) for n in dyn.version_needs}
    assert ours == _objdump_needs(exe)
    newest = newest_versions(dyn.version_needs)
    assert {"GLIBC", "GLIBCXX"} <= set(newest), newest
    every_glibc = [v.split("_", 1)[1] for vs in ours.values() for v in vs if v.startswith("GLIBC_2")]
    assert newest["GLIBC"] == max(every_glibc, key=version_key)
