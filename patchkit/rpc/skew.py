"""Version skew: can the RPC clients of a build use the server at HOST:PORT?

A build records the protocol its clients and server speak (build-info's
``rpc_protocol``, read from ggml-rpc.h at build time). The server says its version in
HELLO. Upstream's rule decides (``patchkit.spec.rpcproto.judge``): same major, server
minor not higher than the client's. When it says no, the message names both versions,
the build's upstream commit, and which side to rebuild (``SkewReport.rebuild``: the CLI,
``patchkit/cli/problems/rpc.py``, words it and the commands that do it).

This only reads HELLO: it works for servers of any version, also ones patchkit's own
client would not talk to (a major it does not know).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from patchkit.core.errors import ConfigError, Problem
from patchkit.core.log import log
from patchkit.core.record import Record, meta
from patchkit.rpc.client import RpcClient, RpcVersionError
from patchkit.rpc.probe import parse_endpoint
from patchkit.rpc.problems import NoRpcProtocol
from patchkit.spec.buildinfo import BuildInfo
from patchkit.spec.rpcproto import ProtoVersion, SkewVerdict, judge

__all__ = ["RpcSkewed", "SkewReport", "build_protocol", "check_hosts", "check_server"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SkewReport(Record):
    json_derived: ClassVar[tuple[str | tuple[str, str], ...]] = (
        ("client", "client_version"),
        ("server", "server_version"),
        "ok",
        "reason",
        "rebuild",
    )

    endpoint: str  # HOST:PORT
    build: str  # the build folder as the user named it
    recipe: str  # the build's recipe
    commit: str  # the build's upstream commit
    verdict: SkewVerdict = dataclasses.field(metadata=meta(written=False))
    message: str = ""  # the verdict line the text output prints (the CLI words it)

    @property
    def ok(self) -> bool:
        """the build's clients can talk to the server"""
        return self.verdict.ok

    @property
    def client_version(self) -> str:
        """the RPC protocol the build's clients speak"""
        return str(self.verdict.client)

    @property
    def server_version(self) -> str:
        """the RPC protocol the server speaks"""
        return str(self.verdict.server)

    @property
    def reason(self) -> str:
        """upstream's rule, as it applies here"""
        return self.verdict.reason

    @property
    def rebuild(self) -> str:
        """which side to rebuild: "" (none: they can talk), "client" (the build, at an
        upstream commit with the server's protocol), "server" (from the build's upstream)"""
        v = self.verdict
        if v.ok:
            return ""
        return "client" if v.server > v.client else "server"


@dataclasses.dataclass(frozen=True, kw_only=True)
class RpcSkewed(Problem):
    """The build's clients cannot talk to a server (``report``: both versions, the rule,
    which side to rebuild)."""

    report: SkewReport

    def __str__(self) -> str:
        r, v = self.report, self.report.verdict
        return (
            f"{r.build} ({r.recipe}, upstream {r.commit[:12]}, RPC {v.client}) cannot talk to "
            f"{r.endpoint} (RPC {v.server}): {v.reason}"
        )


def build_protocol(info: BuildInfo, build: Path | str) -> ProtoVersion:
    """The protocol a build's clients speak; ConfigError when its build-info has none."""
    if info.rpc_protocol is None:
        raise ConfigError(problem=NoRpcProtocol(build=build, recipe=info.recipe.name))
    return info.rpc_protocol


def check_server(
    host: str, port: int, info: BuildInfo, build: Path | str, *, timeout: float = 5.0
) -> SkewReport:
    """HELLO the server and judge it against the build (RpcError if it cannot be asked)."""
    client = build_protocol(info, build)
    c = RpcClient(host, port, timeout=timeout)
    c.connect()
    try:
        server = c.read_version()
    finally:
        c.close()
    return SkewReport(
        endpoint=c.endpoint,
        build=str(build),
        recipe=info.recipe.name,
        commit=info.upstream.commit,
        verdict=judge(client, server),
    )


def check_hosts(
    info: BuildInfo, build: Path | str, endpoints: Sequence[str], *, timeout: float = 5.0
) -> tuple[SkewReport, ...]:
    """Every ``HOST:PORT`` against the build, before a bench sweep: RpcVersionError (one
    line, what to rebuild) at the first server its clients would refuse. A build that
    records no protocol (an older patchkit's) is not checked: a warning says so."""
    if info.rpc_protocol is None:
        log.warning(
            f"{build}: build-info.json records no RPC protocol: the RPC servers' "
            f"versions are not checked (rebuild with `patchkit build "
            f"{info.recipe.name}` to have them checked)"
        )
        return ()
    reports = []
    for ep in endpoints:
        host, port = parse_endpoint(ep)
        report = check_server(host, port, info, build, timeout=timeout)
        if not report.ok:
            raise RpcVersionError(problem=RpcSkewed(report=report))
        reports.append(report)
    return tuple(reports)
