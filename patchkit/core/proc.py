"""THE way patchkit runs a process: every child (git, cmake, ninja, nvcc, llama.cpp's
tools, servers) starts here.

Rules, the same for every caller:

- argument lists only (never a shell string); stdin is closed unless ``input`` is given;
- every child gets its own process group (POSIX: a new session; Windows: a new process
  group inside a job object), so stopping it stops everything it started (ninja's
  compilers, a server's workers);
- on a timeout, and on any exception while it runs (Ctrl-C, SIGTERM turned into
  ``Terminated`` by :func:`install_signal_handlers`, an error in a callback), the whole
  group is stopped — TERM, a grace period, then KILL — before the exception goes on.
  Callers hold the cache lock around these calls, so no child outlives the lock;
- a signal that arrives while a child is being started (inside ``Popen``, or before the
  caller holds the child) waits until it does, then is raised: a child is never started
  that nobody stops. One that Python swallowed (it landed in a ``__del__`` or a weakref
  callback) is delivered again.

Three shapes: :func:`run` (to completion, output captured, optional timeout),
:func:`run_streaming` (output appended to a log file line by line, for long builds), and
:class:`Processes` (servers in the background, stopped when the block ends).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO

from patchkit.core import net
from patchkit.core.errors import ServerStartError

__all__ = [
    "ERROR_WORDS",
    "LINE_MAX",
    "STREAM_LINE_MAX",
    "LogPicker",
    "Processes",
    "RunResult",
    "Terminated",
    "capped_lines",
    "install_signal_handlers",
    "run",
    "run_streaming",
    "tool_version",
]

LOOPBACK = net.LOOPBACK
StrPath = str | os.PathLike[str]
ERROR_WORDS = ("error:", "error ", "failed")  # what makes a line of any program's output telling
LINE_MAX = 200  # a telling line, as shown
# picks the telling line (an assert, ...) of a server's log lines; None: it has none
LogPicker = Callable[[Sequence[str]], str | None]


class Terminated(KeyboardInterrupt):
    """SIGTERM (or SIGHUP / SIGBREAK) arrived: handled like Ctrl-C."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunResult:
    args: tuple[str, ...]
    returncode: int | None  # None: timed out (stopped)
    stdout: str
    stderr: str
    seconds: float
    data: bytes = b""  # stdout as bytes, for ``run(..., binary=True)`` (then stdout is "")

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def brief(self) -> str:
        if self.returncode is None:
            return f"timed out after {self.seconds:.0f}s"
        if self.returncode < 0:
            return f"killed by signal {-self.returncode}"
        # Windows / wine report an abort as exit 3 or 0xC0000409-ish codes
        return f"exit {self.returncode}"

    def lines(self) -> list[str]:
        """The non-blank lines of stdout, then stderr, stripped."""
        return _lines(self.stdout + "\n" + self.stderr)

    def last_line(self) -> str:
        """The line that says most, knowing nothing of the program: the last line saying
        ``error:`` / ``error `` / ``failed`` (in that order of preference), else the last
        line of stderr, else of stdout; at most ``LINE_MAX`` characters. Callers that know
        the program look for its own telling lines (llama.cpp's asserts) first."""
        lines = self.lines()
        for key in ERROR_WORDS:
            for ln in reversed(lines):
                if key in ln:
                    return ln[:LINE_MAX]
        for text in (self.stderr, self.stdout):
            if tail := _lines(text):
                return tail[-1][:LINE_MAX]
        return ""


def _lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip()]


# -- starting and stopping one child ------------------------------------------------------


def _popen(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None,
    cwd: StrPath | None,
    stdin: int | IO[bytes] | None,
    stdout: int | IO[bytes] | None,
    stderr: int | IO[bytes] | None,
) -> subprocess.Popen[bytes]:
    env_arg = None if env is None else dict(env)
    if sys.platform == "win32":
        proc = subprocess.Popen(
            list(args),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=env_arg,
            cwd=cwd,
            creationflags=subprocess.CREATE_NEW_PROCESS_GROUP,
        )
        from patchkit.core import _winjob

        _winjob.attach(proc)
    else:
        proc = subprocess.Popen(
            list(args),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=env_arg,
            cwd=cwd,
            start_new_session=True,
        )
    return proc


