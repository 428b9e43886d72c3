"""patchkit.rpc.client / rpcprobe / `patchkit rpc-probe` against the wire format and a fake server."""

from __future__ import annotations

import json
import socket
import struct
import threading

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from patchkit.cli import main
from patchkit.core.errors import ConfigError, RpcError, SmokeError
from patchkit.rpc.client import (
    HELLO_RSP,
    RPC_TENSOR,
    Cmd,
    RpcClient,
    RpcClosed,
    RpcProtocolError,
    RpcTensor,
    RpcTimeout,
    RpcUnreachable,
    RpcVersionError,
    encode_graph,
    encode_request,
)
from patchkit.rpc.probe import Outcome, parse_endpoint, probe_zero_nbytes_guard, server_info
from tests.fixtures.rpc_server import FakeRpcServer

U64 = 2**64 - 1


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# wire format -------------------------------------------------------------------------------

def test_command_numbers_match_upstream_enum() -> None:
    assert [c.name for c in Cmd] == [
        "ALLOC_BUFFER", "GET_ALIGNMENT", "GET_MAX_SIZE", "BUFFER_GET_BASE", "FREE_BUFFER",
        "BUFFER_CLEAR", "SET_TENSOR", "SET_TENSOR_HASH", "GET_TENSOR", "COPY_TENSOR",
        "GRAPH_COMPUTE", "GET_DEVICE_MEMORY", "INIT_TENSOR", "GET_ALLOC_SIZE", "HELLO",
        "DEVICE_COUNT", "GRAPH_RECOMPUTE", "MEMSET_TENSOR"]
    assert [int(c) for c in Cmd] == list(range(18))


def test_rpc_tensor_layout_is_byte_exact() -> None:
    assert RPC_TENSOR.size == 296 and HELLO_RSP.size == 28
    t = RpcTensor(id=0x0102030405060708, type=0x11, buffer=0xAABB, ne=(1, 2, 3, 4),
                  nb=(5, 6, 7, 8), op=0x21, op_params=tuple(range(100, 116)), flags=-2,
                  src=tuple(range(200, 210)), view_src=0x31, view_offs=0x32, data=0x33,
                  name="blk.0")
    raw = t.pack()
    assert len(raw) == 296

    def at(fmt: str, off: int) -> tuple[int, ...]:
        return struct.unpack_from("<" + fmt, raw, off)

    assert at("Q", 0) == (0x0102030405060708,)
    assert at("I", 8) == (0x11,)
    assert at("Q", 12) == (0xAABB,)
    assert at("4I", 20) == (1, 2, 3, 4)
    assert at("4I", 36) == (5, 6, 7, 8)
    assert at("I", 52) == (0x21,)
    assert at("16i", 56) == tuple(range(100, 116))
    assert at("i", 120) == (-2,)
    assert at("10Q", 124) == tuple(range(200, 210))
    assert at("QQQ", 204) == (0x31, 0x32, 0x33)
    assert raw[228:233] == b"blk.0" and raw[233:292] == bytes(59)
    assert raw[292:] == bytes(4)  # padding
    assert RpcTensor.unpack(raw) == t


@given(st.builds(
    RpcTensor, id=st.integers(0, U64), type=st.integers(0, 40), buffer=st.integers(0, U64),
    ne=st.tuples(*[st.integers(0, 2**32 - 1)] * 4), nb=st.tuples(*[st.integers(0, 2**32 - 1)] * 4),
    data=st.integers(0, U64), name=st.text(st.characters(min_codepoint=32, max_codepoint=126),
                                           max_size=63)))
def test_rpc_tensor_round_trips(t: RpcTensor) -> None:
    assert RpcTensor.unpack(t.pack()) == t


def test_request_and_graph_encoding() -> None:
    hello = encode_request(Cmd.HELLO, bytes(24))
    assert hello == b"\x0e" + (24).to_bytes(8, "little") + bytes(24)
    t = RpcTensor.f32(id=7, buffer=9, data=0x1000, ne=(4, 0, 1, 1))
    assert t.nb == (4, 16, 0, 0) and t.nbytes == 0
    assert RpcTensor.f32(id=7, buffer=9, data=0, ne=(4, 1, 1, 1)).nbytes == 16
    g = encode_graph(3, [7], [t])
    assert len(g) == 4 + 4 + 8 + 4 + 296
    assert struct.unpack_from("<IIQI", g, 0) == (3, 1, 7, 1)
    assert g[20:] == t.pack()


