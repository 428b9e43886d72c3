"""smoke.llama_output: the telling line of a llama.cpp run, a dead server's assert, the
kinds of llama-bench failure; on lines as llama.cpp prints them (no process runs)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from patchkit.core.proc import RunResult
from patchkit.smoke import llama_output
from patchkit.smoke.llama_output import failure_kind, server_assert, telling_line

# as ggml prints them: GGML_ASSERT is "FILE:LINE: GGML_ASSERT(cond) failed", GGML_ABORT is
# "FILE:LINE: message" (the scheduler's refusal of a tensor), then a backtrace
ASSERT = "/src/ggml/src/ggml-rpc/ggml-rpc.cpp:1094: GGML_ASSERT(data + nbytes <= base + size) failed"
PREALLOC = (
    "/src/ggml/src/ggml-backend.cpp:930: pre-allocated tensor (blk.1.attn_q.weight) in a buffer "
    "(RPC0[127.0.0.1:50052]) that cannot run the operation (NONE)"
)
BACKTRACE = (
    "[New LWP 81231]\n#0  0x00007f3c2d0ea42f in __GI___wait4 () at ../sysdeps/unix/sysv/linux/wait4.c:30\n"
)
TERMINATE = (
    "terminate called after throwing an instance of 'std::out_of_range'\n"
    "  what():  vector::_M_range_check: __n (which is 5) >= this->size() (which is 2)\n"
)
LOAD = (
    "llama_model_load: error loading model: tensor 'blk.0.attn_q.weight' data is not within the file bounds"
)


def result(rc: int | None, out: str = "", err: str = "") -> RunResult:
    return RunResult(args=("llama-cli",), returncode=rc, stdout=out, stderr=err, seconds=1.0)


@pytest.mark.parametrize(
    ("out", "err", "want"),
    [
        # a ggml assert wins over a later error line (core's generic last_line would take that)
        (f"loading\n{ASSERT}\nmore\n", "error: later\n", ASSERT),
        ("", f"llama_model_loader: loaded\n{ASSERT}\n{BACKTRACE}", ASSERT),
        # the scheduler's refusal, followed by ggml's backtrace
        ("", f"sched_reserve: reserving\n{PREALLOC}\n{BACKTRACE}", PREALLOC),
        # an assert says more than the refusal; the last assert of two
        ("", f"{ASSERT}\n{PREALLOC}\n", ASSERT),
        ("", f"{ASSERT}\nx.cpp:1: GGML_ASSERT(b) failed\n", "x.cpp:1: GGML_ASSERT(b) failed"),
        ("", "x.c:7: GGML_ABORT reached\nerror: later\n", "x.c:7: GGML_ABORT reached"),
        # nothing of ggml's: core's last_line (the last error line, else stderr's last line)
        (
            "",
            f"{LOAD}\nmain: error: failed to load model 'm.gguf'\n",
            "main: error: failed to load model 'm.gguf'",
        ),
        (
            "",
            TERMINATE,
            "what():  vector::_M_range_check: __n (which is 5) >= this->size() (which is 2)",
        ),
        ("a\nb\n", "", "b"),
        ("a\n", "c\n  \n", "c"),
        ("", "", ""),
    ],
)
def test_telling_line(out: str, err: str, want: str) -> None:
    assert telling_line(result(1, out, err)) == want


def test_telling_line_is_capped() -> None:
    assert (
        telling_line(result(1, "x: GGML_ASSERT(" + "y" * 500 + ") failed\n"))
        == ("x: GGML_ASSERT(" + "y" * 500)[:200]
    )


@pytest.mark.parametrize(
    ("lines", "want"),
    [
        (["starting", ASSERT, "[New LWP 81231]", "#0 __GI___wait4"], ASSERT),
        (["x.cpp:1: GGML_ASSERT(a) failed", ASSERT], ASSERT),  # the last one
        (["x.c:7: GGML_ABORT reached", "bye"], "x.c:7: GGML_ABORT reached"),
        # only asserts: a refusal or an error line is not what killed a server
        ([PREALLOC, "error: bind failed"], None),
        ([], None),
    ],
)
def test_server_assert(lines: list[str], want: str | None) -> None:
    assert server_assert(lines) == want


def test_servers_read_a_dead_servers_log_for_its_assert(tmp_path: Path) -> None:
    log = tmp_path / "rpc-1.log"
    log.write_text(f"create_backend: using CPU backend\n{ASSERT}\n{BACKTRACE}")
    procs = llama_output.servers(tmp_path)
    procs.logs[4242] = log
    proc = cast("subprocess.Popen[bytes]", SimpleNamespace(pid=4242))
    assert procs.log_tail(proc, 1) == ASSERT
    log.write_text("create_backend: using CPU backend\nStarting RPC server\n")
    assert procs.log_tail(proc, 1) == "Starting RPC server"


@pytest.mark.parametrize(
    ("lines", "want"),
    [
        (
            [
                "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9216.00 MiB on device 1: "
                "cudaMalloc failed: out of memory"
            ],
            "oom",
        ),
        (["llama_init_from_model: failed to allocate compute buffers"], "oom"),
        ([ASSERT], "abort"),
        (TERMINATE.splitlines(), "abort"),
        (["Aborted (core dumped)"], "abort"),
        (["Failed to connect to 127.0.0.1:50052"], "rpc"),
        (["error: invalid parameter for argument: -sm"], "args"),
        (["error: unknown argument: --fancy"], "args"),
        (["llama_bench: error: failed to load model 'tiny-llama.gguf'"], "load"),
        ([LOAD], "load"),
        (["weird", "exit"], None),
        ([], None),
    ],
)
def test_failure_kind(lines: list[str], want: str | None) -> None:
    found = failure_kind(lines)
    assert (found[0] if found else None) == want
    if found:
        assert found[1] in lines


def test_failure_kinds_are_tried_in_order_and_say_the_first_line() -> None:
    # an OOM that ggml then asserts on is an OOM; of two lines of one kind, the first
    lines = ["loading", ASSERT, "cudaMalloc failed: out of memory", "std::bad_alloc"]
    assert failure_kind(lines) == ("oom", "cudaMalloc failed: out of memory")
    assert [k for k, _ in llama_output.FAILURE_KINDS] == ["oom", "abort", "rpc", "args", "load"]
