"""`patchkit rpc-probe` against the in-process fake server."""

from __future__ import annotations

import json

from click.testing import CliRunner

from patchkit.cli import main
from patchkit.core.errors import RpcError, SmokeError
from tests.fixtures.rpc_server import FakeRpcServer, closed_port

# the command -------------------------------------------------------------------------------


def _cli(*args: str):
    return CliRunner().invoke(main, ["rpc-probe", *args])


def test_cli_rejects_bad_endpoint() -> None:
    r = _cli("localhost")
    assert r.exit_code == 2
    assert "error: 'localhost' is not HOST:PORT" in r.stderr
    assert r.stdout == ""


def test_cli_refused_is_one_line() -> None:
    port = closed_port()
    r = _cli(f"127.0.0.1:{port}", "--timeout", "2")
    assert r.exit_code == RpcError.exit_code == 14
    assert f"error: 127.0.0.1:{port}: connection refused" in r.stderr
    assert "Traceback" not in r.output


def test_cli_info_and_guard_json() -> None:
    with FakeRpcServer("patched", version=(4, 0, 1)) as srv:
        r = _cli(f"127.0.0.1:{srv.port}", "--guard", "--json", "--count", "3")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["server"]["version"] == "4.0.1" and out["server"]["rtt"]["count"] == 3
    assert len(out["server"]["devices"]) == 2
    assert out["guard"]["verdict"] == "patched"
    assert [c["outcome"] for c in out["guard"]["cases"]] == ["accepted", "accepted", "refused"]


def test_cli_guard_unpatched_fails_with_smoke_error() -> None:
    with FakeRpcServer("unpatched") as srv:
        r = _cli(f"127.0.0.1:{srv.port}", "--guard")
    assert r.exit_code == SmokeError.exit_code
    assert "zero-byte tensor guard (patch 0001): unpatched" in r.stderr
    assert "zero-byte tensor guard is unpatched; the server died" in r.stderr
    assert "server-died" in r.stderr


def test_cli_info_human() -> None:
    with FakeRpcServer(devices=1) as srv:
        r = _cli(f"127.0.0.1:{srv.port}")
    assert r.exit_code == 0, r.output
    assert f"127.0.0.1:{srv.port}: ggml RPC protocol 5.0.0, 1 device(s)" in r.stderr
    assert "device 0: 1,024 MiB free of 2,048 MiB, alignment 32, max buffer no limit" in r.stderr
    assert "guard" not in r.stderr  # no --guard: the server is only asked, never probed
    assert "cmd 10" not in srv.log