def _signal_group(proc: subprocess.Popen[bytes], kill: bool) -> None:
    with contextlib.suppress(OSError):
        if sys.platform == "win32":
            from patchkit.core import _winjob

            if not _winjob.terminate(proc):
                proc.kill()
        else:
            os.killpg(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)


def _session_members(sid: int) -> list[int]:
    """Linux: the live processes of session ``sid``. A child started here leads a session of
    its own, and everything it starts stays in it: also jobs that moved to process groups of
    their own (ninja runs each build step in a new group) and orphans whose parent died."""
    found: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # state, ppid, pgrp, session: a zombie is already dead (only not yet reaped)
        if len(fields) > 3 and fields[3] == str(sid).encode() and fields[0] != b"Z":
            found.append(int(name))
    return found


def _signal_session(sid: int, sig: int) -> bool:
    """Send ``sig`` to every live member of session ``sid``; whether there was any."""
    members = _session_members(sid) if sys.platform.startswith("linux") else []
    for pid in members:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)
    return bool(members)


def stop(proc: subprocess.Popen[bytes], *, grace: float = 2.0) -> None:
    """Stop a child and everything it started: TERM, ``grace`` seconds, then KILL; reaped.

    The KILL goes to the group even when the leader left in time: a member that ignores
    TERM (or was started by one that did not wait for it) must not outlive the stop. On
    Linux it also goes to the child's whole session, which holds what left the group
    (ninja's jobs each run in a process group of their own) or was orphaned.
    """
    if proc.poll() is None:
        _signal_group(proc, kill=grace <= 0 or sys.platform == "win32")
        if sys.platform != "win32" and grace > 0:
            _signal_session(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=max(grace, 0.1))
        except subprocess.TimeoutExpired:
            _signal_group(proc, kill=True)
            proc.wait()
    if sys.platform != "win32":
        with contextlib.suppress(OSError):  # ESRCH: nothing of the group is left
            os.killpg(proc.pid, signal.SIGKILL)
        for _ in range(100):  # a member may fork while it is being killed: until none is left
            if not _signal_session(proc.pid, signal.SIGKILL):
                break
            time.sleep(0.01)


def _argv(args: Sequence[StrPath]) -> list[str]:
    return [os.fspath(a) for a in args]


@contextlib.contextmanager
def _starting() -> Iterator[None]:
    """While the main thread starts a child and makes it the caller's: a signal waits
    (:func:`_on_signal` holds it) and is raised when the block ends, where the caller's
    ``except`` stops the child. Other threads never receive signals: nothing to hold."""
    global _starting_depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _starting_depth += 1
    try:
        yield
    finally:
        _starting_depth -= 1
        if _starting_depth == 0 and _held:
            signum = _held.pop()
            _held.clear()
            _raise_for(signum)


