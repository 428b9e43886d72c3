"""Golden words of the RPC problems (patchkit/rpc/problems.py)."""

from __future__ import annotations

from pathlib import Path

from patchkit.core.errors import ConfigError, FatalError, RpcError
from patchkit.rpc.problems import NoRpcProtocol, RpcTimedOut

__all__ = ["GOLDEN"]

GOLDEN: list[tuple[FatalError, str, str]] = [
    (
        RpcError(problem=RpcTimedOut(endpoint="10.0.0.2:50052", seconds=5.0, stage="connect")),
        "10.0.0.2:50052: no TCP connection within 5s",
        "check the address and any firewall, or raise --timeout",
    ),
    (
        RpcError(problem=RpcTimedOut(endpoint="[::1]:50052", seconds=0.3, stage="exchange", what="HELLO")),
        "[::1]:50052: no answer to HELLO within 0.3s (the limit for the whole exchange)",
        "the server serves one client at a time: is another one connected? Else raise --timeout",
    ),
    (
        ConfigError(problem=NoRpcProtocol(build=Path("out/cpu-rpc"), recipe="cpu-rpc")),
        "out/cpu-rpc: build-info.json records no RPC protocol (not an RPC build, or built by a patchkit "
        "before it recorded one)",
        "rebuild it: `patchkit build cpu-rpc`",
    ),
]
