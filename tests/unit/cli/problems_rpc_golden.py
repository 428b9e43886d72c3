"""Golden words of the RPC problems (patchkit/rpc/problems.py)."""

from __future__ import annotations

from pathlib import Path

from patchkit.core.errors import ConfigError, FatalError, RpcError
from patchkit.rpc.problems import NoRpcProtocol, RpcTimedOut
from patchkit.rpc.skew import RpcSkewed, SkewReport
from patchkit.spec.rpcproto import ProtoVersion, judge

_SKEW = SkewReport(
    endpoint="10.0.0.2:50052",
    build="out/cpu-rpc",
    recipe="cpu-rpc",
    commit="bb4caa7540188872173c44d161602d9271386413",
    verdict=judge(ProtoVersion(major=5, minor=0, patch=0), ProtoVersion(major=5, minor=1, patch=0)),
)

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
    (
        RpcError(problem=RpcSkewed(report=_SKEW)),
        "out/cpu-rpc (cpu-rpc, upstream bb4caa754018, RPC 5.0.0) cannot talk to 10.0.0.2:50052 (RPC 5.1.0): "
        f"{_SKEW.reason}; rebuild cpu-rpc at an upstream commit with RPC 5.1 or later (`patchkit bump`, "
        "then `patchkit build cpu-rpc`), or run a server built from upstream bb4caa754018 there",
        "",
    ),
]
