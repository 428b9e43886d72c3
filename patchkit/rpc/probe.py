"""Probe a ggml RPC server: what it is (``server_info``) and whether it has patch 0001
(``probe_zero_nbytes_guard``).

The guard probe sends three one-tensor graphs, each on its own connection, in this
order (an unpatched server dies on the second, so the third is then not run):

1. ``in-bounds``: 16 bytes at the start of a fresh buffer; must be accepted.
2. ``zero-bytes-outside``: a zero-element tensor whose data pointer lies past the
   buffer end (what tensor split sends); an unpatched server aborts, a patched
   one accepts it.
3. ``straddling-16-bytes``: 16 bytes starting 8 bytes before the buffer end; must
   be refused (connection closed, server still alive).

GRAPH_COMPUTE has no reply, so after each graph the probe asks DEVICE_COUNT on the
same connection: an answer means the graph was accepted. If the connection was
closed instead, a fresh connection + HELLO tells a refusal (server alive) from a
crash (connection refused or reset: nobody listening any more). A server run
under a supervisor that restarts it at once can look "alive" after a crash.

Point it only at servers you own: on an unpatched server ``--guard`` kills it.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
import time
from collections.abc import Callable
from typing import ClassVar

from patchkit.core.enums import StrEnum
from patchkit.core.errors import ConfigError
from patchkit.core.record import Record, meta
from patchkit.rpc.client import (
    RpcClient,
    RpcClosed,
    RpcError,
    RpcTensor,
    RpcTimeout,
    RpcUnreachable,
    Version,
)

__all__ = [
    "CASES",
    "DeviceInfo",
    "GuardCase",
    "GuardReport",
    "GuardVerdict",
    "Outcome",
    "RpcClient",
    "RttStats",
    "ServerInfo",
    "parse_endpoint",
    "probe_zero_nbytes_guard",
    "server_info",
]

PROBE_BUFFER_SIZE = 4096
_TENSOR_ID = 0x5EED0001  # any non-zero id


class Outcome(StrEnum):
    ACCEPTED = "accepted"  # the server computed the graph and answered after it
    REFUSED = "refused"  # connection closed, server still answers a new connection
    SERVER_DIED = "server-died"  # nobody answers on the port any more
    NO_ANSWER = "no-answer"  # neither: the server did not answer in time
    NOT_RUN = "not-run"  # skipped: the server was gone


class GuardVerdict(StrEnum):
    PATCHED = "patched"  # zero bytes outside accepted, straddling refused
    UNPATCHED = "unpatched"  # the zero-byte tensor killed the server
    NO_BOUNDS_CHECK = "no-bounds-check"  # even the straddling tensor was accepted
    REFUSES_ZERO_BYTES = "refuses-zero-bytes"
    INCONCLUSIVE = "inconclusive"


@dataclasses.dataclass(frozen=True, kw_only=True)
class GuardCase(Record):
    json_derived: ClassVar[tuple[str, ...]] = ("ok",)

    name: str  # in-bounds, zero-nbytes-outside, straddling
    description: str  # what the case sends
    expected: Outcome  # what a patched server does: accepted, refused
    outcome: Outcome  # what this server did: accepted, refused, server-died, no-answer, not-run
    detail: str = ""  # what was seen

    @property
    def ok(self) -> bool:
        """the outcome is the expected one"""
        return self.outcome is self.expected


@dataclasses.dataclass(frozen=True, kw_only=True)
class GuardReport(Record):
    json_derived: ClassVar[tuple[str, ...]] = ("verdict", "ok")

    endpoint: str  # HOST:PORT
    version: Version = dataclasses.field(metadata=meta(encode=str))  # the server's RPC protocol
    cases: tuple[GuardCase, ...]  # the three probes, in order

    def case(self, name: str) -> GuardCase:
        return next(c for c in self.cases if c.name == name)

    @property
    def verdict(self) -> GuardVerdict:
        """patched, unpatched, no-bounds-check, refuses-zero-bytes, inconclusive"""
        inb, zero, strad = (self.case(n).outcome for n in CASES)
        if zero is Outcome.SERVER_DIED:
            return GuardVerdict.UNPATCHED
        if inb is not Outcome.ACCEPTED:
            return GuardVerdict.INCONCLUSIVE
        if zero is Outcome.ACCEPTED and strad is Outcome.REFUSED:
            return GuardVerdict.PATCHED
        if strad is Outcome.ACCEPTED:
            return GuardVerdict.NO_BOUNDS_CHECK
        if zero is Outcome.REFUSED:
            return GuardVerdict.REFUSES_ZERO_BYTES
        return GuardVerdict.INCONCLUSIVE

    @property
    def ok(self) -> bool:
        """the verdict is patched"""
        return self.verdict is GuardVerdict.PATCHED


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeviceInfo(Record):
    index: int  # 0, 1, ... as the server numbers them
    free: int  # free memory, bytes
    total: int  # memory, bytes
    alignment: int  # buffer alignment, bytes
    max_size: int  # the largest buffer, bytes


@dataclasses.dataclass(frozen=True, kw_only=True)
class RttStats(Record):
    count: int  # round trips timed
    median_s: float  # seconds
    min_s: float  # seconds
    max_s: float  # seconds


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServerInfo(Record):
    endpoint: str  # HOST:PORT
    version: Version = dataclasses.field(metadata=meta(encode=str))  # its RPC protocol
    devices: tuple[DeviceInfo, ...]  # what it serves
    connect_s: float  # TCP connect + HELLO, seconds
    rtt: RttStats  # DEVICE_COUNT round trips on one connection


_ENDPOINT = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.%\w]+)\]|(?P<host>[^\s:\[\]/]+)):(?P<port>\d{1,5})$")


def parse_endpoint(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[IPv6]:PORT`` -> (host, port); ConfigError otherwise."""
    m = _ENDPOINT.match(text.strip())
    port = int(m.group("port")) if m else 0
    if not m or not 1 <= port <= 65535:
        raise ConfigError(
            f"{text!r} is not HOST:PORT (e.g. 192.168.1.20:50052, [fe80::1%eth0]:50052)",
            hint="give the address and port the ggml-rpc-server listens on",
        )
    return m.group("v6") or m.group("host"), port