def test_parse_endpoint() -> None:
    assert parse_endpoint("192.168.1.20:50052") == ("192.168.1.20", 50052)
    assert parse_endpoint("gpu-box:1") == ("gpu-box", 1)
    assert parse_endpoint("[fe80::1%eth0]:50052") == ("fe80::1%eth0", 50052)
    for bad in ("", "host", ":50052", "host:", "host:0", "host:65536", "a:b:1", "h:12x",
                "http://h:1"):
        with pytest.raises(ConfigError, match="is not HOST:PORT"):
            parse_endpoint(bad)


# client against the fake server ------------------------------------------------------------

def test_client_commands() -> None:
    with FakeRpcServer(devices=2) as srv, RpcClient("127.0.0.1", srv.port, timeout=5) as c:
        assert str(c.version) == "5.0.0"
        assert c.device_count() == 2
        assert c.get_device_memory(1) == (2 << 30, 3 << 30)
        assert c.get_alignment(0) == 32
        ptr, size = c.alloc_buffer(0, 4096)
        assert size == 4096 and ptr in srv.buffers
        assert c.buffer_get_base(ptr) == srv.buffers[ptr][0]
        c.free_buffer(ptr)
        assert srv.buffers == {}
        with pytest.raises(RpcClosed):  # the server ends the session on an error
            c.free_buffer(ptr)


def test_server_info() -> None:
    with FakeRpcServer(devices=3, version=(4, 0, 1)) as srv:
        info = server_info("127.0.0.1", srv.port, timeout=5, count=5)
    assert str(info.version) == "4.0.1" and info.endpoint == f"127.0.0.1:{srv.port}"
    assert [(d.index, d.free, d.total) for d in info.devices] == [
        (0, 1 << 30, 2 << 30), (1, 2 << 30, 3 << 30), (2, 3 << 30, 4 << 30)]
    assert info.rtt.count == 5 and 0 < info.rtt.min_s <= info.rtt.median_s <= info.rtt.max_s
    assert srv.log.count("cmd 15") == 5


def test_connection_refused_is_one_line_with_endpoint() -> None:
    port = _closed_port()
    with pytest.raises(RpcUnreachable) as ei:
        server_info("127.0.0.1", port, timeout=2)
    assert ei.value.refused and str(ei.value) == f"127.0.0.1:{port}: connection refused"
    assert isinstance(ei.value, RpcError) and ei.value.exit_code == 14 and ei.value.hint


def test_timeout_when_server_never_answers() -> None:
    with FakeRpcServer(behaviour="hang") as srv, pytest.raises(RpcTimeout) as ei:
        server_info("127.0.0.1", srv.port, timeout=0.3)
    assert "no answer to HELLO within 0.3s" in str(ei.value)
    assert "one client at a time" in ei.value.hint


@pytest.mark.parametrize("version", [(3, 6, 1), (6, 0, 0)])
def test_unsupported_version(version: tuple[int, int, int]) -> None:
    with FakeRpcServer(version=version) as srv, pytest.raises(RpcVersionError) as ei:
        server_info("127.0.0.1", srv.port, timeout=2)
    assert f"speaks RPC protocol {'.'.join(map(str, version))}" in str(ei.value)


def test_legacy_hello_server_is_detected() -> None:
    with FakeRpcServer(behaviour="legacy", version=(3, 6, 1)) as srv:
        with pytest.raises(RpcVersionError, match=r"speaks RPC protocol 3\.6\.1 \(ggml before"):
            server_info("127.0.0.1", srv.port, timeout=2)


def test_garbage_hello_reply() -> None:
    with FakeRpcServer(behaviour="garbage") as srv, pytest.raises(RpcProtocolError) as ei:
        server_info("127.0.0.1", srv.port, timeout=2)
    assert "HELLO reply is 2 bytes, the protocol says 28" in str(ei.value)


