"""`patchkit rpc-probe` against the in-process fake server."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from patchkit.cli import main
from patchkit.core.errors import RpcError, SmokeError
from tests.fixtures.buildinfo import build_info_json
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
    assert r.stderr == ""
    out = json.loads(r.stdout)
    assert set(out) == {"schema", "server", "guard"} and out["schema"] == 1  # no --build: no skew
    assert set(out["server"]) == {"endpoint", "version", "devices", "connect_s", "rtt"}
    assert set(out["guard"]) == {"endpoint", "version", "verdict", "ok", "cases"}
    assert out["server"]["version"] == "4.0.1" and out["server"]["rtt"]["count"] == 3
    assert len(out["server"]["devices"]) == 2
    assert out["guard"]["verdict"] == "patched"
    assert [c["outcome"] for c in out["guard"]["cases"]] == ["accepted", "accepted", "refused"]


def test_cli_guard_unpatched_fails_with_smoke_error() -> None:
    with FakeRpcServer("unpatched") as srv:
        r = _cli(f"127.0.0.1:{srv.port}", "--guard")
    assert r.exit_code == SmokeError.exit_code
    assert "zero-byte tensor guard (patch 0001): unpatched" in r.stdout  # the result
    assert "server-died" in r.stdout
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]  # then the error
    assert len(errors) == 1 and "zero-byte tensor guard is unpatched; the server died" in errors[0]
    assert "guard (patch 0001)" not in r.stderr


def test_cli_info_human() -> None:
    with FakeRpcServer(devices=1) as srv:
        r = _cli(f"127.0.0.1:{srv.port}")
    assert r.exit_code == 0, r.output
    assert r.stderr == ""  # the result on stdout: `rpc-probe HOST:PORT | grep device` works
    lines = r.stdout.splitlines()
    assert lines[0] == f"127.0.0.1:{srv.port}: ggml RPC protocol 5.0.0, 1 device(s)"
    assert lines[1] == "  device 0: 1,024 MiB free of 2,048 MiB, alignment 32, max buffer no limit"
    assert lines[2].startswith("  connect + HELLO ") and len(lines) == 3
    assert "guard" not in r.stdout  # no --guard: the server is only asked, never probed
    assert "cmd 10" not in srv.log


def test_cli_build_skew_line_on_stdout_and_its_json(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "build-info.json").write_text(json.dumps(build_info_json(rpc_protocol="5.0.0")))
    with FakeRpcServer(version=(5, 0, 0)) as srv:
        r = _cli(f"127.0.0.1:{srv.port}", "--build", str(out))
    assert r.exit_code == 0, r.output
    assert r.stderr == "" and f"can talk to 127.0.0.1:{srv.port} (RPC 5.0.0)" in r.stdout.splitlines()[0]
    with FakeRpcServer(version=(5, 1, 0)) as srv:
        r = _cli(f"127.0.0.1:{srv.port}", "--build", str(out), "--json")
    assert r.exit_code == RpcError.exit_code
    data = json.loads(r.stdout)  # only what was learnt: the verdict
    assert set(data) == {"schema", "skew"} and data["skew"]["ok"] is False
    assert "cannot talk to" in data["skew"]["message"] and "error: " in r.stderr


def _skew_words(tmp_path: Path, client: str, server: tuple[int, int, int]) -> tuple[int, str, str, str, str]:
    """(exit code, the text's verdict line, the --json message, the port, upstream's rule)
    of one probe."""
    out = tmp_path / f"out-{client}"
    out.mkdir(exist_ok=True)
    (out / "build-info.json").write_text(json.dumps(build_info_json(rpc_protocol=client)))
    with FakeRpcServer(version=server) as srv:
        text = _cli(f"127.0.0.1:{srv.port}", "--build", str(out))
        js = _cli(f"127.0.0.1:{srv.port}", "--build", str(out), "--json")
    said = text.stdout.splitlines()[0] if text.exit_code == 0 else text.stderr.splitlines()[-1]
    skew = json.loads(js.stdout)["skew"]
    return text.exit_code, said, skew["message"], str(srv.port), skew["reason"]


def test_golden_skew_lines(tmp_path: Path) -> None:
    """The verdict lines word for word: what to rebuild, and the command that does it."""
    commit = build_info_json()["upstream"]["commit"][:12]
    code, said, message, port, why = _skew_words(tmp_path, "5.0.0", (5, 1, 0))
    who = f"{tmp_path}/out-5.0.0 (cpu-rpc, upstream {commit}, RPC 5.0.0)"
    want = (
        f"{who} cannot talk to 127.0.0.1:{port} (RPC 5.1.0): {why}; rebuild cpu-rpc at an upstream commit with RPC 5.1 or later (`patchkit bump`, "
        f"then `patchkit build cpu-rpc`), or run a server built from upstream {commit} there"
    )
    assert (code, said, message) == (RpcError.exit_code, f"error: {want}", want)
    code, said, message, port, why = _skew_words(tmp_path, "6.0.0", (5, 1, 0))
    who = f"{tmp_path}/out-6.0.0 (cpu-rpc, upstream {commit}, RPC 6.0.0)"
    want = (
        f"{who} cannot talk to 127.0.0.1:{port} (RPC 5.1.0): {why}; "
        f"rebuild the server at 127.0.0.1:{port} from upstream {commit} "
        "(`patchkit build cpu-rpc`, then its bin/ggml-rpc-server there)"
    )
    assert (code, said, message) == (RpcError.exit_code, f"error: {want}", want)
    code, said, _, port, why = _skew_words(tmp_path, "5.1.0", (5, 0, 0))
    who = f"{tmp_path}/out-5.1.0 (cpu-rpc, upstream {commit}, RPC 5.1.0)"
    assert (code, said) == (0, f"{who} can talk to 127.0.0.1:{port} (RPC 5.0.0): {why}")
