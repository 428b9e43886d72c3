"""core.proc's results, without running anything (tests/integration/core/test_proc.py runs
real processes)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from patchkit.core.proc import LINE_MAX, Processes, RunResult


def result(rc: int | None, out: str = "", err: str = "", secs: float = 1.0) -> RunResult:
    return RunResult(args=("tool",), returncode=rc, stdout=out, stderr=err, seconds=secs)


def test_ok_and_output() -> None:
    assert result(0).ok and not result(1).ok and not result(None).ok
    assert result(0, "out\n", "err\n").output == "out\nerr\n"


@pytest.mark.parametrize(
    ("rc", "secs", "want"),
    [
        (None, 29.6, "timed out after 30s"),
        (-9, 1.0, "killed by signal 9"),
        (-6, 1.0, "killed by signal 6"),
        (0, 1.0, "exit 0"),
        (127, 0.0, "exit 127"),
    ],
)
def test_brief(rc: int | None, secs: float, want: str) -> None:
    assert result(rc, secs=secs).brief() == want


def test_last_line_prefers_error_lines_and_knows_no_program() -> None:
    assert (
        result(1, "ok\n", "main: error: failed to load model\nbye\n").last_line()
        == "main: error: failed to load model"
    )
    # "error:" before "failed", wherever they are; stdout's lines come before stderr's
    assert result(1, "x: error: first\n", "y failed\n").last_line() == "x: error: first"
    assert result(1, "a error: 1\n", "b error: 2\n").last_line() == "b error: 2"
    # an assert is just a line that says "failed" here; a later error line wins over it
    # (llama.cpp's telling lines: smoke.llama_output, tests/unit/smoke/test_llama_output.py)
    out = "loading\nGGML_ASSERT(data + nbytes <= base + size) failed\nmore\n"
    assert result(1, out, "error: later\n").last_line() == "error: later"
    assert result(1, out, "").last_line() == "GGML_ASSERT(data + nbytes <= base + size) failed"
    assert result(1, "a\nb\n", "").last_line() == "b"
    assert result(1, "a\n", "c\n  \n").last_line() == "c"  # stderr first, blank lines skipped
    assert result(0).last_line() == ""
    assert len(result(1, "error: " + "x" * 500).last_line()) == LINE_MAX == 200


def test_lines_are_stdout_then_stderr_without_blanks() -> None:
    assert result(1, " a \n\n b\n", "\n c\n").lines() == ["a", "b", "c"]
    assert result(0).lines() == []


def test_log_tail_without_a_picker_is_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "srv.log"
    log.write_text("one\n\nGGML_ASSERT(x) failed\nthree\nfour\n")
    procs = Processes(tmp_path)
    procs.logs[4242] = log
    proc = cast("subprocess.Popen[bytes]", SimpleNamespace(pid=4242))
    assert procs.log_tail(proc) == "GGML_ASSERT(x) failed | three | four"
    assert procs.log_tail(proc, 1) == "four"
    assert procs.log_tail(cast("subprocess.Popen[bytes]", SimpleNamespace(pid=1))) == ""  # no log
    log.write_text("x" * 1000)
    assert len(procs.log_tail(proc)) == 400


def test_log_tail_shows_what_the_picker_picks(tmp_path: Path) -> None:
    log = tmp_path / "srv.log"
    log.write_text("start\nTHE LINE " + "y" * 400 + "\nafter\n")
    picked: list[list[str]] = []

    def pick(lines: Sequence[str]) -> str | None:
        picked.append(list(lines))
        return next((ln for ln in lines if ln.startswith("THE LINE")), None)

    procs = Processes(tmp_path, telling=pick)
    procs.logs[4242] = log
    proc = cast("subprocess.Popen[bytes]", SimpleNamespace(pid=4242))
    assert procs.log_tail(proc, 1) == ("THE LINE " + "y" * 400)[:300]
    assert picked == [["start", "THE LINE " + "y" * 400, "after"]]
    log.write_text("start\nafter\n")  # nothing to pick: the last lines
    assert procs.log_tail(proc, 1) == "after"


def test_binary_results_keep_bytes() -> None:
    r = RunResult(args=("t",), returncode=0, stdout="", stderr="", seconds=0.0, data=b"\x00\xff")
    assert r.data == b"\x00\xff" and r.stdout == ""
    assert result(0).data == b""


class _Endless:
    """A stream holding one ``size``-byte line without a newline, then ``tail``: made as it
    is read, never held (what a build tool's pipe is)."""

    def __init__(self, size: int, tail: bytes = b"") -> None:
        self.left = size
        self.tail = tail
        self.biggest = 0

    def readline(self, size: int = -1) -> bytes:
        assert size > 0, "an unbounded readline holds the whole line"
        self.biggest = max(self.biggest, size)
        if self.left:
            n = min(size, self.left)
            self.left -= n
            return b"x" * n
        out, self.tail = self.tail[:size], self.tail[size:]
        if b"\n" in out:
            i = out.index(b"\n") + 1
            out, self.tail = out[:i], out[i:] + self.tail
        return out


def test_a_300_mb_line_is_cut_to_its_head_and_said_so() -> None:
    """A tool's line of 300 MB without a newline was held whole (896 MB RSS): now its first
    STREAM_LINE_MAX bytes and a note, read past in bounded pieces; the next line is whole."""
    import tracemalloc

    from patchkit.core.proc import STREAM_LINE_MAX, capped_lines

    stream = _Endless(300_000_000, b"\nnext line\nlast")
    tracemalloc.start()
    try:
        lines = list(capped_lines(stream))  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    head, *rest = lines
    assert head.startswith(b"x" * STREAM_LINE_MAX)
    assert head[STREAM_LINE_MAX:] == f" [... line cut: {300_000_000 - STREAM_LINE_MAX} more bytes]\n".encode()
    assert rest == [b"next line\n", b"last"]
    assert stream.biggest <= STREAM_LINE_MAX + 1
    assert peak < 8 * STREAM_LINE_MAX  # bounded by the cap, not by the line


def test_lines_up_to_the_cap_are_kept_whole() -> None:
    import io

    from patchkit.core.proc import capped_lines

    data = b"a" * 10 + b"\n" + b"b" * 16 + b"\n" + b"c" * 17 + b"\n" + b"d" * 16
    assert list(capped_lines(io.BytesIO(data), limit=16)) == [
        b"a" * 10 + b"\n",
        b"b" * 16 + b"\n",
        b"c" * 16 + b" [... line cut: 1 more bytes]\n",
        b"d" * 16,
    ]
