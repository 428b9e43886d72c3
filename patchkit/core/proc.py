"""Child processes for the smoke stage: loopback servers that are always stopped.

``Processes`` is a context manager: every process it started is terminated (then
killed) on exit, also on failure or Ctrl-C. Servers bind 127.0.0.1 only, on a
free port chosen here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

__all__ = ["Processes", "RunResult", "free_port", "run_cmd", "wait_port"]

LOOPBACK = "127.0.0.1"


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunResult:
    args: tuple[str, ...]
    returncode: int | None  # None: timed out (killed)
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def brief(self) -> str:
        if self.returncode is None:
            return f"timed out after {self.seconds:.0f}s"
        if self.returncode < 0:
            return f"killed by signal {-self.returncode}"
        if self.returncode == 0:
            return "exit 0"
        # Windows / wine report an abort as exit 3 or 0xC0000409-ish codes
        return f"exit {self.returncode}"

    def last_line(self) -> str:
        """The most telling line: the last assert/error line, else the last line."""
        lines = [ln.strip() for ln in (self.stdout + "\n" + self.stderr).splitlines() if ln.strip()]
        for key in ("GGML_ASSERT", "GGML_ABORT", "pre-allocated tensor", "error:", "error ",
                    "failed"):
            for ln in reversed(lines):
                if key in ln:
                    return ln[:200]
        for text in (self.stderr, self.stdout):
            lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
            if lines:
                return lines[-1][:200]
        return ""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def wait_port(port: int, deadline: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
        time.sleep(0.1)
    return False


def _popen_kwargs() -> dict[str, object]:
    if sys.platform == "win32":
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}  # type: ignore[attr-defined]
    return {"start_new_session": True}


def run_cmd(args: Sequence[str], *, timeout: float, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> RunResult:
    """Run to completion with a time limit; stdin is closed, output captured."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(list(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, cwd=cwd, **_popen_kwargs())  # type: ignore[call-overload]
    except OSError as e:  # not executable, wrong architecture, missing loader...
        return RunResult(args=tuple(args), returncode=127, stdout="",
                         stderr=f"cannot run {args[0]}: {e.strerror or e}", seconds=0.0)
    try:
        out, err = proc.communicate(timeout=timeout)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        _stop(proc, grace=2)
        out, err = proc.communicate()
        rc = None
    except BaseException:
        _stop(proc, grace=0)
        raise
    return RunResult(args=tuple(args), returncode=rc,
                     stdout=out.decode("utf-8", "replace"), stderr=err.decode("utf-8", "replace"),
                     seconds=time.monotonic() - start)


def _stop(proc: subprocess.Popen[bytes], grace: float) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(OSError):
        if sys.platform != "win32":
            os.killpg(proc.pid, 15)
        else:
            proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            if sys.platform != "win32":
                os.killpg(proc.pid, 9)
            else:
                proc.kill()
        proc.wait()


class Processes:
    """Servers started for a check; all stopped when the block ends."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: dict[int, Path] = {}

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop_all()

    def stop_all(self) -> None:
        for p in self.procs:
            _stop(p, grace=3)
        self.procs.clear()

    def start_server(self, args: Sequence[str], port: int, *, name: str, timeout: float,
                     env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start a server listening on 127.0.0.1:port and wait until it accepts."""
        self.logdir.mkdir(parents=True, exist_ok=True)
        logfile = self.logdir / f"{name}-{port}.log"
        with logfile.open("wb") as f:
            try:
                proc = subprocess.Popen(list(args), stdin=subprocess.DEVNULL, stdout=f,
                                        stderr=subprocess.STDOUT, env=env, **_popen_kwargs())  # type: ignore[call-overload]
            except OSError as e:
                raise RuntimeError(f"cannot start {name} ({args[0]}): {e.strerror or e}") from None
        self.procs.append(proc)
        self.logs[proc.pid] = logfile
        if not wait_port(port, time.monotonic() + timeout, proc):
            tail = self.log_tail(proc)
            _stop(proc, grace=1)
            raise RuntimeError(f"{name} did not listen on {LOOPBACK}:{port} within {timeout:.0f}s"
                               + (f": {tail}" if tail else ""))
        return proc

    def log_tail(self, proc: subprocess.Popen[bytes], n: int = 3) -> str:
        """A dead server's telling line (its assert), else its last ``n`` lines."""
        path = self.logs.get(proc.pid)
        if path is None or not path.exists():
            return ""
        lines = [ln.strip() for ln in path.read_text("utf-8", "replace").splitlines() if ln.strip()]
        for ln in reversed(lines):
            if "GGML_ASSERT" in ln or "GGML_ABORT" in ln:
                return ln[:300]
        return " | ".join(lines[-n:])[:400]
