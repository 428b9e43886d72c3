"""patchkit.rpc.probe: endpoints, server info, every way a server can fail, and the
zero-byte guard probe against the in-process fake server."""

from __future__ import annotations

import socket
import threading

import pytest

from patchkit.core.errors import ConfigError, RpcError
from patchkit.rpc.client import (
    RpcProtocolError,
    RpcTimeout,
    RpcUnreachable,
    RpcVersionError,
)
from patchkit.rpc.probe import Outcome, parse_endpoint, probe_zero_nbytes_guard, server_info
from patchkit.rpc.problems import RpcTimedOut
from tests.fixtures.rpc_server import FakeRpcServer, closed_port


def test_parse_endpoint() -> None:
    assert parse_endpoint("192.168.1.20:50052") == ("192.168.1.20", 50052)
    assert parse_endpoint("gpu-box:1") == ("gpu-box", 1)
    assert parse_endpoint("[fe80::1%eth0]:50052") == ("fe80::1%eth0", 50052)
    for bad in ("", "host", ":50052", "host:", "host:0", "host:65536", "a:b:1", "h:12x", "http://h:1"):
        with pytest.raises(ConfigError, match="is not HOST:PORT"):
            parse_endpoint(bad)


def test_server_info() -> None:
    with FakeRpcServer(devices=3, version=(4, 0, 1)) as srv:
        info = server_info("127.0.0.1", srv.port, timeout=5, count=5)
    assert str(info.version) == "4.0.1" and info.endpoint == f"127.0.0.1:{srv.port}"
    assert [(d.index, d.free, d.total) for d in info.devices] == [
        (0, 1 << 30, 2 << 30),
        (1, 2 << 30, 3 << 30),
        (2, 3 << 30, 4 << 30),
    ]
    assert info.rtt.count == 5 and 0 < info.rtt.min_s <= info.rtt.median_s <= info.rtt.max_s
    assert srv.log.count("cmd 15") == 5


def test_connection_refused_is_one_line_with_endpoint() -> None:
    port = closed_port()
    with pytest.raises(RpcUnreachable) as ei:
        server_info("127.0.0.1", port, timeout=2)
    assert ei.value.refused and str(ei.value) == f"127.0.0.1:{port}: connection refused"
    assert isinstance(ei.value, RpcError) and ei.value.exit_code == 14 and ei.value.hint


def test_timeout_when_server_never_answers() -> None:
    with FakeRpcServer(behaviour="hang") as srv, pytest.raises(RpcTimeout) as ei:
        server_info("127.0.0.1", srv.port, timeout=0.3)
    assert "no answer to HELLO within 0.3s" in str(ei.value)
    assert ei.value.problem == RpcTimedOut(
        endpoint=f"127.0.0.1:{srv.port}", seconds=0.3, stage="exchange", what="HELLO"
    )


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


# the guard probe ---------------------------------------------------------------------------


def _outcomes(report) -> list[str]:
    return [c.outcome.value for c in report.cases]


def test_guard_on_patched_server() -> None:
    with FakeRpcServer("patched") as srv:
        report = probe_zero_nbytes_guard("127.0.0.1", srv.port, timeout=3)
        assert not srv.aborted.is_set()
        server_info("127.0.0.1", srv.port, timeout=3)  # still serving
    assert [c.name for c in report.cases] == ["in-bounds", "zero-bytes-outside", "straddling-16-bytes"]
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
        "the server closed the connection on DEVICE_COUNT"
    )
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
        "zero-bytes-outside",
        "accepted",
        "refused",
        False,
    )


def test_guard_unreachable_raises() -> None:
    with pytest.raises(RpcUnreachable):
        probe_zero_nbytes_guard("127.0.0.1", closed_port(), timeout=2)


def test_outcome_values() -> None:
    assert {o.value for o in Outcome} == {"accepted", "refused", "server-died", "no-answer", "not-run"}
