"""Smoke checks whose ggml-rpc-server does not start, or does not speak the protocol: the
check fails saying why (the server's assert, the probe's error), the run goes on."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from patchkit.smoke.runner import run_smoke
from tests.integration.smoke.test_runner import make_out

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="fake binaries are POSIX scripts"),
]
ASSERT = "/src/ggml/src/ggml-rpc/ggml-rpc.cpp:1820: GGML_ASSERT(port > 0) failed"


def test_a_server_that_asserts_at_start_fails_the_checks_that_need_it(tmp_path: Path) -> None:
    out = make_out(tmp_path)
    (out / "bin" / "ggml-rpc-server").write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "if '--version' in sys.argv or '--help' in sys.argv:\n"
        "    print('usage: ggml-rpc-server [options]')\n"
        "    raise SystemExit(0)\n"
        "print('create_backend: using CPU backend', flush=True)\n"
        f"print({ASSERT!r}, flush=True)\n"
        "print('[New LWP 81231]', flush=True)\n"
        "raise SystemExit(134)\n"
    )
    report = run_smoke(out, env=dict(os.environ), only=("generate", "rpc-guard", "meta-ot"))
    got = {c.name: (c.status, c.why) for c in report.checks}
    want = f"rpc did not listen on 127.0.0.1:<port> within 20s: {ASSERT}"
    assert got["rpc-guard"] == ("fail", want)
    assert got["generate"] == ("fail", f"RPC: {want}")
    assert got["meta-ot"] == ("fail", want.replace("rpc did", "rpc-a did"))


def test_a_server_that_does_not_speak_rpc_fails_the_guard_probe(tmp_path: Path) -> None:
    out = make_out(tmp_path)  # fake_llama's plain server: accepts, reads, hangs up
    report = run_smoke(out, env=dict(os.environ), only=("rpc-guard",))
    guard = next(c for c in report.checks if c.name == "rpc-guard")
    assert (guard.status, guard.why) == (
        "fail",
        "probe failed: 127.0.0.1:<port>: the server closed the connection on HELLO",
    )