def server_info(host: str, port: int, *, timeout: float = 5.0, count: int = 10) -> ServerInfo:
    """Version, devices (free/total memory) and round-trip latency of one server, in one
    exchange that ends within ``timeout`` seconds whatever the server does."""
    if count < 1:
        raise ConfigError(f"--count must be at least 1, not {count}")
    start = time.perf_counter()
    with RpcClient(host, port, timeout=timeout) as c:
        connect_s = time.perf_counter() - start
        assert c.version is not None
        rtts: list[float] = []
        n = 0
        for _ in range(count):
            t0 = time.perf_counter()
            n = c.device_count()
            rtts.append(time.perf_counter() - t0)
        devices = []
        for dev in range(n):
            free, total = c.get_device_memory(dev)
            devices.append(
                DeviceInfo(
                    index=dev,
                    free=free,
                    total=total,
                    alignment=c.get_alignment(dev),
                    max_size=c.get_max_size(dev),
                )
            )
        return ServerInfo(
            endpoint=c.endpoint,
            version=c.version,
            devices=tuple(devices),
            connect_s=round(connect_s, 6),
            rtt=RttStats(
                count=len(rtts),
                median_s=round(statistics.median(rtts), 6),
                min_s=round(min(rtts), 6),
                max_s=round(max(rtts), 6),
            ),
        )


# the cases -------------------------------------------------------------------------------
_Build = Callable[[int, int, int], RpcTensor]  # (remote_ptr, base, size) -> tensor


def _in_bounds(ptr: int, base: int, size: int) -> RpcTensor:
    return RpcTensor.f32(id=_TENSOR_ID, buffer=ptr, data=base, ne=(4, 1, 1, 1), name="probe_in_bounds")