def test_not_an_rpc_server() -> None:
    """Something that closes on HELLO and on the pre-4.0 HELLO too."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(4)

    def close_all() -> None:
        for _ in range(2):
            conn, _ = lst.accept()
            conn.recv(64)
            conn.close()

    th = threading.Thread(target=close_all, daemon=True)
    th.start()
    try:
        with pytest.raises(RpcProtocolError, match="closed the connection on HELLO"):
            server_info("127.0.0.1", lst.getsockname()[1], timeout=2)
    finally:
        th.join(timeout=5)
        lst.close()


def test_huge_reply_size_is_refused_without_reading() -> None:
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)

    def serve() -> None:
        conn, _ = lst.accept()
        conn.recv(33)
        conn.sendall(struct.pack("<Q", 2**62))
        conn.recv(1)
        conn.close()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        with pytest.raises(RpcProtocolError, match=str(2**62)):
            RpcClient("127.0.0.1", lst.getsockname()[1], timeout=2).__enter__()
    finally:
        th.join(timeout=5)
        lst.close()


# the guard probe ---------------------------------------------------------------------------

def _outcomes(report) -> list[str]:
    return [c.outcome.value for c in report.cases]


def test_guard_on_patched_server() -> None:
    with FakeRpcServer("patched") as srv:
        report = probe_zero_nbytes_guard("127.0.0.1", srv.port, timeout=3)
        assert not srv.aborted.is_set()
        server_info("127.0.0.1", srv.port, timeout=3)  # still serving
    assert [c.name for c in report.cases] == ["in-bounds", "zero-bytes-outside",
                                              "straddling-16-bytes"]
    assert _outcomes(report) == ["accepted", "accepted", "refused"]
    assert report.verdict == "patched" and report.ok
    assert srv.log.count("computed") == 2 and srv.log.count("refused") == 1


def test_guard_on_unpatched_server_reports_death() -> None:
    with FakeRpcServer("unpatched") as srv:
        report = probe_zero_nbytes_guard("127.0.0.1", srv.port, timeout=3)
        assert srv.aborted.is_set()
    assert _outcomes(report) == ["accepted", "server-died", "not-run"]
    assert report.verdict == "unpatched" and not report.ok
    assert report.case("zero-bytes-outside").detail.endswith(
        "the server closed the connection on DEVICE_COUNT")
    assert sum(line.startswith("abort:") for line in srv.log) == 1


def test_guard_on_server_without_bounds_check() -> None:
    with FakeRpcServer("unchecked") as srv:
        report = probe_zero_nbytes_guard("127.0.0.1", srv.port, timeout=3)
    assert _outcomes(report) == ["accepted", "accepted", "accepted"]
    assert report.verdict == "no-bounds-check" and not report.ok


def test_guard_on_server_refusing_zero_bytes() -> None:
    with FakeRpcServer("refuse-zero") as srv:
        report = probe_zero_nbytes_guard("127.0.0.1", srv.port, timeout=3)
    assert _outcomes(report) == ["accepted", "refused", "refused"]
    assert report.verdict == "refuses-zero-bytes" and not report.ok
    zero = report.to_json()["cases"][1]  # type: ignore[index]
    assert (zero["name"], zero["expected"], zero["outcome"], zero["ok"]) == (
        "zero-bytes-outside", "accepted", "refused", False)


def test_guard_unreachable_raises() -> None:
    with pytest.raises(RpcUnreachable):
        probe_zero_nbytes_guard("127.0.0.1", _closed_port(), timeout=2)


def test_outcome_values() -> None:
    assert {o.value for o in Outcome} == {"accepted", "refused", "server-died", "no-answer",
                                          "not-run"}


# the command -------------------------------------------------------------------------------

def _cli(*args: str):
    return CliRunner().invoke(main, ["rpc-probe", *args])


def test_cli_rejects_bad_endpoint() -> None:
    r = _cli("localhost")
    assert r.exit_code == 2
    assert "error: 'localhost' is not HOST:PORT" in r.stderr
    assert r.stdout == ""


def test_cli_refused_is_one_line() -> None:
    port = _closed_port()
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
