"""core.net: a free loopback port, waiting until a port accepts (in-process sockets)."""

from __future__ import annotations

import socket
import time

from patchkit.core.net import LOOPBACK, free_port, wait_port
from tests.fixtures.rpc_server import closed_port


def test_free_port_can_be_bound() -> None:
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as s:
        s.bind((LOOPBACK, port))


def test_wait_port_true_once_something_listens() -> None:
    with socket.socket() as srv:
        srv.bind((LOOPBACK, 0))
        srv.listen(1)
        assert wait_port(srv.getsockname()[1], time.monotonic() + 5)


def test_wait_port_false_at_the_deadline() -> None:
    start = time.monotonic()
    assert not wait_port(closed_port(), start + 0.3)
    assert 0.25 <= time.monotonic() - start < 2


def test_wait_port_gives_up_when_the_server_died() -> None:
    calls = []

    def alive() -> bool:
        calls.append(1)
        return len(calls) < 3

    start = time.monotonic()
    assert not wait_port(closed_port(), start + 30, alive=alive)
    assert len(calls) == 3 and time.monotonic() - start < 2
