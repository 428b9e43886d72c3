"""`patchkit rebuild` of someone else's release: a self-consistent hostile release whose
carried patch runs commands at configure and build time. The rebuild runs them in the
sandbox (unprivileged, no network, no home, the system read-only), still says
"identical"; only ``--no-sandbox`` lets them reach the host. As root, the configure step's
escape (``umount -l /tmp; mount -o remount,bind,rw /``, then a write outside) fails, it
reads no secret in a home and sees no host Unix socket, and the rebuild's own work folder
is never one a trusted build reuses."""

from __future__ import annotations

import difflib
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from patchkit.builder import sandbox
from patchkit.builder.problems import SandboxUnavailable
from patchkit.core.errors import ToolMissing
from tests.fixtures.project import assert_error, invoke, write_patch
from tests.fixtures.upstream import CMAKELISTS

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


# What the carried configure step tries, in the rebuild's sandbox only (its PID 1 is bwrap:
# the attacker's own, unsandboxed build must not remount this machine's /tmp): the escape
# as root, capabilities, a secret in a home outside /tmp, a host Unix socket.
PROBE = """\
out=$1
grep -E '^(Uid|CapEff|NoNewPrivs):' /proc/self/status > "$out/status.txt"
if [ "$(cat /proc/1/comm)" = bwrap ]; then
  umount -l /tmp 2>/dev/null; mount -o remount,bind,rw / 2>/dev/null
  touch @MARKS@/escaped 2>/dev/null
  ln -sf @MARKS@/through-the-log "$out/../build.log"  # patchkit appends the build's output
  touch "$out/../state.json" 2>/dev/null && echo yes > "$out/work-folder-writable"
fi
cat @SECRET@ > "$out/stolen.txt" 2>/dev/null
for s in @SOCKETS@; do test -S "$s" && echo "$s" >> "$out/sockets.txt"; done
echo done > "$out/probe-done"
"""


def _hostile_patch(marks: Path, secret: Path | None = None, sockets: tuple[Path, ...] = ()) -> str:
    """A patch to the fixture's CMakeLists.txt: a command at configure time (touch a file on
    the host, note the network it sees, run :data:`PROBE`) and one after linking fixture-cli."""
    probe = (
        PROBE.replace("@MARKS@", str(marks))
        .replace("@SECRET@", str(secret or marks / "none"))
        .replace("@SOCKETS@", " ".join(str(s) for s in sockets) or "/nonexistent")
    )
    new = CMAKELISTS.replace(
        "project(fixture C)\n",
        "project(fixture C)\n"
        f"execute_process(COMMAND touch {marks}/configure)\n"
        'execute_process(COMMAND sh -c "cat /proc/net/dev > ${CMAKE_BINARY_DIR}/net.txt")\n'
        "execute_process(COMMAND sh ${CMAKE_SOURCE_DIR}/probe.sh ${CMAKE_BINARY_DIR})\n",
    ).replace(
        "target_link_libraries(fixture-cli PRIVATE fixture-core)\n",
        "target_link_libraries(fixture-cli PRIVATE fixture-core)\n"
        # (in the sandbox, /tmp is its own empty tmpfs: the folder is made there, and lost)
        f"add_custom_command(TARGET fixture-cli POST_BUILD COMMAND mkdir -p {marks} COMMAND touch {marks}/build)\n",
    )
    diff = difflib.unified_diff(
        CMAKELISTS.splitlines(keepends=True),
        new.splitlines(keepends=True),
        "a/CMakeLists.txt",
        "b/CMakeLists.txt",
    )
    lines = probe.splitlines(keepends=True)
    add = "".join("+" + ln for ln in lines)
    return (
        "diff --git a/CMakeLists.txt b/CMakeLists.txt\n"
        + "".join(diff)
        + "diff --git a/probe.sh b/probe.sh\nnew file mode 100644\n--- /dev/null\n+++ b/probe.sh\n"
        + f"@@ -0,0 +1,{len(lines)} @@\n{add}"
    )


