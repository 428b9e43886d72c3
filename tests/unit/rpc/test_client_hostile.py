"""A hostile RPC server cannot hold the client or make it grow: every session ends within its
deadline (not per read), counts and sizes off the wire are capped, and whatever the server
sends ends in an RpcError (one line, exit 14), never anything else."""

from __future__ import annotations

import socket
import struct
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchkit.core.errors import RpcError
from patchkit.rpc.client import MAX_DEVICES, RpcClient, RpcProtocolError, RpcTimeout
from patchkit.rpc.probe import GUARD_BUDGET, probe_zero_nbytes_guard, server_info

HELLO_OK = struct.pack("<QBBBx24s", 28, 5, 0, 0, bytes(24))

Script = Callable[[socket.socket], None]


@contextmanager
def hostile(script: Script) -> Iterator[int]:
    """A loopback server that runs ``script`` on every connection, in a thread."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        conns: list[socket.socket] = []
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conns.append(conn)
            threading.Thread(target=_guarded, args=(script, conn, stop), daemon=True).start()
        for c in conns:
            c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        t.join(5)
        srv.close()


def _guarded(script: Script, conn: socket.socket, stop: threading.Event) -> None:
    conn.settimeout(0.2)
    try:
        script(conn)
        while not stop.is_set():  # then hold the connection open without a word
            time.sleep(0.05)
    except OSError:
        pass


def _read_request(conn: socket.socket) -> None:
    head = b""
    while len(head) < 9:
        try:
            chunk = conn.recv(9 - len(head))
        except TimeoutError:
            continue
        if not chunk:
            raise OSError("closed")
        head += chunk
    (size,) = struct.unpack("<Q", head[1:])
    left = size
    while left:
        try:
            chunk = conn.recv(min(left, 65536))
        except TimeoutError:
            continue
        if not chunk:
            raise OSError("closed")
        left -= len(chunk)


def test_billions_of_devices_are_refused_at_once() -> None:
    def script(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(HELLO_OK)
        while True:
            _read_request(conn)
            conn.sendall(struct.pack("<QI", 4, 2**32 - 1))

    with hostile(script) as port:
        start = time.monotonic()
        with pytest.raises(RpcProtocolError) as ei:
            server_info("127.0.0.1", port, timeout=2, count=1)
    assert time.monotonic() - start < 2
    assert f"reports 4,294,967,295 devices; patchkit reads at most {MAX_DEVICES}" in str(ei.value)
    assert ei.value.exit_code == 14 and "\n" not in str(ei.value)


def test_a_trickling_server_is_cut_off_at_the_session_deadline() -> None:
    def script(conn: socket.socket) -> None:
        _read_request(conn)
        for b in HELLO_OK:  # one byte every 0.15 s: each read is quick, the whole is not
            conn.sendall(bytes([b]))
            time.sleep(0.15)

    with hostile(script) as port:
        start = time.monotonic()
        with pytest.raises(RpcTimeout) as ei:
            server_info("127.0.0.1", port, timeout=1.0)
    took = time.monotonic() - start
    assert 0.9 <= took < 2.0, took
    assert "within 1s (the limit for the whole exchange)" in str(ei.value)


def test_a_server_that_answers_hello_then_trickles_every_reply() -> None:
    def script(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(HELLO_OK)
        while True:
            _read_request(conn)
            for b in struct.pack("<QI", 4, 1):
                conn.sendall(bytes([b]))
                time.sleep(0.05)

    with hostile(script) as port:
        start = time.monotonic()
        with pytest.raises(RpcTimeout):
            server_info("127.0.0.1", port, timeout=1.0, count=1000)
    assert time.monotonic() - start < 2.0


def test_the_whole_guard_probe_has_a_deadline() -> None:
    """A server that answers HELLO and then never anything else: the probe ends within its
    budget instead of waiting per connection, per case, per retry."""

    def script(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(HELLO_OK)

    with hostile(script) as port:
        start = time.monotonic()
        with pytest.raises(RpcError):
            probe_zero_nbytes_guard("127.0.0.1", port, timeout=0.3)
    assert time.monotonic() - start < GUARD_BUDGET * 0.3 + 1.0


def test_a_huge_reply_size_is_never_allocated() -> None:
    def script(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(struct.pack("<Q", 2**63) + b"x" * 1000)

    with hostile(script) as port:
        tracemalloc.start()
        try:
            with pytest.raises(RpcProtocolError, match="HELLO reply is 9223372036854775808 bytes"):
                with RpcClient("127.0.0.1", port, timeout=2):
                    pass
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < 4 << 20


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    hello=st.one_of(st.just(HELLO_OK), st.binary(max_size=64)),
    replies=st.lists(st.binary(max_size=48), max_size=6),
    close_after=st.booleans(),
)
def test_fuzz_any_server_reply_ends_in_an_rpc_error_within_the_deadline(
    hello: bytes, replies: list[bytes], close_after: bool
) -> None:
    def script(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(hello)
        for r in replies:
            _read_request(conn)
            conn.sendall(r)
        if close_after:
            conn.close()

    with hostile(script) as port:
        tracemalloc.start()
        start = time.monotonic()
        try:
            try:
                server_info("127.0.0.1", port, timeout=0.5, count=3)
            except RpcError as e:
                assert str(e) and "\n" not in str(e)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert time.monotonic() - start < 1.5
    assert peak < 4 << 20
