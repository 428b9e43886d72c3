"""What `build` ships searches only $ORIGIN for libraries: never the current directory
(an empty RUNPATH entry), never a host path; a recipe that puts one there fails the build."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.binary.elf import read_dynamic
from tests.fixtures.project import assert_error, build, write_recipe
from tests.fixtures.upstream import FixtureUpstream

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or shutil.which("cc") is None, reason="ELF binaries and a C compiler (Linux)"
)

# a library named like the one the fixture binaries need; loading it writes $MARKER
MARKER_LIB = r"""
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
__attribute__((constructor)) static void planted(void) {
    const char * p = getenv("MARKER");
    FILE * f = p ? fopen(p, "w") : NULL;
    if (f) { fputs("planted library loaded\n", f); fclose(f); }
}
const char * fixture_version(void) { return "planted"; }
int rpc_check_bounds(size_t a, size_t b, size_t c, size_t d) { (void)a; (void)b; (void)c; (void)d; return 1; }
"""
VICTIM = r"""
#include <stdio.h>
const char * fixture_version(void);
int main(void) { printf("%s\n", fixture_version()); return 0; }
"""


def cc(*args: str | Path) -> None:
    res = subprocess.run(["cc", *map(str, args)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def plant(folder: Path) -> Path:
    """A folder users run from, holding a planted libfixture-core.so."""
    folder.mkdir()
    (folder / "planted.c").write_text(MARKER_LIB)
    cc(
        "-shared",
        "-fPIC",
        "-o",
        folder / "libfixture-core.so",
        "-Wl,-soname,libfixture-core.so",
        folder / "planted.c",
    )
    return folder


def run_in(cwd: Path, exe: Path, marker: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(exe)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MARKER": str(marker), **env},
    )


def test_shipped_binaries_do_not_load_a_library_from_the_current_directory(
    project: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    r = build(project, out)
    assert r.exit_code == 0, r.output
    files = sorted((out / "bin").iterdir())
    assert {f.name for f in files} == {"fixture-cli", "fixture-rpc-server", "libfixture-core.so"}
    for f in files:
        dyn = read_dynamic(f)
        assert dyn is not None and dyn.runpath == ("$ORIGIN",) and dyn.rpath == (), (f.name, dyn)

    cwd = plant(tmp_path / "downloads")
    marker = tmp_path / "marker"
    # control: a binary linked the way CMake's build tree links ($ORIGIN:) does load it
    alone = tmp_path / "victim"
    alone.mkdir()
    (tmp_path / "victim.c").write_text(VICTIM)
    cc(
        "-o",
        alone / "victim",
        tmp_path / "victim.c",
        f"-L{cwd}",
        "-lfixture-core",
        "-Wl,--enable-new-dtags,-rpath,$ORIGIN:",
    )
    res = run_in(cwd, alone / "victim", marker)
    assert res.returncode == 0 and res.stdout == "planted\n", res.stderr
    assert marker.read_text() == "planted library loaded\n"
    marker.unlink()

    # the shipped binary, its library missing beside it: the loader gives up and the
    # planted library in the current directory is never opened
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy2(out / "bin" / "fixture-cli", lone / "fixture-cli")
    res = run_in(cwd, lone / "fixture-cli", marker)
    assert res.returncode != 0 and "libfixture-core.so" in res.stderr, res.stderr
    assert not marker.exists()

    # the whole bin/, run from that folder: its own library, nothing tried in the cwd
    res = run_in(cwd, out / "bin" / "fixture-cli", marker, LD_DEBUG="libs")
    assert res.returncode == 0, res.stderr
    assert "bounds(zero past end) = 1" in res.stdout
    tried = [ln.split("trying file=", 1)[1].strip() for ln in res.stderr.splitlines() if "trying file=" in ln]
    assert tried, res.stderr  # glibc's loader reports its search
    assert all(t.startswith("/") and not t.startswith(str(cwd)) for t in tried), tried
    assert not marker.exists()


def test_a_recipe_that_puts_a_host_path_in_runpath_fails_the_build(
    project: Path, upstream: FixtureUpstream, tmp_path: Path
) -> None:
    write_recipe(
        project,
        "fixture",
        url=str(upstream.path),
        commit=upstream.head,
        extra='CMAKE_INSTALL_RPATH = "$ORIGIN:/opt/elsewhere/lib"\n',
    )
    out = tmp_path / "out"
    r = build(project, out)
    assert_error(
        r, 6, "bin/fixture-cli: RUNPATH entry '/opt/elsewhere/lib': absolute path", "CMAKE_INSTALL_RPATH"
    )
    assert not out.exists()
    assert not list(tmp_path.glob(".out.tmp-*"))