@pytest.fixture
def host_secrets() -> Iterator[tuple[Path, tuple[Path, ...]]]:
    """A home with a key and a /run-like folder with a listening Unix socket, outside /tmp
    (the old sandbox's tmpfs hid /tmp only), and one in /run itself when it is writable."""
    base = Path(
        tempfile.mkdtemp(prefix="patchkit-host-", dir="/var/tmp" if Path("/var/tmp").is_dir() else None)
    )
    (base / "home/.ssh").mkdir(parents=True)
    key = base / "home/.ssh/id_x"
    key.write_text("PRIVATE KEY\n")
    paths = [base / "run/user/0/bus"]
    if os.access("/run", os.W_OK):
        paths.append(Path(f"/run/patchkit-test-{os.getpid()}.sock"))
    socks = []
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(path))
        s.listen(1)
        socks.append(s)
    try:
        yield key, tuple(paths)
    finally:
        for s in socks:
            s.close()
        for path in paths:
            path.unlink(missing_ok=True)
        shutil.rmtree(base, ignore_errors=True)


HEADER = """\
Subject: build: a little something extra
Why: a hostile release (its recipe runs a launcher of its choosing)
Upstream-Status: inappropriate
When: ..
Default: yes
Experimental: no

"""


def test_a_carried_patch_runs_its_commands_only_inside_the_sandbox(
    project: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    host_secrets: tuple[Path, tuple[Path, ...]],
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    secret, sockets = host_secrets
    monkeypatch.setenv("HOME", str(secret.parent.parent))
    monkeypatch.setenv("PATCHKIT_TEST_TOKEN", "hunter2")  # the caller's environment
    patch = _hostile_patch(marks, secret, sockets)
    write_patch(project / "patches", "0002-extra.patch", patch, header=HEADER)
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    r = invoke(project, "build", "fixture", "--out", str(tmp_path / "out"), "-j", "2")
    assert r.exit_code == 0, r.output
    assert (marks / "configure").exists() and (marks / "build").exists()  # the attacker's own build
    r = invoke(
        project, "release", "fixture", "--build-dir", str(tmp_path / "out"), "--out", str(tmp_path / "d")
    )
    assert r.exit_code == 0, r.output
    (archive,) = (tmp_path / "d").glob("*.tar.gz")
    for m in marks.iterdir():
        m.unlink()

    # the victim rebuilds it: the same bytes, and nothing of it on the host
    rb = tmp_path / "rb"
    r = invoke(project, "rebuild", str(archive), "--cache", str(rb), "-j", "2")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"identical: {archive.name} (")
    assert "in a sandbox (bubblewrap: unprivileged, no network, no home, the system read-only)" in r.stderr
    assert list(marks.iterdir()) == []  # the escape as root failed: nothing written outside
    # --cache holds a new private cache per rebuild; nothing at the places a build reads
    (own,) = rb.glob("rebuild-*")
    assert sorted(p.name for p in rb.iterdir()) == [own.name]
    build_dir = next(own.glob("work/*/build"))
    assert (build_dir / "probe-done").is_file()
    status = dict(ln.split(":", 1) for ln in (build_dir / "status.txt").read_text().splitlines())
    assert int(status["CapEff"], 16) == 0 and status["NoNewPrivs"].strip() == "1"
    assert status["Uid"].split() == ["65534"] * 4
    assert not (build_dir / "stolen.txt").read_text()  # no home, no key
    assert not (build_dir / "sockets.txt").exists()  # no host Unix socket
    # patchkit's own files beside the worktree and build dir (log, state) were not writable
    assert not (build_dir / "work-folder-writable").exists()
    assert not (build_dir.parent / "build.log").is_symlink()
    # what it wrote is the caller's (root's for root), not nobody's: the next run can reuse
    # and delete it
    assert (build_dir / "status.txt").stat().st_uid == os.getuid()
    (net,) = own.glob("work/*/build/net.txt")  # what the configure step saw: a loopback only
    interfaces = [ln.split(":")[0].strip() for ln in net.read_text().splitlines() if ":" in ln]
    assert interfaces == ["lo"], net.read_text()
    # its compile cache was its own (in the rebuild's cache), never the user's
    assert (own / "ccache").is_dir() or shutil.which("ccache") is None
    # the caller's environment stayed outside
    assert "hunter2" not in (next(own.glob("work/*/build/CMakeCache.txt"))).read_text()
    # a second rebuild with the same --cache starts from nothing again
    r = invoke(project, "rebuild", str(archive), "--cache", str(rb), "-j", "2")
    assert r.exit_code == 0, r.output
    assert len(list(rb.glob("rebuild-*"))) == 2

    # the explicit opt-out runs the release's code as the user: what the sandbox stopped
    r = invoke(project, "rebuild", str(archive), "--cache", str(tmp_path / "rb2"), "-j", "2", "--no-sandbox")
    assert r.exit_code == 0, r.output
    assert "NOT sandboxed (--no-sandbox)" in r.stderr
    assert (marks / "configure").exists() and (marks / "build").exists()


