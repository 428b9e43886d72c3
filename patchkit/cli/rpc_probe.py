"""`patchkit rpc-probe HOST:PORT`: ask a ggml RPC server what it is, optionally test patch 0001.

The result goes to stdout (the ``--build`` verdict, the server, the guard's cases; ``-v``
adds each case's detail on stderr). ``--json`` prints one object instead: ``skew`` only
with ``--build`` and ``guard`` only with ``--guard``; when the build's clients cannot talk
to the server it holds ``schema`` and ``skew`` alone, and the exit code is 14.

``rpc-probe --json`` keys:

- ``guard``: with --guard: the zero-byte tensor guard
- ``guard.cases``: the three probes, in order
- ``guard.cases[].description``: what the case sends
- ``guard.cases[].detail``: what was seen
- ``guard.cases[].expected``: what a patched server does: accepted, refused
- ``guard.cases[].name``: in-bounds, zero-nbytes-outside, straddling
- ``guard.cases[].ok``: the outcome is the expected one
- ``guard.cases[].outcome``: what this server did: accepted, refused, server-died, no-answer,
  not-run
- ``guard.endpoint``: HOST:PORT
- ``guard.ok``: the verdict is patched
- ``guard.verdict``: patched, unpatched, no-bounds-check, refuses-zero-bytes, inconclusive
- ``guard.version``: the server's RPC protocol
- ``schema``: the JSON format's version: 1
- ``server``: the server
- ``server.connect_s``: TCP connect + HELLO, seconds
- ``server.devices``: what it serves
- ``server.devices[].alignment``: buffer alignment, bytes
- ``server.devices[].free``: free memory, bytes
- ``server.devices[].index``: 0, 1, ... as the server numbers them
- ``server.devices[].max_size``: the largest buffer, bytes
- ``server.devices[].total``: memory, bytes
- ``server.endpoint``: HOST:PORT
- ``server.rtt``: DEVICE_COUNT round trips on one connection
- ``server.rtt.count``: round trips timed
- ``server.rtt.max_s``: seconds
- ``server.rtt.median_s``: seconds
- ``server.rtt.min_s``: seconds
- ``server.version``: its RPC protocol
- ``skew``: with --build: can the build's clients talk to it
- ``skew.build``: the build folder as the user named it
- ``skew.client``: the RPC protocol the build's clients speak
- ``skew.commit``: the build's upstream commit
- ``skew.endpoint``: HOST:PORT
- ``skew.message``: the verdict line the text output prints (the CLI words it)
- ``skew.ok``: the build's clients can talk to the server
- ``skew.reason``: upstream's rule, as it applies here
- ``skew.rebuild``: which side to rebuild: "" (none: they can talk), "client" (the build, at an
  upstream commit with the server's protocol), "server" (from the build's upstream)
- ``skew.recipe``: the build's recipe
- ``skew.server``: the RPC protocol the server speaks
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from patchkit.cli._common import out, out_record
from patchkit.cli._types import FiniteFloatRange
from patchkit.cli.problems.rpc import with_words
from patchkit.core.errors import RpcError, SmokeError
from patchkit.core.log import log
from patchkit.core.record import meta
from patchkit.rpc.probe import (
    GuardReport,
    GuardVerdict,
    ServerInfo,
    parse_endpoint,
    probe_zero_nbytes_guard,
    server_info,
)
from patchkit.rpc.skew import SkewReport, check_server
from patchkit.spec.buildinfo import read_build_info

__all__ = ["COMMANDS", "ProbeJson", "rpc_probe"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProbeJson:
    """``rpc-probe --json``."""

    schema: int = 1  # the JSON format's version: 1
    server: ServerInfo | None = dataclasses.field(default=None, metadata=meta(omit="none"))  # the server
    skew: SkewReport | None = dataclasses.field(
        default=None, metadata=meta(omit="none")
    )  # with --build: can the build's clients talk to it
    guard: GuardReport | None = dataclasses.field(
        default=None, metadata=meta(omit="none")
    )  # with --guard: the zero-byte tensor guard


def _mib(n: int) -> str:
    return "no limit" if n >= 1 << 63 else f"{n / (1 << 20):,.0f} MiB"


def _show_info(info: ServerInfo) -> None:
    out(f"{info.endpoint}: ggml RPC protocol {info.version}, {len(info.devices)} device(s)")
    for d in info.devices:
        out(
            f"  device {d.index}: {_mib(d.free)} free of {_mib(d.total)}, "
            f"alignment {d.alignment}, max buffer {_mib(d.max_size)}"
        )
    r = info.rtt
    out(
        f"  connect + HELLO {info.connect_s * 1e3:.2f} ms; round trip over {r.count}: "
        f"median {r.median_s * 1e3:.3f} ms, min {r.min_s * 1e3:.3f}, "
        f"max {r.max_s * 1e3:.3f}"
    )


def _show_guard(report: GuardReport) -> None:
    out(f"zero-byte tensor guard (patch 0001): {report.verdict}")
    for c in report.cases:
        mark = "✓" if c.ok else "✕"
        out(f"  {mark} {c.name}: {c.outcome.value} (expected {c.expected.value}) — {c.description}")
        log.detail(c.detail)


@click.command("rpc-probe")
@click.argument("endpoint", metavar="HOST:PORT")
@click.option(
    "--guard",
    is_flag=True,
    help="Also test the zero-byte tensor guard (patch 0001). KILLS an unpatched "
    "server: use it only on a server you own.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option(
    "--timeout",
    type=FiniteFloatRange(min=0.1, max=600),
    default=5.0,
    show_default=True,
    help="Seconds for the whole exchange with the server (not per reply); --guard adds at most 6x that.",
)
@click.option(
    "--count",
    type=click.IntRange(min=1, max=100000),
    default=10,
    show_default=True,
    help="Round trips to time.",
)
@click.option(
    "--build",
    "build",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    metavar="OUTDIR",
    help="Can that build's RPC clients talk to this server? (upstream's rule: same "
    "major, server minor not higher). Exit 14 with what to rebuild if not.",
)
def rpc_probe(
    endpoint: str, guard: bool, as_json: bool, timeout: float, count: int, build: Path | None
) -> None:
    """Show a ggml-rpc-server's protocol version, devices, free memory and latency.

    Connects only to HOST:PORT as given. With --guard, also checks that the server
    accepts a zero-element tensor whose data lies outside its buffer (patch 0001) and
    still refuses a tensor straddling the buffer end; exit code 7 if it does not.
    With --build OUTDIR, first checks the versions of that build's clients and the server.
    """
    host, port = parse_endpoint(endpoint)
    skew: SkewReport | None = None
    if build is not None:
        skew = with_words(check_server(host, port, read_build_info(build), build, timeout=timeout))
        if not skew.ok:
            if as_json:
                out_record(ProbeJson(skew=skew))
            raise RpcError(skew.message)
        if not as_json:
            out(skew.message)
    info = server_info(host, port, timeout=timeout, count=count)
    if not as_json:
        _show_info(info)
    report = probe_zero_nbytes_guard(host, port, timeout=timeout) if guard else None
    if report is not None and not as_json:
        _show_guard(report)
    if as_json:
        out_record(ProbeJson(server=info, skew=skew, guard=report))
    if report is not None and not report.ok:
        died = "; the server died" if report.verdict is GuardVerdict.UNPATCHED else ""
        raise SmokeError(
            f"{info.endpoint}: zero-byte tensor guard is {report.verdict}{died}",
            hint="build the server with patches/0001-rpc-deserialize-tensor-"
            "zero-nbytes.patch (patchkit build)",
        )


COMMANDS = [rpc_probe]