def run(
    args: Sequence[StrPath],
    *,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: StrPath | None = None,
    input: bytes | None = None,
    merge_stderr: bool = False,
    binary: bool = False,
    start_error: str = "raise",
) -> RunResult:
    """Run to completion, output captured. ``timeout``: stop the group, ``returncode`` None.

    ``merge_stderr``: stderr goes into stdout. ``binary``: stdout kept as bytes in
    ``data``. A program that cannot start raises OSError, or with ``start_error="result"``
    gives a result with exit 127 and the reason in stderr.
    """
    argv = _argv(args)
    start = time.monotonic()
    proc: subprocess.Popen[bytes] | None = None
    rc: int | None
    try:
        with _starting():
            try:
                proc = _popen(
                    argv,
                    env=env,
                    cwd=cwd,
                    stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                )
            except OSError as e:
                if start_error != "result":
                    raise
                failed = f"cannot run {argv[0]}: {e.strerror or e}"
        if proc is None:
            return RunResult(args=tuple(argv), returncode=127, stdout="", stderr=failed, seconds=0.0)
        out, err = proc.communicate(input=input, timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        assert proc is not None
        stop(proc, grace=2)
        out, err = proc.communicate()
        rc = None
    except BaseException:
        if proc is not None:
            stop(proc, grace=0.5)
        raise
    return RunResult(
        args=tuple(argv),
        returncode=rc,
        stdout="" if binary else (out or b"").decode("utf-8", "replace"),
        stderr=(err or b"").decode("utf-8", "replace"),
        seconds=time.monotonic() - start,
        data=(out or b"") if binary else b"",
    )


STREAM_LINE_MAX = 64 << 10  # a line of a build tool's output kept whole (its head beyond)
_SKIP_CHUNK = 64 << 10
_LOG_TAIL_BYTES = 1 << 20  # of a server's log, what its telling line is looked for in


def capped_lines(stream: IO[bytes], limit: int = STREAM_LINE_MAX) -> Iterator[bytes]:
    """``stream``'s lines, each at most ``limit`` bytes: a longer one (a tool that prints a
    300 MB line without a newline) is its first ``limit`` bytes and a note saying how many
    bytes were cut, read past in chunks, so memory stays bounded by ``limit`` whatever the
    tool prints."""
    while True:
        line = stream.readline(limit + 1)
        if not line:
            return
        if line.endswith(b"\n") or len(line) <= limit:  # whole (or the last, unended)
            yield line
            continue
        cut = len(line) - limit
        ended = False
        while not ended:
            more = stream.readline(_SKIP_CHUNK)
            if not more:
                break
            ended = more.endswith(b"\n")
            cut += len(more) - (1 if ended else 0)
        yield line[:limit] + f" [... line cut: {cut} more bytes]\n".encode()


def _open_log(path: Path) -> IO[str]:
    """``path`` opened to append to, never through what was planted in its place (the
    folder may be one a build's code can write, a rebuild's sandboxed work folder): a link,
    or a FIFO, is replaced by a new file, so a link to ``~/.bashrc`` does not get the
    build's output written into it."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for _ in range(3):
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENXIO):  # a link; a FIFO nobody reads
                raise
            path.unlink()
            continue
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.set_blocking(fd, True)
            return os.fdopen(fd, "a", encoding="utf-8", errors="replace", buffering=1)
        os.close(fd)  # a FIFO someone reads, a device
        path.unlink()
    raise OSError(errno.EEXIST, f"{path} keeps being replaced while it is opened")


def run_streaming(
    args: Sequence[StrPath],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: StrPath | None = None,
    on_line: Callable[[str], None] | None = None,
) -> int:
    """Run with stdout+stderr appended to ``log_path`` (after a ``$ command`` line); each
    line also goes to ``on_line``. Returns the exit code."""
    argv = _argv(args)
    with _open_log(log_path) as logf:
        logf.write(f"\n$ {subprocess.list2cmdline(argv)}\n")
        logf.flush()
        proc: subprocess.Popen[bytes] | None = None
        try:
            with _starting():
                proc = _popen(
                    argv,
                    env=env,
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                )
            assert proc.stdout is not None
            for raw in capped_lines(proc.stdout):
                line = raw.decode("utf-8", "replace")
                logf.write(line)
                if on_line is not None:
                    on_line(line)
            return proc.wait()
        except BaseException:
            if proc is not None:
                stop(proc, grace=2)
            raise
        finally:
            if proc is not None and proc.stdout is not None:
                proc.stdout.close()


def tool_version(path: StrPath | None, *, timeout: float = 30) -> str | None:
    """The last word of ``PROGRAM --version``'s first line (``ccache version 4.7.5`` -> 4.7.5)."""
    if path is None:
        return None
    try:
        r = run([path, "--version"], timeout=timeout)
    except OSError:
        return None
    out = r.stdout
    return out.splitlines()[0].split()[-1] if out.strip() else None


# -- servers in the background -------------------------------------------------------------


class Processes:
    """Servers started for a check; all stopped (whole groups) when the block ends.

    ``telling`` picks a dead server's telling line from its log's lines (for llama.cpp's
    servers, their assert: the caller knows the program, this module does not); without
    it, or when it finds none, a log's last lines are its tail."""

    def __init__(self, logdir: Path, *, telling: LogPicker | None = None) -> None:
        self.logdir = logdir
        self.telling = telling
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: dict[int, Path] = {}

    def __enter__(self) -> Processes:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop_all()

    def stop_all(self) -> None:
        for p in self.procs:
            stop(p, grace=3)
        self.procs.clear()

    def start_server(
        self,
        args: Sequence[StrPath],
        port: int,
        *,
        name: str,
        timeout: float,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start a server listening on 127.0.0.1:port and wait until it accepts.

        ServerStartError (exit 16) when it cannot start, or dies or does not listen within
        ``timeout`` seconds (then stopped; the message ends with its log's tail)."""
        argv = _argv(args)
        self.logdir.mkdir(parents=True, exist_ok=True)
        logfile = self.logdir / f"{name}-{port}.log"
        with logfile.open("wb") as f, _starting():  # once started, it is in self.procs
            try:
                proc = _popen(
                    argv, env=env, cwd=None, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT
                )
            except OSError as e:
                raise ServerStartError(f"cannot start {name} ({argv[0]}): {e.strerror or e}") from None
            self.procs.append(proc)
            self.logs[proc.pid] = logfile
        if not net.wait_port(port, time.monotonic() + timeout, alive=lambda: proc.poll() is None):
            tail = self.log_tail(proc)
            stop(proc, grace=1)
            raise ServerStartError(
                f"{name} did not listen on {LOOPBACK}:{port} within {timeout:.0f}s"
                + (f": {tail}" if tail else "")
            )
        return proc

    def log_tail(self, proc: subprocess.Popen[bytes], n: int = 3) -> str:
        """A server's telling line (what ``telling`` picks), else its last ``n`` lines."""
        path = self.logs.get(proc.pid)
        if path is None or not path.exists():
            return ""
        with path.open("rb") as f:  # its end: a server's log has no size limit
            f.seek(max(0, path.stat().st_size - _LOG_TAIL_BYTES))
            lines = _lines(f.read(_LOG_TAIL_BYTES).decode("utf-8", "replace"))
        picked = self.telling(lines) if self.telling is not None else None
        if picked:
            return picked[:300]
        return " | ".join(lines[-n:])[:400]


# -- signals ---------------------------------------------------------------------------------

_stopping = threading.Event()
_starting_depth = 0  # > 0 while the main thread starts a child (see _starting)
_held: list[int] = []  # a signal that arrived meanwhile, raised when the child is held
_last_signal: list[int] = []  # the signal whose exception is on its way (for a redelivery)


def _raise_for(signum: int) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(f"signal {signum}")


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if _stopping.is_set():
        return  # already unwinding: let the children be stopped, do not abort the cleanup
    _stopping.set()
    _last_signal[:] = [signum]
    if _starting_depth > 0:
        _held.append(signum)  # a child is being started: raised once the caller holds it
        return
    _raise_for(signum)


def _on_unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    """Python swallows an exception raised in a ``__del__``, a weakref or GC callback: a
    Ctrl-C that landed there would be lost (and every later one ignored). Deliver it again:
    the handler then raises where the program can unwind."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _last_signal and not sys.is_finalizing():
        _stopping.clear()
        # from another thread, a moment later: the handler then runs in the main thread
        # once it has left the callback (raised here, it would be swallowed again)
        signum = _last_signal[0]
        threading.Thread(target=_raise_later, args=(signum,), daemon=True).start()
        return
    sys.__unraisablehook__(unraisable)


def _raise_later(signum: int) -> None:
    time.sleep(0.01)
    signal.raise_signal(signum)


def install_signal_handlers() -> None:
    """Ctrl-C, SIGTERM and SIGHUP (SIGBREAK on Windows) raise in the main thread, so every
    ``finally`` runs: children are stopped, then the cache lock is released."""
    _stopping.clear()
    _held.clear()
    _last_signal.clear()
    names = ["SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK"]
    for name in names:
        sig = getattr(signal, name, None)
        if sig is not None:
            with contextlib.suppress(OSError, ValueError):  # ValueError: not the main thread
                signal.signal(sig, _on_signal)
    sys.unraisablehook = _on_unraisable
