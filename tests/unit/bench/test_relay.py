"""bench.relay against a fake RPC peer exchanging known messages: exact counts."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from patchkit.bench.relay import Relay, Traffic

CAPS = bytes(range(1, 25))  # non-zero transport capabilities both ways


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


class Peer:
    """A server speaking the framing: HELLO (28-byte reply with caps), GET_ALIGNMENT (8),
    SET_TENSOR / GRAPH_COMPUTE / GRAPH_RECOMPUTE (no reply), GET_TENSOR (u64 n -> n bytes)."""

    def __init__(self, think: float = 0.0) -> None:
        self.think = think  # seconds "computing" before each GET_TENSOR reply
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(4)
        self.port = self.listener.getsockname()[1]
        self.seen: list[tuple[int, bytes]] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                try:
                    while True:
                        cmd, size = struct.unpack("<BQ", _recv_exact(conn, 9))
                        if size > 1 << 24:
                            break  # as a real server: a size it cannot take ends the session
                        payload = _recv_exact(conn, size)
                        self.seen.append((cmd, payload[:64]))
                        if cmd == 14:
                            conn.sendall(struct.pack("<Q", 28) + bytes([5, 0, 0, 0]) + CAPS)
                        elif cmd == 1:
                            conn.sendall(struct.pack("<Q", 8) + struct.pack("<Q", 32))
                        elif cmd == 8:
                            time.sleep(self.think)
                            n = struct.unpack("<Q", payload)[0]
                            conn.sendall(struct.pack("<Q", n) + b"\x07" * n)
                except ConnectionError:
                    pass

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def peer():
    p = Peer()
    yield p
    p.close()


def _req(cmd: int, payload: bytes) -> bytes:
    return struct.pack("<BQ", cmd, len(payload)) + payload


def _session(port: int) -> bytes:
    """The known exchange; sent in awkward pieces (headers split, several in one send)."""
    got = b""
    with socket.create_connection(("127.0.0.1", port)) as s:
        hello = _req(14, CAPS)
        s.sendall(hello[:3])
        s.sendall(hello[3:])
        got += _recv_exact(s, 8 + 28)
        for _ in range(3):
            s.sendall(_req(1, bytes(4)))
            got += _recv_exact(s, 16)
        big = _req(6, b"\x01" * 100_000)  # SET_TENSOR: no reply
        graph = _req(10, b"\x02" * 500)  # GRAPH_COMPUTE: no reply
        again = _req(16, bytes(4))  # GRAPH_RECOMPUTE: no reply
        get = _req(8, struct.pack("<Q", 70_000))
        blob = big + graph + again + get
        for i in range(0, len(blob), 4093):
            s.sendall(blob[i : i + 4093])
        got += _recv_exact(s, 8 + 70_000)
    return got


UP = (9 + 24) + 3 * (9 + 4) + (9 + 100_000) + (9 + 500) + (9 + 4) + (9 + 8)
DOWN = (8 + 28) + 3 * (8 + 8) + (8 + 70_000)


def test_counts_are_exact_and_caps_cleared(peer: Peer) -> None:
    with Relay(("127.0.0.1", peer.port)) as relay:
        got = _session(relay.port)
        assert relay.quiesce(timeout=10)
        t = relay.traffic()
    assert (t.bytes_up, t.bytes_down) == (UP, DOWN)
    assert dict(t.commands) == {
        "GET_ALIGNMENT": 3,
        "SET_TENSOR": 1,
        "GET_TENSOR": 1,
        "GRAPH_COMPUTE": 1,
        "HELLO": 1,
        "GRAPH_RECOMPUTE": 1,
    }
    assert [n for n, _ in t.commands] == [
        "GET_ALIGNMENT",
        "SET_TENSOR",
        "GET_TENSOR",
        "GRAPH_COMPUTE",
        "HELLO",
        "GRAPH_RECOMPUTE",
    ]  # id order
    assert t.round_trips == 5 and t.replies == 5  # HELLO, 3 x GET_ALIGNMENT, GET_TENSOR
    assert t.connections == 1 and t.framing_lost == 0 and t.version == "5.0.0"
    # the relay keeps the connection on plain TCP: the caps are cleared both ways
    assert peer.seen[0] == (14, bytes(24))
    assert got[8:12] == bytes([5, 0, 0, 0]) and got[12:36] == bytes(24)
    assert got[-70_000:] == b"\x07" * 70_000  # everything else passes untouched
    assert [c for c, _ in peer.seen] == [14, 1, 1, 1, 6, 10, 16, 8]


def test_a_second_connection_adds_up_and_differences_are_exact(peer: Peer) -> None:
    with Relay(("127.0.0.1", peer.port)) as relay:
        _session(relay.port)
        relay.quiesce()
        first = relay.traffic()
        _session(relay.port)
        relay.quiesce()
        both = relay.traffic()
    assert both.connections == 2 and both.bytes_up == 2 * UP and both.round_trips == 10
    diff = both - first
    assert (diff.bytes_up, diff.bytes_down, diff.round_trips) == (UP, DOWN, 5)
    assert dict(diff.commands) == dict(first.commands)
    assert Traffic.from_json(diff.to_json()) == diff
    assert (first - first).commands == () and (first - first).bytes == 0


def test_lost_framing_is_marked_and_still_forwarded(peer: Peer) -> None:
    with Relay(("127.0.0.1", peer.port)) as relay:
        with socket.create_connection(("127.0.0.1", relay.port)) as s:
            s.sendall(_req(14, bytes(24)))
            _recv_exact(s, 36)
            s.sendall(struct.pack("<BQ", 6, 1 << 41) + b"x" * 100)  # an impossible size
        relay.quiesce()
        t = relay.traffic()
    assert t.framing_lost == 1 and t.bytes_up == 33 + 9 + 100
    assert dict(t.commands) == {"HELLO": 1}


def test_unreachable_target_closes_the_client() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nobody listens there
    with Relay(("127.0.0.1", port), connect_timeout=2) as relay:
        with socket.create_connection(("127.0.0.1", relay.port)) as c:
            c.settimeout(5)
            assert c.recv(1) == b""  # closed, as a refused connection would be
        assert relay.errors and relay.traffic().connections == 0


def test_relays_on_a_shared_link_share_its_bandwidth() -> None:
    """Two hosts behind one 5 MB/s port: 2 x 0.5 MB cannot arrive in under 0.2 s."""
    import time

    from patchkit.bench.link import Sink
    from patchkit.bench.relay import Shaping, SharedLink

    shaping = Shaping(rate_bytes_s=5e6)
    shared = SharedLink(shaping)
    with Sink() as a, Sink() as b, Relay(("127.0.0.1", a.port)) as ra, Relay(("127.0.0.1", b.port)) as rb:
        for r in (ra, rb):
            r.set_shaping(shaping, shared)
        socks = [socket.create_connection(("127.0.0.1", r.port)) for r in (ra, rb)]
        start = time.perf_counter()
        for s in socks:  # SET_TENSOR (no reply) to both, as llama.cpp sends to two hosts
            s.sendall(_req(6, bytes(500_000)))
        for s in socks:  # then a round trip each: its reply comes after the bytes went through
            s.sendall(_req(1, bytes(4)))
        for s in socks:
            assert len(_recv_exact(s, 16)) == 16
            s.close()
        took = time.perf_counter() - start
    assert took >= 1_000_018 / 5e6 * 0.98  # one link: the two transfers one after the other


@pytest.mark.parametrize("delay", [0.0, 0.04])
def test_host_time_is_the_hosts_answer_time_not_the_links(delay: float) -> None:
    """A host that thinks 60 ms before its GET_TENSOR reply: the relay times ~60 ms of host
    time, with or without an emulated link of 40 ms each way in front of it (the link's time
    is the wire's, not the host's)."""
    from patchkit.bench.relay import Shaping

    think = 0.06
    p = Peer(think=think)
    try:
        with Relay(("127.0.0.1", p.port)) as relay:
            relay.set_shaping(Shaping(delay_s=delay))
            start = time.perf_counter()
            _session(relay.port)
            took = time.perf_counter() - start
            assert relay.quiesce(timeout=10)
            t = relay.traffic()
    finally:
        p.close()
    assert t.round_trips == 5
    assert took >= think + 5 * 2 * delay * 0.95  # the link's delay was there ...
    assert think <= t.host_s < think + 0.035  # ... and is not counted as the host's
    assert Traffic.from_json(t.to_json()).host_s == t.host_s
    assert (t - t).host_s == 0.0
