"""builder.compcache.probe against in-process loopback servers: enough Redis (AUTH,
SELECT, PING), a remote that never answers, one that is not there, a cloud one."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from patchkit.builder.compcache.probe import probe
from patchkit.builder.compcache.remote import parse_remote

PW = "hunter2-Secret"


@pytest.fixture
def fake_remote() -> Iterator[Callable[[Callable[[socket.socket], None]], int]]:
    """A one-connection server on 127.0.0.1 running ``handler``; returns its port."""
    socks: list[socket.socket] = []
    threads: list[threading.Thread] = []

    def start(handler: Callable[[socket.socket], None]) -> int:
        srv = socket.create_server(("127.0.0.1", 0))
        socks.append(srv)

        def serve() -> None:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                handler(conn)

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        threads.append(t)
        return int(srv.getsockname()[1])

    yield start
    for s in socks:
        s.close()
    for t in threads:
        t.join(timeout=5)


def _redis_like(password: str | None) -> Callable[[socket.socket], None]:
    def handler(conn: socket.socket) -> None:
        authed = password is None
        buf = b""
        while True:
            chunk = conn.recv(4096)
            if not chunk:
                return
            buf += chunk
            while buf.startswith(b"*") and buf.count(b"\r\n") >= 1 + 2 * int(buf[1 : buf.index(b"\r")]):
                n = int(buf[1 : buf.index(b"\r")])
                parts = buf.split(b"\r\n")
                args = [parts[2 + 2 * i].decode() for i in range(n)]
                buf = b"\r\n".join(parts[1 + 2 * n :])
                if args[0] == "AUTH":
                    authed = args[-1] == password
                    conn.sendall(b"+OK\r\n" if authed else b"-WRONGPASS invalid username-password pair\r\n")
                elif not authed:
                    conn.sendall(b"-NOAUTH Authentication required.\r\n")
                else:
                    conn.sendall(b"+PONG\r\n" if args[0] == "PING" else b"+OK\r\n")

    return handler


def test_probe_speaks_enough_redis(fake_remote: Callable[..., int]) -> None:
    port = fake_remote(_redis_like(PW))
    assert probe(parse_remote(f"redis://:{PW}@127.0.0.1:{port}/1", where="x")) is None
    port = fake_remote(_redis_like(PW))
    why = probe(parse_remote(f"redis://:wrong-{PW}@127.0.0.1:{port}", where="x"))
    assert why == "refused the credentials"
    port = fake_remote(_redis_like(PW))
    assert "asks for a password" in (probe(parse_remote(f"redis://127.0.0.1:{port}", where="x")) or "")


def test_probe_a_slow_and_a_missing_remote(fake_remote: Callable[..., int]) -> None:
    stop = threading.Event()
    port = fake_remote(lambda conn: stop.wait(10))  # accepts, never answers
    r = probe(parse_remote(f"redis://127.0.0.1:{port}", where="x"), timeout=0.5)
    stop.set()
    assert r == "did not answer within 0s" or (r or "").startswith("did not answer")
    with socket.create_server(("127.0.0.1", 0)) as s:
        free = s.getsockname()[1]
    assert probe(parse_remote(f"redis://127.0.0.1:{free}", where="x")) == "refused the connection"
    # http remotes: a TCP connect is the check; cloud ones are left to sccache
    assert probe(parse_remote(f"http://127.0.0.1:{free}/c", where="x")) == "refused the connection"
    assert probe(parse_remote("s3://bucket", where="x")) is None
