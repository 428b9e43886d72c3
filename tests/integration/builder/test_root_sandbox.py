"""The build-root wrappers' bwrap (builder.sysroot.bwrap_argv) with the real bubblewrap on a
tiny root made of this host's sh, grep, touch, mount and their libraries: as root it ran
the compilers with the root writable and every capability; now the root is read-only and
nothing is privileged, while the work folder stays writable and its files the caller's."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from patchkit.builder import sysroot

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("ldd") is None, reason="needs bubblewrap and ldd"
)

PROGRAMS = ("sh", "cat", "grep", "touch", "mount", "umount", "rm")


def _copy_into(tree: Path, path: Path) -> None:
    """``path`` at its real place in ``tree`` and under its folder's real place (the
    loader is named /lib64/ld-linux-x86-64.so.2, a link into /usr/lib/...)."""
    for where in (path.resolve(), path.parent.resolve() / path.name):
        dest = tree / str(where).lstrip("/")
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path.resolve(), dest)


def _tiny_root(tree: Path) -> None:
    tree.mkdir()
    for top in ("bin", "sbin", "lib", "lib64"):
        here = Path("/") / top
        if here.is_symlink():
            (tree / top).symlink_to(os.readlink(here))
    for name in PROGRAMS:
        found = shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")
        assert found, name
        prog = Path(found)
        _copy_into(tree, prog)
        link = tree / "usr/bin" / name
        if not link.exists():
            link.symlink_to(prog.resolve())
        out = subprocess.run(["ldd", str(prog)], capture_output=True, text=True).stdout
        for lib in re.findall(r"(/\S+) \(0x", out):
            _copy_into(tree, Path(lib))
    for d in ("tmp", "proc", "dev", "etc"):
        (tree / d).mkdir(exist_ok=True)


SCRIPT = """\
grep -E '^(Uid|CapEff|NoNewPrivs):' /proc/self/status
umount -l /tmp 2>/dev/null; mount -o remount,bind,rw / 2>/dev/null
touch /etc/escaped 2>/dev/null && echo ESCAPED-ROOT
touch {tree}/escaped 2>/dev/null && echo ESCAPED-TREE
touch /tmp/scratch && echo tmp-ok
touch {work}/obj.o && echo wrote-work
"""


@pytest.fixture(params=["under-tmp", "outside-tmp"])
def base(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """Where the root and the work folder live: under /tmp (which the wrapper's own tmpfs
    covers, so bwrap can make its mount points there) and outside it, as a real cache is
    (~/.cache, /work/...), where only the mount points patchkit made exist."""
    if request.param == "under-tmp":
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="pk-root-", dir="/var/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_build_roots_compilers_run_unprivileged_with_the_root_read_only(base: Path) -> None:
    tree, work = base / "tree", base / "work"
    _tiny_root(tree)
    work.mkdir()
    sysroot.make_mount_points(tree, [tree, work])
    before = sorted(str(p) for p in tree.rglob("*"))
    argv = sysroot.bwrap_argv(shutil.which("bwrap") or "bwrap", tree, (work,), cwd=work)
    res = subprocess.run(
        [*argv, "/bin/sh", "-c", SCRIPT.format(tree=tree, work=work)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    status = {k: v.strip() for k, _, v in (ln.partition(":") for ln in res.stdout.splitlines() if ":" in ln)}
    assert int(status["CapEff"], 16) == 0 and status["NoNewPrivs"] == "1", res.stdout
    assert status["Uid"].split() == ["65534"] * 4
    assert "ESCAPED" not in res.stdout, res.stdout
    assert sorted(str(p) for p in tree.rglob("*")) == before  # the root is as it was
    assert "tmp-ok" in res.stdout and "wrote-work" in res.stdout
    assert (work / "obj.o").stat().st_uid == os.getuid()  # the caller's: the next build reuses it


def test_in_a_rebuilds_sandbox_the_wrappers_bwrap_nests(base: Path) -> None:
    """A root recipe's rebuild: the compilers' bwrap runs inside the rebuild's unprivileged
    sandbox (which allows it user namespaces), unprivileged too."""
    from patchkit.builder import sandbox
    from patchkit.core.proc import run

    tree, work = base / "tree", base / "work"
    _tiny_root(tree)
    sysroot.make_mount_points(tree, [tree, work])
    env = {"PATH": "/usr/bin:/bin"}
    box = sandbox.prepare([work], env, readonly=[tree], nested=True)
    inner = sysroot.bwrap_argv(shutil.which("bwrap") or "bwrap", tree, (work,), cwd=work, nested=True)
    res = run(box.wrap([*inner, "/bin/sh", "-c", SCRIPT.format(tree=tree, work=work)]), env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    status = {k: v.strip() for k, _, v in (ln.partition(":") for ln in res.stdout.splitlines() if ":" in ln)}
    assert int(status["CapEff"], 16) == 0 and status["Uid"].split() == ["65534"] * 4
    assert "ESCAPED" not in res.stdout and "wrote-work" in res.stdout
    assert (work / "obj.o").stat().st_uid == os.getuid()
