"""Emulated links: what ``--link`` means, and proof that the relay really delivers it.

``--link`` takes a preset (``1gbe``, ``2.5gbe``, ``10gbe``, ``40g-rdma``), ``none`` (the
relay without shaping) or ``rate=1gbit,rtt=0.3ms`` (``+`` also separates the two, which a
``--sweep link=...`` value needs). ``rate`` is the payload bandwidth per direction
(``bit``, ``kbit``, ``mbit``, ``gbit``; no rate: unlimited), ``rtt`` the round trip of a
small message (``us``, ``ms``, ``s``).

Before a link is used, ``calibrate`` measures it on loopback through a relay to an
in-process peer that speaks the RPC framing: first the bare relay (its own round trip
and throughput), then the shaped one. The added delay per direction starts at half of
(rtt - the bare relay's round trip) and is corrected once by what was measured (sleeps
overshoot). A link whose round trip or throughput (each direction) is not within 10 % of
the setting is refused, saying what the relay delivered. Every measurement has a
deadline.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import socket
import statistics
import struct
import threading
import time

from patchkit.bench.relay import Relay, Shaping
from patchkit.core.errors import ConfigError
from patchkit.core.record import Record, meta
from patchkit.core.text import did_you_mean
from patchkit.rpc.client import CONN_CAPS_SIZE, HELLO_RSP, Cmd

__all__ = [
    "PRESETS",
    "STANDARD_LINKS",
    "TOLERANCE",
    "Calibrated",
    "Link",
    "PathMeasure",
    "Sink",
    "calibrate",
    "measure_path",
    "parse_link",
]

TOLERANCE = 0.10


@dataclasses.dataclass(frozen=True, kw_only=True)
class Link(Record):
    """A network link: payload bandwidth per direction and small-message round trip."""

    name: str  # as given to --link (1gbe, rate=1gbit,rtt=0.3ms)
    rate_bit_s: float = 0.0  # bits per second; 0: unlimited
    rtt_s: float = 0.0  # round trip, seconds

    @property
    def rate_bytes_s(self) -> float:
        return self.rate_bit_s / 8

    @property
    def shaped(self) -> bool:
        return self.rate_bit_s > 0 or self.rtt_s > 0

    def describe(self) -> str:
        if not self.shaped:
            return "no shaping"
        parts = []
        if self.rate_bit_s:
            parts.append(fmt_bits(self.rate_bit_s))
        if self.rtt_s:
            parts.append(f"rtt {self.rtt_s * 1e3:g} ms")
        return ", ".join(parts)


def fmt_bits(bit_s: float) -> str:
    for unit, f in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bit_s >= f:
            return f"{bit_s / f:.3g} {unit}"
    return f"{bit_s:.3g} bit/s"


# Typical values (TCP payload, a switch between two hosts); the rtt is a small message's.
PRESETS: dict[str, Link] = {
    "1gbe": Link(name="1gbe", rate_bit_s=1e9, rtt_s=0.30e-3),
    "2.5gbe": Link(name="2.5gbe", rate_bit_s=2.5e9, rtt_s=0.20e-3),
    "10gbe": Link(name="10gbe", rate_bit_s=10e9, rtt_s=0.10e-3),
    "40g-rdma": Link(name="40g-rdma", rate_bit_s=40e9, rtt_s=0.01e-3),
}
STANDARD_LINKS = tuple(PRESETS.values())  # the projection's columns
_NONE = ("none", "direct", "loopback")

_RATE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmg]?)(?:bit|bps|b)?(?:/s)?$", re.I)
_TIME = re.compile(r"^(\d+(?:\.\d+)?)\s*(us|ms|s)$", re.I)


def parse_link(text: str) -> Link:
    """``1gbe`` / ``none`` / ``rate=1gbit,rtt=0.3ms`` (or ``+`` between) -> Link."""
    spec = text.strip().lower()
    if spec in PRESETS:
        return PRESETS[spec]
    if spec in _NONE:
        return Link(name="none")
    if "=" not in spec:
        raise ConfigError(
            f"--link {text!r}: not a known link{did_you_mean(spec, [*PRESETS, 'none'])}",
            hint="links: " + ", ".join([*PRESETS, "none"]) + ", or rate=1gbit,rtt=0.3ms",
        )
    rate = rtt = 0.0
    seen = set()
    for part in re.split(r"[,+]", spec):
        key, _, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if key in seen:
            raise ConfigError(f"--link {text!r}: {key} given twice")
        seen.add(key)
        if key == "rate":
            m = _RATE.match(value)
            if not m:
                raise ConfigError(f"--link {text!r}: rate {value!r} is not like 1gbit or 100mbit")
            rate = float(m[1]) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m[2].lower()]
            if rate <= 0:
                raise ConfigError(f"--link {text!r}: the rate must be above 0")
        elif key == "rtt":
            m = _TIME.match(value)
            if not m:
                raise ConfigError(f"--link {text!r}: rtt {value!r} is not like 0.3ms or 50us")
            rtt = float(m[1]) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m[2].lower()]
            if rtt > 10:
                raise ConfigError(f"--link {text!r}: rtt above 10 s is not a link")
        else:
            raise ConfigError(
                f"--link {text!r}: unknown key {key!r}{did_you_mean(key, ['rate', 'rtt'])}",
                hint="keys: rate (e.g. 1gbit), rtt (e.g. 0.3ms)",
            )
    name = "+".join(
        p for p in (f"rate={_num(rate, 'bit')}" if rate else "", f"rtt={rtt * 1e3:g}ms" if rtt else "") if p
    )
    return Link(name=name or "none", rate_bit_s=rate, rtt_s=rtt)


def _num(v: float, unit: str) -> str:
    for p, f in (("g", 1e9), ("m", 1e6), ("k", 1e3)):
        if v >= f and (v / f) == round(v / f, 3):
            return f"{v / f:g}{p}{unit}"
    return f"{v:g}{unit}"


# ---- an in-process peer speaking the RPC framing ---------------------------------------------

_REQ = struct.Struct("<BQ")
_U64 = struct.Struct("<Q")


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def _discard(s: socket.socket, n: int) -> None:
    buf = bytearray(1 << 20)
    while n:
        got = s.recv_into(buf, min(n, len(buf)))
        if not got:
            raise ConnectionError("closed")
        n -= got


class Sink:
    """A loopback peer for measurements: HELLO, GET_ALIGNMENT (a ping: 8 bytes back),
    SET_TENSOR (payload discarded, no reply), GET_TENSOR (``u64 n`` in, n zero bytes out)."""

    def __init__(self) -> None:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(4)
        self.port: int = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._conns: list[socket.socket] = []

    def __enter__(self) -> Sink:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for s in (self._listener, *self._conns):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
        self._thread.join(timeout=5)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._conns.append(conn)
            threading.Thread(target=self._client, args=(conn,), daemon=True).start()

    def _client(self, conn: socket.socket) -> None:
        zeros = bytes(1 << 20)
        try:
            while True:
                cmd, size = _REQ.unpack(_recv_exact(conn, _REQ.size))
                if cmd == Cmd.SET_TENSOR:
                    _discard(conn, size)
                    continue
                payload = _recv_exact(conn, size)
                if cmd == Cmd.HELLO:
                    conn.sendall(_U64.pack(HELLO_RSP.size) + HELLO_RSP.pack(5, 0, 0, bytes(CONN_CAPS_SIZE)))
                elif cmd == Cmd.GET_TENSOR:
                    (n,) = _U64.unpack(payload[:8])
                    conn.sendall(_U64.pack(n))
                    while n:
                        k = min(n, len(zeros))
                        conn.sendall(zeros[:k])
                        n -= k
                else:
                    conn.sendall(_U64.pack(8) + bytes(8))
        except (OSError, ConnectionError, struct.error):
            pass
        finally:
            with contextlib.suppress(OSError):
                conn.close()


def _mbit_s(bytes_s: float) -> float:
    return round(bytes_s * 8e-6, 1)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PathMeasure(Record):
    rtt_s: float = dataclasses.field(
        metadata=meta(key="rtt_ms", encode=lambda s: round(s * 1e3, 4))
    )  # median small-message round trip, ms
    up_bytes_s: float = dataclasses.field(
        metadata=meta(key="up_mbit_s", encode=_mbit_s)
    )  # client -> host throughput, Mbit/s; 0: not measured
    down_bytes_s: float = dataclasses.field(
        metadata=meta(key="down_mbit_s", encode=_mbit_s)
    )  # host -> client throughput, Mbit/s; 0: not measured


def _ping(s: socket.socket) -> float:
    t0 = time.perf_counter()
    s.sendall(_REQ.pack(Cmd.GET_ALIGNMENT, 4) + bytes(4))
    _recv_exact(s, 16)
    return time.perf_counter() - t0


def measure_path(
    shaping: Shaping, *, pings: int = 30, bulk_bytes: int = 8 << 20, deadline_s: float = 20.0
) -> PathMeasure:
    """Round trip and throughput each way through a relay with ``shaping`` to a Sink."""
    end = time.monotonic() + deadline_s
    with Sink() as sink, Relay(("127.0.0.1", sink.port), shaping=shaping) as relay:
        s = socket.create_connection(("127.0.0.1", relay.port), timeout=deadline_s)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            s.sendall(_REQ.pack(Cmd.HELLO, CONN_CAPS_SIZE) + bytes(CONN_CAPS_SIZE))
            _recv_exact(s, 8 + HELLO_RSP.size)
            samples = []
            for _ in range(pings):
                s.settimeout(max(0.1, end - time.monotonic()))
                samples.append(_ping(s))
            rtt = statistics.median(samples)
            if not bulk_bytes:
                return PathMeasure(rtt_s=rtt, up_bytes_s=0.0, down_bytes_s=0.0)
            # up: one big SET_TENSOR, then a ping; its reply comes once every byte is through
            s.settimeout(max(0.1, end - time.monotonic()))
            t0 = time.perf_counter()
            s.sendall(_REQ.pack(Cmd.SET_TENSOR, bulk_bytes))
            chunk = bytes(1 << 20)
            left = bulk_bytes
            while left:
                k = min(left, len(chunk))
                s.sendall(chunk[:k])
                left -= k
            _ping(s)
            up = bulk_bytes / max(time.perf_counter() - t0 - rtt, 1e-9)
            # down: GET_TENSOR of the same size
            t0 = time.perf_counter()
            s.sendall(_REQ.pack(Cmd.GET_TENSOR, 8) + _U64.pack(bulk_bytes))
            (n,) = _U64.unpack(_recv_exact(s, 8))
            _discard(s, n)
            down = bulk_bytes / max(time.perf_counter() - t0 - rtt, 1e-9)
        except (OSError, ConnectionError) as e:
            raise ConfigError(
                f"measuring the relay on loopback failed: {e}", hint="the machine may be too busy; try again"
            ) from None
        finally:
            s.close()
    return PathMeasure(rtt_s=rtt, up_bytes_s=up, down_bytes_s=down)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Calibrated(Record):
    """A link the relay was shown to hold: the shaping that does it and what it measured."""

    link: Link  # the link asked for
    shaping: Shaping = dataclasses.field(
        metadata=meta(key="delay_ms", encode=lambda sh: round(sh.delay_s * 1e3, 4))
    )  # the one-way delay the relay adds, ms
    measured: PathMeasure  # what the relay measured with that shaping
    base: PathMeasure = dataclasses.field(metadata=meta(key="bare_relay"))  # the bare relay on loopback


def _bulk_for(link: Link) -> int:
    if not link.rate_bit_s:
        return 8 << 20
    return int(min(max(link.rate_bytes_s * 0.25, 1 << 20), 64 << 20))  # ~0.25 s of transfer


def _off(got: float, want: float) -> float:
    return abs(got - want) / want


def _fit_delay(link: Link, base: PathMeasure, tolerance: float, tries: int = 6) -> float:
    """The added one-way delay whose measured round trip is the link's (pings only).

    Sleeps overshoot and the shaped path has its own cost, so the delay is found by
    measuring: secant steps from half of (rtt - the bare relay's rtt)."""
    want = link.rtt_s
    d = max(0.0, (want - base.rtt_s) / 2)
    tried: list[tuple[float, float]] = []
    for _ in range(tries):
        got = measure_path(Shaping(delay_s=d, rate_bytes_s=link.rate_bytes_s), pings=20, bulk_bytes=0).rtt_s
        tried.append((d, got))
        if _off(got, want) <= tolerance / 2:
            break
        if len(tried) >= 2 and tried[-1][1] != tried[-2][1] and tried[-1][0] != tried[-2][0]:
            (d0, r0), (d1, r1) = tried[-2], tried[-1]
            slope = (r1 - r0) / (d1 - d0)
            nxt = d1 - (r1 - want) / slope if slope > 0.5 else d1 - (r1 - want) / 2
        else:
            nxt = d - (got - want) / 2
        d = min(max(0.0, nxt), 2 * want)
    return min(tried, key=lambda t: abs(t[1] - want))[0]


def _problems(link: Link, got: PathMeasure, tolerance: float) -> list[str]:
    problems = []
    if link.rtt_s and _off(got.rtt_s, link.rtt_s) > tolerance:
        problems.append(f"round trip {got.rtt_s * 1e3:.3f} ms instead of {link.rtt_s * 1e3:g} ms")
    if link.rate_bit_s:
        for way, v in (("up", got.up_bytes_s), ("down", got.down_bytes_s)):
            if _off(v, link.rate_bytes_s) > tolerance:
                problems.append(f"{way} {fmt_bits(v * 8)} instead of {fmt_bits(link.rate_bit_s)}")
    return problems


def calibrate(link: Link, *, base: PathMeasure | None = None, tolerance: float = TOLERANCE) -> Calibrated:
    """The shaping that makes the relay behave like ``link``, or ConfigError saying why not."""
    base = base or measure_path(Shaping())
    if not link.shaped:
        return Calibrated(link=link, shaping=Shaping(), measured=base, base=base)
    bulk = _bulk_for(link)
    if link.rtt_s and base.rtt_s > link.rtt_s * (1 + tolerance):
        raise ConfigError(
            f"--link {link.name}: the relay alone takes {base.rtt_s * 1e3:.3f} ms per round trip "
            f"here, more than the {link.rtt_s * 1e3:g} ms asked: it cannot emulate a link that fast",
            hint="use a slower link (a longer rtt), or measure the real network",
        )
    for _attempt in range(3):  # a busy machine can spoil a measurement: fit and measure again
        delay = _fit_delay(link, base, tolerance) if link.rtt_s else 0.0
        shaping = Shaping(delay_s=delay, rate_bytes_s=link.rate_bytes_s)
        got = measure_path(shaping, bulk_bytes=bulk)
        problems = _problems(link, got, tolerance)
        if not problems:
            break
    if problems:
        top = max(base.up_bytes_s, base.down_bytes_s) * 8
        raise ConfigError(
            f"--link {link.name}: the emulation did not hold within {tolerance:.0%}: "
            + "; ".join(problems)
            + f" (the bare relay here: {fmt_bits(top)}, {base.rtt_s * 1e3:.3f} ms round trip)",
            hint="a user-space relay on a busy machine tops out below fast links: "
            "use a slower --link, or measure on a real network",
        )
    return Calibrated(link=link, shaping=shaping, measured=got, base=base)
