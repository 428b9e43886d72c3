"""patchkit.rpc.client: the wire format, byte for byte, and the client against the
in-process fake server (tests/fixtures/rpc_server.py)."""

from __future__ import annotations

import socket
import struct
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from patchkit.rpc.client import (
    HELLO_RSP,
    RPC_TENSOR,
    Cmd,
    RpcClient,
    RpcClosed,
    RpcProtocolError,
    RpcTensor,
    encode_graph,
    encode_request,
)
from tests.fixtures.rpc_server import FakeRpcServer

U64 = 2**64 - 1


# wire format -------------------------------------------------------------------------------


def test_command_numbers_match_upstream_enum() -> None:
    assert [c.name for c in Cmd] == [
        "ALLOC_BUFFER",
        "GET_ALIGNMENT",
        "GET_MAX_SIZE",
        "BUFFER_GET_BASE",
        "FREE_BUFFER",
        "BUFFER_CLEAR",
        "SET_TENSOR",
        "SET_TENSOR_HASH",
        "GET_TENSOR",
        "COPY_TENSOR",
        "GRAPH_COMPUTE",
        "GET_DEVICE_MEMORY",
        "INIT_TENSOR",
        "GET_ALLOC_SIZE",
        "HELLO",
        "DEVICE_COUNT",
        "GRAPH_RECOMPUTE",
        "MEMSET_TENSOR",
    ]
    assert [int(c) for c in Cmd] == list(range(18))


def test_rpc_tensor_layout_is_byte_exact() -> None:
    assert RPC_TENSOR.size == 296 and HELLO_RSP.size == 28
    t = RpcTensor(
        id=0x0102030405060708,
        type=0x11,
        buffer=0xAABB,
        ne=(1, 2, 3, 4),
        nb=(5, 6, 7, 8),
        op=0x21,
        op_params=tuple(range(100, 116)),
        flags=-2,
        src=tuple(range(200, 210)),
        view_src=0x31,
        view_offs=0x32,
        data=0x33,
        name="blk.0",
    )
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


@given(
    st.builds(
        RpcTensor,
        id=st.integers(0, U64),
        type=st.integers(0, 40),
        buffer=st.integers(0, U64),
        ne=st.tuples(*[st.integers(0, 2**32 - 1)] * 4),
        nb=st.tuples(*[st.integers(0, 2**32 - 1)] * 4),
        data=st.integers(0, U64),
        name=st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=63),
    )
)
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
