"""The words of the RPC problems (``patchkit/rpc/problems.py``): ``patchkit rpc-probe``,
``bench`` with RPC servers. The message is each problem's own line of facts; a version skew's
line also says what to rebuild, with the commands."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from patchkit.core.errors import Problem
from patchkit.rpc.problems import NoRpcProtocol, RpcTimedOut
from patchkit.rpc.skew import RpcSkewed, SkewReport

__all__ = ["RENDERERS", "skew_line", "with_words"]


def skew_line(r: SkewReport) -> str:
    """One line: the verdict and, when it is no, what to rebuild and the commands that do it."""
    v = r.verdict
    who = f"{r.build} ({r.recipe}, upstream {r.commit[:12]}, RPC {v.client})"
    if v.ok:
        return f"{who} can talk to {r.endpoint} (RPC {v.server}): {v.reason}"
    if r.rebuild == "client":
        todo = (
            f"rebuild {r.recipe} at an upstream commit with RPC "
            f"{v.server.major}.{v.server.minor} or later (`patchkit bump`, then "
            f"`patchkit build {r.recipe}`), or run a server built from upstream "
            f"{r.commit[:12]} there"
        )
    else:
        todo = (
            f"rebuild the server at {r.endpoint} from upstream {r.commit[:12]} "
            f"(`patchkit build {r.recipe}`, then its bin/ggml-rpc-server there)"
        )
    return f"{who} cannot talk to {r.endpoint} (RPC {v.server}): {v.reason}; {todo}"


def with_words(r: SkewReport) -> SkewReport:
    """``r`` with its verdict line (what ``--json`` prints as ``message``)."""
    return dataclasses.replace(r, message=skew_line(r))


def _skewed(p: RpcSkewed) -> tuple[str, str]:
    return skew_line(p.report), ""


def _timed_out(p: RpcTimedOut) -> tuple[str, str]:
    if p.stage == "connect":
        return str(p), "check the address and any firewall, or raise --timeout"
    return str(p), "the server serves one client at a time: is another one connected? Else raise --timeout"


def _no_protocol(p: NoRpcProtocol) -> tuple[str, str]:
    return str(p), f"rebuild it: `patchkit build {p.recipe}`"


RENDERERS: dict[type[Problem], Callable[[Any], tuple[str, str]]] = {
    RpcTimedOut: _timed_out,
    NoRpcProtocol: _no_protocol,
    RpcSkewed: _skewed,
}
