"""core.proc's results, without running anything (tests/integration/core/test_proc.py runs
real processes)."""

from __future__ import annotations

import pytest

from patchkit.core.proc import RunResult


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


def test_last_line_prefers_asserts_and_errors() -> None:
    out = "loading\nGGML_ASSERT(data + nbytes <= base + size) failed\nmore\n"
    assert result(1, out, "error: later\n").last_line() == "GGML_ASSERT(data + nbytes <= base + size) failed"
    assert (
        result(1, "ok\n", "main: error: failed to load model\nbye\n").last_line()
        == "main: error: failed to load model"
    )
    assert result(1, "a\nb\n", "").last_line() == "b"
    assert result(1, "a\n", "c\n  \n").last_line() == "c"  # stderr first, blank lines skipped
    assert result(0).last_line() == ""
    assert len(result(1, "error: " + "x" * 500).last_line()) == 200


def test_binary_results_keep_bytes() -> None:
    r = RunResult(args=("t",), returncode=0, stdout="", stderr="", seconds=0.0, data=b"\x00\xff")
    assert r.data == b"\x00\xff" and r.stdout == ""
    assert result(0).data == b""
