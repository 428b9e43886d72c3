"""builder.sandbox with the real bubblewrap: what a build's code can do inside, as root (CI
runs as root: bwrap keeps every capability for a root caller unless told) and as an
ordinary user; programs that live under /tmp (a venv) still run; the home, host sockets
and the rest of the host are not there; what it writes is the caller's."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from patchkit.builder import sandbox
from patchkit.builder.problems import SandboxUnavailable
from patchkit.core.errors import ToolMissing
from patchkit.core.proc import run

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
NOBODY = 65534  # the uid inside
CALLER = 4242  # an ordinary user outside (no passwd entry needed)

# the escape a carried configure step tried as root: unmount the sandbox's /tmp, make the
# read-only host writable, write outside; then what it may do (write its own folder)
ESCAPE = """\
grep -E '^(Uid|CapEff|CapBnd|NoNewPrivs):' /proc/self/status
umount -l /tmp 2>/dev/null; mount -o remount,bind,rw / 2>/dev/null; mount -o remount,rw /usr 2>/dev/null
touch {outside}/escaped 2>/dev/null && echo ESCAPED
touch /usr/patchkit-escaped 2>/dev/null && echo ESCAPED-USR
unshare -U true 2>/dev/null && echo NESTED-USERNS
echo made > {work}/made && rm -f {work}/old && echo wrote-work
"""


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder an unprivileged user can reach (pytest's tmp_path is the caller's, 0700)."""
    base = Path(tempfile.mkdtemp(prefix="patchkit-sandbox-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _status(stdout: str) -> dict[str, str]:
    return {
        k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in stdout.splitlines() if ":" in ln)
    }


@pytest.mark.parametrize("caller", ["this user", "an unprivileged user"])
def test_the_escape_fails_and_nothing_is_kept_privileged(shared_tmp: Path, caller: str) -> None:
    """As root, bwrap kept CapEff 000001fffeffffff and uid 0: the escape wrote on the host."""
    prefix: list[str] = []
    if caller == "an unprivileged user":
        if os.geteuid() != 0 or shutil.which("setpriv") is None:
            pytest.skip("switching to another user needs root and setpriv")
        prefix = ["setpriv", f"--reuid={CALLER}", f"--regid={CALLER}", "--clear-groups", "--"]
    owner = CALLER if prefix else os.getuid()
    work, outside = shared_tmp / "work", shared_tmp / "outside"
    for d in (work, outside):
        d.mkdir()
        d.chmod(0o777)  # even a world-writable host folder outside the binds stays out of reach
    (work / "old").write_text("from an earlier run\n")
    if prefix:
        os.chown(work, owner, owner)
        os.chown(work / "old", owner, owner)
    box = sandbox.prepare([work], ENV)
    res = run(
        [*prefix, *box.wrap(["/bin/sh", "-c", ESCAPE.format(outside=outside, work=work)])],
        env=ENV,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    status = _status(res.stdout)
    assert int(status["CapEff"], 16) == 0 and int(status["CapBnd"], 16) == 0, res.stdout
    assert status["NoNewPrivs"] == "1"
    assert status["Uid"].split() == [str(NOBODY)] * 4
    try:
        assert "ESCAPED" not in res.stdout and "NESTED-USERNS" not in res.stdout
        assert list(outside.iterdir()) == [] and not Path("/usr/patchkit-escaped").exists()
    finally:  # (what the old sandbox let it write on the host)
        Path("/usr/patchkit-escaped").unlink(missing_ok=True)
    # its own folder stays usable: written and deleted inside, the file the caller's outside
    assert "wrote-work" in res.stdout and not (work / "old").exists()
    # (uid 65534 inside is the caller outside: nobody's files would break the next build)
    assert (work / "made").stat().st_uid == owner and (work / "made").stat().st_gid == (
        CALLER if prefix else os.getgid()
    )
    # ...so the next run (and the caller) can replace it
    again = run([*prefix, *box.wrap(["/bin/sh", "-c", f"rm {work}/made && touch {work}/made"])], env=ENV)
    assert again.returncode == 0, again.stderr
    (work / "made").unlink()


def test_only_the_allowed_view_is_there(shared_tmp: Path) -> None:
    """The home, /run (the user bus, docker.sock), /var and the rest of the host are not in
    the sandbox; /usr, /etc's compiler parts and the writable folders are. An environment
    variable that is not the build's is unset."""
    home = Path(
        tempfile.mkdtemp(prefix="patchkit-home-", dir="/var/tmp" if Path("/var/tmp").is_dir() else None)
    )
    try:
        (home / ".ssh").mkdir()
        (home / ".ssh/id_x").write_text("PRIVATE KEY\n")
        work = shared_tmp / "work"
        env = {**ENV, "HOME": str(home), "GITHUB_TOKEN": "hunter2", "CFLAGS": "-O2"}
        box = sandbox.prepare([work], env)
        script = (
            f"cat {home}/.ssh/id_x 2>/dev/null && echo READ-KEY; "
            'ls -A "$HOME"; echo "home=$HOME token=${GITHUB_TOKEN:-none} cflags=$CFLAGS"; '
            "for d in /run /var /home /root /mnt /opt /srv; do test -e $d && echo HAS-$d; done; "
            "test -e /etc/shadow && echo HAS-shadow; test -e /etc/alternatives/cc && echo has-cc-link; "
            f"cc --version >/dev/null && echo cc-runs; touch {work}/x && echo wrote-work"
        )
        res = run(box.wrap(["/bin/sh", "-c", script]), env=env, timeout=60)
        assert res.returncode == 0, res.stderr
        assert "READ-KEY" not in res.stdout and "PRIVATE KEY" not in res.stdout
        assert "home=/tmp token=none cflags=-O2" in res.stdout
        assert "HAS-" not in res.stdout, res.stdout
        assert "cc-runs" in res.stdout and "wrote-work" in res.stdout
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_programs_under_tmp_are_shown_where_they_live(shared_tmp: Path, tmp_path: Path) -> None:
    """A cmake and ninja in a venv under /tmp: the sandbox's own /tmp hid them (`bwrap:
    execvp /tmp/…/cmake: No such file or directory`); now they run, cmake finds its
    modules, and a configure and build of a small project work."""
    from tests.fixtures.venv_tools import venv_tools

    venv = tmp_path / "venv"
    tools = venv_tools(venv)
    data = Path(tools.cmake.cmake_path).resolve().parent.parent
    src, build = tmp_path / "src", tmp_path / "build"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(p C)\nadd_executable(p p.c)\n"
    )
    (src / "p.c").write_text("int main(void) { return 0; }\n")
    box = sandbox.prepare([build], ENV, readonly=[src], programs=[venv / "bin/cmake", venv / "bin/ninja"])
    cmake = str(venv / "bin/cmake")
    res = run(
        box.wrap(
            [
                "/bin/sh",
                "-c",
                f"{cmake} -S {src} -B {build} -G Ninja -DCMAKE_MAKE_PROGRAM={venv}/bin/ninja"
                f" && {cmake} --build {build}",
            ]
        ),
        env=ENV,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert (build / "p").is_file()
    # and its folders are shown, not the venv's other files
    shown = {str(p) for p in box.readonly}
    assert str(data / "bin/cmake") in shown and str(venv / "bin/ninja") in shown
    assert str(venv) not in shown


def test_a_bwrap_that_keeps_privileges_is_refused(tmp_path: Path) -> None:
    """A bwrap that starts but leaves capabilities (a setuid or older one ignoring the
    flags) is no sandbox: one line naming --no-sandbox."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text(
        "#!/bin/sh\nprintf 'Uid:\\t0\\t0\\t0\\t0\\nCapEff:\\t000001fffeffffff\\nNoNewPrivs:\\t1\\n'\n"
    )
    (fake / "bwrap").chmod(0o755)
    with pytest.raises(ToolMissing) as e:
        sandbox.prepare([tmp_path / "w"], {"PATH": f"{fake}:/usr/bin:/bin"})
    assert isinstance(e.value.problem, SandboxUnavailable) and e.value.problem.found == "leaky"
    assert "kept capabilities" in e.value.problem.why


def test_a_bwrap_without_disable_userns_still_gives_an_unprivileged_sandbox(tmp_path: Path) -> None:
    """bwrap before 0.8 (Debian 11, Ubuntu 22.04) has no --disable-userns: the sandbox goes
    without it rather than refusing to start, and is still probed."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text(
        "#!/bin/sh\n"
        'case "$*" in *--disable-userns*) echo "bwrap: Unknown option --disable-userns" >&2; exit 1;; esac\n'
        "printf 'Uid:\\t65534\\t65534\\t65534\\t65534\\nCapEff:\\t0000000000000000\\nNoNewPrivs:\\t1\\n'\n"
    )
    (fake / "bwrap").chmod(0o755)
    box = sandbox.prepare([tmp_path / "w"], {"PATH": f"{fake}:/usr/bin:/bin"})
    assert box.nested and "--disable-userns" not in box.argv() and "--cap-drop" in box.argv()


@pytest.mark.skipif(not Path("/usr/bin/python3").is_file(), reason="needs /usr/bin/python3 inside")
def test_no_host_unix_socket_is_reachable_by_path_or_abstract_name(shared_tmp: Path) -> None:
    """A listening socket of the host: one at a path (hidden by the view) and one in the
    abstract namespace (no path to hide: the network namespace is what keeps it out)."""
    import socket

    run_dir = Path(
        tempfile.mkdtemp(prefix="patchkit-run-", dir="/var/tmp" if Path("/var/tmp").is_dir() else None)
    )
    path = run_dir / "bus"
    name = f"\0patchkit-test-{os.getpid()}"
    listeners = []
    try:
        for addr in (str(path), name):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(addr)
            s.listen(1)
            listeners.append(s)
        probe = (
            "import socket, sys\n"
            "for a in sys.argv[1:]:\n"
            "    s = socket.socket(socket.AF_UNIX)\n"
            "    a = a.replace('@', '\\0', 1)\n"
            "    try:\n"
            "        s.connect(a); print('CONNECTED', repr(a))\n"
            "    except OSError as e:\n"
            "        print('refused', e.errno)\n"
        )
        box = sandbox.prepare([shared_tmp / "w"], ENV)
        res = run(box.wrap(["/usr/bin/python3", "-c", probe, str(path), "@" + name[1:]]), env=ENV, timeout=60)
        assert res.returncode == 0, res.stderr
        assert res.stdout.count("refused") == 2 and "CONNECTED" not in res.stdout, res.stdout
        # (the same probe outside connects to both: the test can fail)
        outside = run(["/usr/bin/python3", "-c", probe, str(path), "@" + name[1:]], env=ENV, timeout=60)
        assert outside.stdout.count("CONNECTED") == 2, outside.stdout
    finally:
        for s in listeners:
            s.close()
        shutil.rmtree(run_dir, ignore_errors=True)
