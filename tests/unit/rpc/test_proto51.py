"""RPC protocol 5.1 (upstream af5172627): rpc_tensor's last 4 bytes are ``int32 use_count``,
HELLO's compatibility rule, and what patchkit's client says to servers it does not know."""

from __future__ import annotations

import struct

import pytest

from patchkit.rpc.client import (
    CLIENT_VERSION,
    RPC_TENSOR,
    RpcClient,
    RpcTensor,
    RpcVersionError,
    encode_graph,
    speaks,
)
from patchkit.spec.rpcproto import ProtoVersion, judge, parse_rpc_header
from tests.fixtures.rpc_server import FakeRpcServer


def v(text: str) -> ProtoVersion:
    return ProtoVersion.parse(text)


def test_use_count_is_the_last_int32_of_rpc_tensor() -> None:
    assert RPC_TENSOR.size == 296  # same size as 5.0: the padding became the field
    t = RpcTensor(id=1, name="x", use_count=-3)
    raw = t.pack()
    assert struct.unpack_from("<i", raw, 292) == (-3,)
    assert raw[:292] == RpcTensor(id=1, name="x").pack()[:292]
    assert RpcTensor.unpack(raw) == t
    # the 5.0 layout: padding, always zeros
    assert t.pack(use_count=False)[292:] == bytes(4)
    g = encode_graph(0, [1], [t], use_count=False)
    assert g[-4:] == bytes(4) and encode_graph(0, [1], [t])[-4:] == raw[-4:]


@pytest.mark.parametrize(("server", "sent_use_count"), [((5, 1, 0), True), ((5, 0, 0), False)])
def test_graph_carries_use_count_only_to_51_servers(
    server: tuple[int, int, int], sent_use_count: bool
) -> None:
    with FakeRpcServer(version=server) as srv, RpcClient("127.0.0.1", srv.port) as c:
        ptr, _ = c.alloc_buffer(0, 64)
        base = c.buffer_get_base(ptr)
        t = RpcTensor.f32(id=5, buffer=ptr, data=base, ne=(4, 1, 1, 1))
        c.graph_compute(0, [5], [RpcTensor(**{**t.__dict__, "use_count": 2})])
        assert c.device_count() == 2  # the graph was accepted
    if sent_use_count:
        assert srv.use_counts == [2]
    else:
        assert srv.padding == [bytes(4)]


def test_header_defines_are_read() -> None:
    header = (
        "#pragma once\n#define RPC_PROTO_MAJOR_VERSION    5\n"
        "#define RPC_PROTO_MINOR_VERSION    1\n#define RPC_PROTO_PATCH_VERSION    0\n"
    )
    assert parse_rpc_header(header) == v("5.1.0")
    assert parse_rpc_header(header.replace("MINOR", "MIN")) is None  # incomplete: untrusted
    assert parse_rpc_header(header + "#define RPC_PROTO_MINOR_VERSION 2\n") is None
    assert parse_rpc_header("") is None
    assert parse_rpc_header(header.replace("    1\n", " (1) // bumped\n")) == v("5.1.0")


@pytest.mark.parametrize(
    ("client", "server", "ok"),
    [
        ("5.1.0", "5.1.0", True),
        ("5.1.0", "5.0.0", True),
        ("5.1.3", "5.1.0", True),
        ("5.0.0", "5.1.0", False),
        ("5.1.0", "6.0.0", False),
        ("6.0.0", "5.1.0", False),
        ("4.0.3", "5.0.0", False),
        ("5.0.0", "4.0.1", False),
        ("5.0.0", "5.0.9", True),
    ],
)
def test_upstream_rule(client: str, server: str, ok: bool) -> None:
    verdict = judge(v(client), v(server))
    assert verdict.ok is ok
    assert (verdict.rebuild == "") is ok
    if not ok:
        assert client in verdict.reason and server in verdict.reason
        side = "client" if v(server) > v(client) else "server"
        assert verdict.rebuild.startswith(f"the {side}")


def test_what_patchkit_speaks() -> None:
    assert v("5.1.0") == CLIENT_VERSION
    assert speaks(v("5.0.0")) == speaks(v("5.1.0")) == speaks(v("4.0.1")) == ""
    assert "newer minor" in speaks(v("5.2.0"))
    assert "major 6" in speaks(v("6.0.0"))


@pytest.mark.parametrize("server", [(6, 0, 0), (8, 1, 0), (5, 2, 0)])
def test_unknown_server_is_one_line_naming_both_versions(server: tuple[int, int, int]) -> None:
    with FakeRpcServer(version=server) as srv, pytest.raises(RpcVersionError) as ei:
        with RpcClient("127.0.0.1", srv.port, timeout=2):
            pass
    msg = str(ei.value)
    assert "\n" not in msg
    assert f"speaks RPC protocol {'.'.join(map(str, server))}" in msg
    assert "patchkit's client speaks 4.x and 5.0-5.1" in msg


def test_version_parse_refuses_nonsense() -> None:
    for bad in ("5.1", "5.1.0.0", "a.b.c", "5.256.0", ""):
        with pytest.raises(ValueError):
            ProtoVersion.parse(bad)
