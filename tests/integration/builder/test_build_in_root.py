"""`patchkit build` of a recipe with ``[build] root``: the compilers are the root's, run
through bwrap (a fake bwrap here that runs the host's compiler in place of the root's, so
the wiring is proven without a Debian tree: the wrappers, the defines, the record)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from patchkit.core.paths import cache_dir
from tests.fixtures.project import assert_error, build, write_recipe
from tests.fixtures.sysroot import fake_root
from tests.fixtures.upstream import FixtureUpstream

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="build roots are Linux only")

TARGETS = '["fixture-cli", "fixture-rpc-server"]\nroot = "debian11"\nlauncher = "none"'


def _fake_bwrap(bin_dir: Path) -> Path:
    """bwrap that logs its arguments, then runs what follows ``--chdir DIR`` in DIR."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "bwrap"
    path.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{bin_dir}/bwrap.log"\n'
        'while [ "$#" -gt 0 ] && [ "$1" != "--chdir" ]; do shift; done\n'
        'cd "$2" && shift 2 && exec "$@"\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def test_a_root_recipe_compiles_through_the_roots_wrappers(
    project: Path, upstream: FixtureUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = _fake_bwrap(tmp_path / "fakebin")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    fake_root(cache_dir())
    write_recipe(project, "fixture", url=str(upstream.path), commit=upstream.head, targets=TARGETS)
    out = tmp_path / "out"
    r = build(project, out, "--no-smoke")
    assert r.exit_code == 0, r.output
    assert "building in the root debian11@abababababab (bullseye: glibc 2.31, GCC 10.2.1)" in r.output
    defines = json.loads((out / "build-info.json").read_text())["cmake"]["defines"]
    assert defines["PATCHKIT_BUILD_ROOT"] == "debian11@abababababab"
    assert defines["CMAKE_C_COMPILER"].endswith("/root-bin/cc")
    assert defines["CMAKE_FIND_ROOT_PATH"] == str(cache_dir() / "roots" / "debian11" / "tree")
    calls = (bin_dir / "bwrap.log").read_text().splitlines()
    tree = cache_dir() / "roots" / "debian11" / "tree"
    # the root read-only, the compilers unprivileged (no capability, uid 65534), no network
    assert calls and all(
        f"--ro-bind {tree} / " in c
        and c.startswith("--unshare-all --unshare-user --uid 65534 --gid 65534 --cap-drop ALL")
        and f"--bind {tree} " not in c
        for c in calls
    )
    assert any(c.endswith("/usr/bin/gcc --version") or " /usr/bin/gcc " in c for c in calls), calls[:3]


def test_an_unprepared_root_is_refused_before_cloning(
    project: Path, upstream: FixtureUpstream, tmp_path: Path
) -> None:
    write_recipe(project, "fixture", url=str(upstream.path), commit=upstream.head, targets=TARGETS)
    r = build(project, tmp_path / "out")
    assert_error(r, 6, "the build root 'debian11' is not prepared", "patchkit root prepare debian11")
    assert not (cache_dir() / "repos").exists()


def test_a_root_release_states_its_floor_and_rebuilds_in_the_users_root(
    project: Path, upstream: FixtureUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.fixtures.project import invoke

    bin_dir = _fake_bwrap(tmp_path / "fakebin")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    fake_root(cache_dir())
    write_recipe(
        project,
        "fixture",
        url=str(upstream.path),
        commit=upstream.head,
        targets=TARGETS,
        extra='\n[release]\nglibc = "2.99"\n',
    )
    out = tmp_path / "out"
    assert build(project, out, "--no-smoke").exit_code == 0
    dist = tmp_path / "dist"
    r = invoke(project, "release", "fixture", "--out", str(dist), "--build-dir", str(out), "--allow-unsmoked")
    assert r.exit_code == 0, r.output
    assert "C library: the files need " in r.stderr and "(the recipe's floor: GLIBC_2.99)" in r.stderr
    # a fresh cache for the rebuild: the root comes from the user's cache (PATCHKIT_CACHE)
    # --no-sandbox: the fake bwrap on PATH would stand in for the sandbox's bwrap too
    r = invoke(project, "rebuild", str(dist), "--cache", str(tmp_path / "rb"), "-j", "2", "--no-sandbox")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("identical: ")
    assert not (tmp_path / "rb" / "roots").exists()


def test_the_wrapper_names_the_roots_headers_in_the_dependency_file(tmp_path: Path) -> None:
    """Compiled in the root, a header is /usr/include/... there: the depfile ninja reads on
    the host must name the root's copy, or every build recompiles everything."""
    from patchkit.builder import sysroot

    bin_dir = _fake_bwrap(tmp_path / "fakebin")
    cache = tmp_path / "cache"
    fake_root(cache)
    rec = sysroot.require_root(cache, "debian11")
    work = tmp_path / "work"
    sysroot.write_wrappers(rec, cache, work / "root-bin", binds=(work,), env={"PATH": str(bin_dir)})
    (work / "a.c").write_text('#include <stdio.h>\nint main(void) { return puts("x") < 0; }\n')
    import subprocess

    res = subprocess.run(
        [str(work / "root-bin" / "cc"), "-MD", "-MT", "a.o", "-MF", "a.o.d", "-c", "a.c", "-o", "a.o"],
        cwd=work,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    dep = (work / "a.o.d").read_text()
    tree = cache / "roots" / "debian11" / "tree"
    assert f" {tree}/usr/include/stdio.h" in dep and " /usr/include/stdio.h" not in dep
    # a failed compile keeps its exit code
    (work / "b.c").write_text("syntax error\n")
    res = subprocess.run(
        [str(work / "root-bin" / "cc"), "-c", "b.c", "-o", "b.o"], cwd=work, capture_output=True
    )
    assert res.returncode != 0
