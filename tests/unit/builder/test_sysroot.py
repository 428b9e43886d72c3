"""Build roots (builder.sysroot) on a fake root in a temporary cache: the record, reuse,
the compiler wrappers and defines, the refusals (no processes)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from patchkit.builder import sysroot
from patchkit.builder.problems import RootDamaged, RootNotPrepared, RootUnknown
from patchkit.core.errors import BuildError, ConfigError, ToolMissing
from tests.fixtures.sysroot import DPKG_STATUS, fake_root


def test_dpkg_status_gives_installed_packages_only() -> None:
    pkgs = sysroot.read_dpkg_status(DPKG_STATUS.encode())
    # the description's indented lines are not fields; deinstalled ones are left out
    assert pkgs == {
        "libc6": "2.31-13+deb11u11",
        "gcc-10": "10.2.1-6",
        "cmake": "3.18.4-2+deb11u1",
        "libc6:i386": "2.31-13+deb11u11",
    }


def test_the_record_says_what_the_root_is(tmp_path: Path) -> None:
    tree = fake_root(tmp_path, record=False)
    rec = sysroot._record_for(sysroot.KINDS["debian11"], tree, "1.0.128")
    assert (rec.glibc, rec.gcc, rec.cmake, rec.packages) == ("2.31", "10.2.1", "3.18.4", 4)
    assert rec.label == f"debian11@{rec.packages_sha256[:12]}"
    # the id follows from the installed packages, not from when it was made
    again = sysroot._record_for(sysroot.KINDS["debian11"], tree, None)
    assert again.packages_sha256 == rec.packages_sha256


def test_a_tree_without_libc6_is_not_a_root(tmp_path: Path) -> None:
    tree = fake_root(tmp_path, record=False)
    (tree / "var/lib/dpkg/status").write_text("Package: x\nStatus: install ok installed\nVersion: 1\n")
    with pytest.raises(BuildError) as e:
        sysroot._record_for(sysroot.KINDS["debian11"], tree, None)
    assert e.value.problem == RootDamaged(tree=tree, found="no-libc")


def test_find_root_reads_the_record_and_reuses_it(tmp_path: Path) -> None:
    assert sysroot.find_root(tmp_path, "debian11") is None
    fake_root(tmp_path)
    found = sysroot.find_root(tmp_path, "debian11")
    assert found is not None and found.label == "debian11@" + "ab" * 6
    # reuse: prepare does not run anything for a prepared root
    rec, made = sysroot.prepare_root(tmp_path, "debian11", env={"PATH": ""})
    assert (rec, made) == (found, False)


@pytest.mark.parametrize("damage", ["no record", "bad json", "wrong type", "a link"])
def test_a_damaged_root_reads_as_not_prepared(tmp_path: Path, damage: str) -> None:
    fake_root(tmp_path)
    rec = tmp_path / "roots/debian11/root.json"
    if damage == "no record":
        rec.unlink()
    elif damage == "bad json":
        rec.write_text("{not json")
    elif damage == "wrong type":
        rec.write_text('{"name": 3}')
    else:
        target = tmp_path / "elsewhere.json"
        target.write_bytes(rec.read_bytes())
        rec.unlink()
        rec.symlink_to(target)
    assert sysroot.find_root(tmp_path, "debian11") is None


def test_require_root_says_how_to_prepare_it(tmp_path: Path) -> None:
    with pytest.raises(BuildError) as e:
        sysroot.require_root(tmp_path, "debian11")
    assert e.value.problem == RootNotPrepared(name="debian11", cache=tmp_path)
    with pytest.raises(ConfigError) as e2:
        sysroot.require_root(tmp_path, "debian13")
    assert e2.value.problem == RootUnknown(name="debian13", known=("debian11", "debian12"))


def test_compiler_defines_point_cmake_into_the_root(tmp_path: Path) -> None:
    fake_root(tmp_path)
    rec = sysroot.require_root(tmp_path, "debian11")
    d = sysroot.compiler_defines(rec, tmp_path, tmp_path / "w")
    assert d["CMAKE_C_COMPILER"] == str(tmp_path / "w" / "cc")
    assert d["CMAKE_CXX_COMPILER"] == str(tmp_path / "w" / "c++")
    assert d["CMAKE_FIND_ROOT_PATH"] == str(tmp_path / "roots/debian11/tree")
    assert d["CMAKE_FIND_ROOT_PATH_MODE_LIBRARY"] == "ONLY"
    assert d["CMAKE_FIND_ROOT_PATH_MODE_PROGRAM"] == "NEVER"
    assert d["PATCHKIT_BUILD_ROOT"] == rec.label


def test_wrappers_exec_the_roots_compiler_under_bwrap(tmp_path: Path) -> None:
    fake_root(tmp_path)
    rec = sysroot.require_root(tmp_path, "debian11")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "bwrap").write_text("#!/bin/sh\n")
    (bin_ / "bwrap").chmod(0o755)
    work = tmp_path / "work dir"  # a space: quoted in the script
    sysroot.write_wrappers(rec, tmp_path, work / "root-bin", binds=(work,), env={"PATH": str(bin_)})
    for name, prog in (("cc", "/usr/bin/gcc"), ("c++", "/usr/bin/g++")):
        script = (work / "root-bin" / name).read_text()
        assert (work / "root-bin" / name).stat().st_mode & 0o111
        run = next(ln for ln in script.splitlines() if " --chdir " in ln)
        assert run.endswith(f'--chdir "$PWD" {prog} "$@" || exit $?')
        argv = shlex.split(run.split(" --chdir")[0])
        tree = str(tmp_path / "roots/debian11/tree")
        assert argv[0] == str(bin_ / "bwrap")
        # the root read-only, only the work folder writable; unprivileged, no network
        assert ["--ro-bind", tree, "/"] == argv[argv.index("/") - 2 : argv.index("/") + 1]
        assert "--bind" not in argv[: argv.index(str(work)) - 1]
        assert ["--bind", str(work), str(work)] == argv[argv.index(str(work)) - 1 : argv.index(str(work)) + 2]
        assert _unprivileged(argv) and "--die-with-parent" in argv
        # in a rebuild's sandbox: the same, in its PID namespace and with its /proc
        nested = [ln for ln in script.splitlines() if " --chdir " in ln][1]
        inner = shlex.split(nested.split(" --chdir")[0])
        assert "--uid 65534 --gid 65534 --cap-drop ALL --ro-bind" in " ".join(inner)
        assert "--unshare-all" not in inner and "--unshare-net" in inner and "--proc" not in inner
        assert ["--ro-bind", tree, "/"] == inner[inner.index("/") - 2 : inner.index("/") + 1]
        assert rec.label in script
        # the dependency file's /usr/ paths are the root's, on the host
        tree_q = str(tmp_path / "roots/debian11/tree")
        assert f"s| /usr/| {tree_q}/usr/|g" in script.splitlines()[-1]


def test_wrappers_need_bwrap(tmp_path: Path) -> None:
    fake_root(tmp_path)
    rec = sysroot.require_root(tmp_path, "debian11")
    with pytest.raises(ToolMissing, match="bwrap not found"):
        sysroot.write_wrappers(rec, tmp_path, tmp_path / "w", binds=(), env={"PATH": str(tmp_path / "none")})


def _unprivileged(argv: list[str]) -> bool:
    """uid/gid 65534 in a user namespace of its own, every capability dropped, its own
    network/PID/IPC namespaces, /tmp its own."""
    joined = " ".join(argv)
    return all(
        part in joined
        for part in (
            "--unshare-all --unshare-user --uid 65534 --gid 65534 --cap-drop ALL --ro-bind",
            "--tmpfs /tmp",
        )
    )


def test_bwrap_argv_is_unprivileged_and_read_only_unless_preparing(tmp_path: Path) -> None:
    """A build's compilers in the root ran with the root writable and, for a root caller,
    every capability: now unprivileged and read-only; only `root prepare` (apt) is not."""
    build = sysroot.bwrap_argv("bwrap", tmp_path, (tmp_path / "w",))
    assert _unprivileged(build) and "/etc/resolv.conf" not in build
    assert ["--ro-bind", str(tmp_path), "/"] == build[build.index("/") - 2 : build.index("/") + 1]
    assert [a for i, a in enumerate(build) if build[i - 1] == "--bind"] == [str(tmp_path / "w")]
    prep = sysroot.bwrap_argv("bwrap", tmp_path, (), network=True, privileged=True)
    assert "--unshare-net" not in prep and "/etc/resolv.conf" in prep and "--cap-drop" not in prep
    off = sysroot.bwrap_argv("bwrap", tmp_path, (), privileged=True)
    assert "--unshare-net" in off and "/etc/resolv.conf" not in off
