"""The words of the RPC problems (``patchkit/rpc/problems.py``): ``patchkit rpc-probe``,
``bench`` with RPC servers. The message is each problem's own line of facts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from patchkit.core.errors import Problem
from patchkit.rpc.problems import NoRpcProtocol, RpcTimedOut

__all__ = ["RENDERERS"]


def _timed_out(p: RpcTimedOut) -> tuple[str, str]:
    if p.stage == "connect":
        return str(p), "check the address and any firewall, or raise --timeout"
    return str(p), "the server serves one client at a time: is another one connected? Else raise --timeout"


def _no_protocol(p: NoRpcProtocol) -> tuple[str, str]:
    return str(p), f"rebuild it: `patchkit build {p.recipe}`"


RENDERERS: dict[type[Problem], Callable[[Any], tuple[str, str]]] = {
    RpcTimedOut: _timed_out,
    NoRpcProtocol: _no_protocol,
}