def test_a_rebuild_runs_the_cmake_and_ninja_of_a_venv_under_tmp(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """patchkit in a venv under /tmp rebuilt nothing: exit 6, `bwrap: execvp
    /tmp/…/cmake/data/bin/cmake: No such file or directory` (the sandbox's /tmp hid it)."""
    from patchkit.builder import cmake as cm
    from tests.fixtures.venv_tools import venv_tools

    r = invoke(project, "build", "fixture", "--out", str(tmp_path / "out"), "-j", "2")
    assert r.exit_code == 0, r.output
    r = invoke(
        project, "release", "fixture", "--build-dir", str(tmp_path / "out"), "--out", str(tmp_path / "d")
    )
    assert r.exit_code == 0, r.output
    (archive,) = (tmp_path / "d").glob("*.tar.gz")
    tools = venv_tools(tmp_path / "venv")
    monkeypatch.setattr(cm, "find_tools", lambda env: tools)
    r = invoke(project, "rebuild", str(archive), "-j", "2")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"identical: {archive.name} (")


def test_smoke_needs_the_explicit_opt_out(project: Path, tmp_path: Path) -> None:
    archive = tmp_path / "x.tar.gz"
    archive.write_bytes(b"")
    r = invoke(project, "rebuild", str(archive), "--smoke")
    assert_error(r, 2, "--smoke runs the rebuilt binaries", "--no-sandbox")


def test_the_sandbox_is_read_only_without_network_and_says_when_it_cannot_start(tmp_path: Path) -> None:
    from patchkit.core.proc import run

    env = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
    work = tmp_path / "work"
    box = sandbox.prepare([work], env)
    res = run(
        box.wrap(
            [
                "sh",
                "-c",
                f"touch {work}/ok && echo wrote-work; touch /usr/patchkit-probe || echo host-ro; "
                "cat /proc/net/dev",
            ]
        ),
        env=env,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert "wrote-work" in res.stdout and "host-ro" in res.stdout
    assert (work / "ok").exists() and not Path("/usr/patchkit-probe").exists()
    assert "eth0" not in res.stdout and "lo:" in res.stdout
    # no bwrap on PATH, or one that cannot make namespaces: one line naming the opt-out
    with pytest.raises(ToolMissing) as e:
        sandbox.prepare([work], {"PATH": str(tmp_path / "empty")})
    assert e.value.problem == SandboxUnavailable(found="no-bwrap")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    )
    (fake / "bwrap").chmod(0o755)
    with pytest.raises(ToolMissing) as e:
        sandbox.prepare([work], {"PATH": f"{fake}:/usr/bin:/bin"})
    assert isinstance(e.value.problem, SandboxUnavailable) and e.value.problem.found == "cannot-start"
    assert "No permissions to create new namespace" in e.value.problem.why