def _zero_outside(ptr: int, base: int, size: int) -> RpcTensor:
    # like the recurrent-state view in tensor split: 0 rows, offset past the slice
    return RpcTensor.f32(
        id=_TENSOR_ID, buffer=ptr, data=base + size + 4096, ne=(4, 0, 1, 1), name="probe_zero_outside"
    )


def _straddling(ptr: int, base: int, size: int) -> RpcTensor:
    return RpcTensor.f32(
        id=_TENSOR_ID, buffer=ptr, data=base + size - 8, ne=(4, 1, 1, 1), name="probe_straddling"
    )


CASES: dict[str, tuple[str, Outcome, _Build]] = {
    "in-bounds": ("16 bytes at the buffer start", Outcome.ACCEPTED, _in_bounds),
    "zero-bytes-outside": ("0 elements, data 4 KiB past the buffer end", Outcome.ACCEPTED, _zero_outside),
    "straddling-16-bytes": ("16 bytes from 8 bytes before the buffer end", Outcome.REFUSED, _straddling),
}


def _alive(host: str, port: int, timeout: float, deadline: float) -> Outcome:
    """REFUSED if a new connection gets a HELLO answer, SERVER_DIED if nobody is there.

    A server that is aborting can still hold its listening socket for a while (ggml
    prints a backtrace through gdb first): connections then get reset or no answer.
    So look again until the port is closed (died) or a HELLO is answered (alive).
    """
    deadline = min(deadline, time.monotonic() + timeout)
    while True:
        try:
            with RpcClient(host, port, timeout=min(timeout, 2.0), deadline=deadline):
                return Outcome.REFUSED
        except RpcUnreachable as e:
            if e.refused:
                return Outcome.SERVER_DIED
        except RpcError:
            pass  # reset or no answer: the process may be exiting; look again
        if time.monotonic() >= deadline:
            return Outcome.NO_ANSWER
        time.sleep(0.2)


def _run_case(host: str, port: int, timeout: float, deadline: float, build: _Build) -> tuple[Outcome, str]:
    with RpcClient(host, port, timeout=timeout, deadline=deadline) as c:
        ptr, size = c.alloc_buffer(0, PROBE_BUFFER_SIZE)
        if ptr == 0 or size < 16:
            raise RpcError(
                f"{c.endpoint}: could not allocate a {PROBE_BUFFER_SIZE}-byte buffer on device 0",
                hint="is the server out of memory?",
            )
        base = c.buffer_get_base(ptr)
        tensor = build(ptr, base, size)
        detail = f"buffer [{base:#x}, {base + size:#x}), data {tensor.data:#x}, nbytes {tensor.nbytes}"
        try:
            c.graph_compute(0, (tensor.id,), (tensor,))
            c.device_count()
        except (RpcClosed, RpcTimeout) as e:
            outcome = _alive(host, port, timeout, deadline)
            return outcome, f"{detail}; {e.message}"
        c.free_buffer(ptr)
        return Outcome.ACCEPTED, detail


GUARD_BUDGET = 6  # the whole guard probe ends within this many timeouts


def probe_zero_nbytes_guard(host: str, port: int, *, timeout: float = 5.0) -> GuardReport:
    """Run the three cases; see the module docstring. Kills an unpatched server.

    Each connection's exchange ends within ``timeout`` and the whole probe within
    ``GUARD_BUDGET * timeout``, whatever the server does."""
    deadline = time.monotonic() + GUARD_BUDGET * timeout
    with RpcClient(host, port, timeout=timeout, deadline=deadline) as c:  # reachable, right version
        assert c.version is not None
        version, endpoint = c.version, c.endpoint
    cases: list[GuardCase] = []
    gone = False
    for name, (description, expected, build) in CASES.items():
        if gone:
            outcome, detail = Outcome.NOT_RUN, "the server was gone"
        else:
            outcome, detail = _run_case(host, port, timeout, deadline, build)
            gone = outcome is Outcome.SERVER_DIED
        cases.append(
            GuardCase(name=name, description=description, expected=expected, outcome=outcome, detail=detail)
        )
    return GuardReport(endpoint=endpoint, version=version, cases=tuple(cases))
