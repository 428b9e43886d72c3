"""What llama.cpp's tools print when they fail, read in one place.

ggml stops a process with ``GGML_ASSERT(...) failed`` or ``GGML_ABORT`` (then ``abort()``),
the scheduler refuses a tensor with ``pre-allocated tensor (...) in a buffer (...) that
cannot run the operation``, the tools say ``error: ...``, a C++ exception ends in
``terminate called after throwing ...``. Here: the telling line of a run (what a failed
check or point shows), a dead server's assert (``core.proc.Processes`` takes it as its
picker), and the kinds of llama-bench failure. ``core.proc`` knows none of this; bench
imports it from here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from patchkit.core.proc import LINE_MAX, Processes, RunResult

__all__ = [
    "ASSERTS",
    "FAILURE_KINDS",
    "failure_kind",
    "server_assert",
    "servers",
    "telling_line",
]

ASSERTS = ("GGML_ASSERT", "GGML_ABORT")  # ggml's way of stopping a process
# what says most about a failed run, in order of preference; then the generic error words
# of RunResult.last_line
_TELLING = (*ASSERTS, "pre-allocated tensor")

# the kinds of a failed llama-bench run, tried in this order on every line of its output
FAILURE_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "oom",
        re.compile(
            r"out of memory|failed to allocate|unable to allocate|cudaMalloc failed|"
            r"not enough memory|OutOfDeviceMemory|std::bad_alloc",
            re.I,
        ),
    ),
    ("abort", re.compile("|".join([*ASSERTS, "terminate called", "Aborted", "core dumped"]))),
    (
        "rpc",
        re.compile(
            r"failed to connect|Connection refused|connection (?:closed|reset)|"
            r"RPC server|remote_ptr",
            re.I,
        ),
    ),
    (
        "args",
        re.compile(
            r"invalid device|error: invalid parameter|invalid argument|"
            r"unknown argument",
            re.I,
        ),
    ),
    ("load", re.compile(r"failed to load model|error loading model|failed to create context", re.I)),
)


def telling_line(r: RunResult) -> str:
    """The line that says most about a llama.cpp tool's run: its last ggml assert / abort,
    else its last "pre-allocated tensor" refusal, else ``r.last_line()`` (the last error
    line, else the last line); at most ``LINE_MAX`` characters."""
    lines = r.lines()
    for key in _TELLING:
        for ln in reversed(lines):
            if key in ln:
                return ln[:LINE_MAX]
    return r.last_line()


def server_assert(lines: Sequence[str]) -> str | None:
    """A dead ggml-rpc-server's telling line: the last assert / abort in its log."""
    return next((ln for ln in reversed(lines) if any(k in ln for k in ASSERTS)), None)


def servers(logdir: Path) -> Processes:
    """A block of llama.cpp servers: a dead one's log tail is its assert, when it has one."""
    return Processes(logdir, telling=server_assert)


def failure_kind(lines: Sequence[str]) -> tuple[str, str] | None:
    """(kind, the line that says so) of a failed llama-bench run's output lines: the first
    kind of ``FAILURE_KINDS`` any line matches, the first such line; None if none does."""
    for kind, pat in FAILURE_KINDS:
        for ln in lines:
            if pat.search(ln):
                return kind, ln
    return None
