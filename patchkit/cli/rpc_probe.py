"""`patchkit rpc-probe HOST:PORT`: ask a ggml RPC server what it is, optionally test patch 0001.

The result goes to stdout (the ``--build`` verdict, the server, the guard's cases; ``-v``
adds each case's detail on stderr). ``--json`` prints one object instead: ``{"schema": 1,
"server": {...}, "skew": {...}, "guard": {...}}``, ``skew`` only with ``--build`` and
``guard`` only with ``--guard``; when the build's clients cannot talk to the server it is
``{"schema": 1, "skew": {...}}`` and the exit code is 14.
"""

from __future__ import annotations

from pathlib import Path

import click

from patchkit.cli._common import out, out_json
from patchkit.cli._types import FiniteFloatRange
from patchkit.core.errors import RpcError, SmokeError
from patchkit.core.log import log
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

__all__ = ["COMMANDS", "rpc_probe"]


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
        skew = check_server(host, port, read_build_info(build), build, timeout=timeout)
        if not skew.ok:
            if as_json:
                out_json({"schema": 1, "skew": skew.to_json()})
            raise RpcError(skew.line())
        if not as_json:
            out(skew.line())
    info = server_info(host, port, timeout=timeout, count=count)
    if not as_json:
        _show_info(info)
    report = probe_zero_nbytes_guard(host, port, timeout=timeout) if guard else None
    if report is not None and not as_json:
        _show_guard(report)
    if as_json:
        result: dict[str, object] = {"schema": 1, "server": info.to_json()}
        if skew is not None:
            result["skew"] = skew.to_json()
        if report is not None:
            result["guard"] = report.to_json()
        out_json(result)
    if report is not None and not report.ok:
        died = "; the server died" if report.verdict is GuardVerdict.UNPATCHED else ""
        raise SmokeError(
            f"{info.endpoint}: zero-byte tensor guard is {report.verdict}{died}",
            hint="build the server with patches/0001-rpc-deserialize-tensor-"
            "zero-nbytes.patch (patchkit build)",
        )


COMMANDS = [rpc_probe]
