"""Loopback helpers: a free port, waiting until a port accepts."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable

__all__ = ["LOOPBACK", "free_port", "wait_port"]

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def wait_port(port: int, deadline: float, alive: Callable[[], bool] | None = None) -> bool:
    """True once 127.0.0.1:port accepts; False at ``deadline`` or when ``alive()`` says no."""
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            return False
        with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
        time.sleep(0.1)
    return False
