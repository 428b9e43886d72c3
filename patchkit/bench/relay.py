"""A user-space TCP relay on 127.0.0.1 between llama-bench and one RPC host: it counts
what crosses the wire and, when asked, emulates a slower link.

ggml's RPC framing (ggml/src/ggml-rpc/ggml-rpc.cpp, the same at protocol 4.x, 5.0 and
5.1): a request is ``u8 cmd | u64 size | payload``; a reply is ``u64 size | payload``.
SET_TENSOR, GRAPH_COMPUTE and GRAPH_RECOMPUTE get no reply; every other command makes the
client wait for one: a *round trip* that blocks it. The relay follows that framing on
each connection to count bytes each way, commands by type and round trips. Forwarding
never depends on the parsing: bytes pass through as they come, so a stream the relay
cannot follow (a size beyond 1 TiB) is still relayed, marked ``framing_lost``.

The relay keeps connections on plain TCP: it clears the transport capabilities in the
first HELLO each way (an RDMA upgrade would leave the relay's socket). Only the host it
was made for is ever contacted, and only when llama-bench connects to the relay.

Host time: for every request that waits for a reply, the relay takes the time from handing
its last byte to the host to the first byte of the reply coming back (``host_s``): the
host's compute (the graph queued before it included) plus the path to it, never the
emulated link. It tells a setup's time on the hosts apart from its time on the wire, run by
run, so a host that got slower between two runs is not blamed on the link.

Shaping (``Shaping``): every chunk read from one side is delivered to the other
``delay_s`` later, after its bytes went through a per-direction bandwidth limit (a token
bucket that holds one chunk: a chunk leaves when the previous ones' bytes are through);
a bounded queue gives back-pressure like a real socket. ``SharedLink`` makes several
relays share one limit per direction: the client's network port, which all of its RPC
hosts' traffic crosses (llama.cpp sends to one host without waiting for another).
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import socket
import struct
import threading
import time
from collections import Counter
from typing import Any

from patchkit.core.record import Record, meta
from patchkit.rpc.client import CONN_CAPS_SIZE, HELLO_RSP, Cmd

__all__ = ["REPLY_LESS", "Relay", "Shaping", "SharedLink", "Traffic"]

REPLY_LESS = frozenset({int(Cmd.SET_TENSOR), int(Cmd.GRAPH_COMPUTE), int(Cmd.GRAPH_RECOMPUTE)})
_REQ_HEAD = struct.Struct("<BQ")
_REP_HEAD = struct.Struct("<Q")
_MAX_PAYLOAD = 1 << 40  # beyond this the relay has lost the framing (it still forwards)
_CHUNK = 1 << 20
_SHAPED_CHUNK = 64 << 10  # shaped: small chunks, so a big transfer is paced smoothly
_QUEUE_CHUNKS = 64
_CONNECT_TIMEOUT = 10.0


def cmd_name(cmd: int) -> str:
    try:
        return Cmd(cmd).name
    except ValueError:
        return f"CMD_{cmd}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Shaping:
    """An emulated link, per direction: added one-way delay and a bandwidth limit."""

    delay_s: float = 0.0
    rate_bytes_s: float = 0.0  # 0: unlimited

    @property
    def active(self) -> bool:
        return self.delay_s > 0 or self.rate_bytes_s > 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Traffic(Record):
    """What crossed one relay (framing included): exact counts."""

    bytes_up: int = 0  # client -> server
    bytes_down: int = 0  # server -> client
    commands: tuple[tuple[str, int], ...] = dataclasses.field(
        default=(), metadata=meta(encode=dict)
    )  # commands by type, in command-id order
    round_trips: int = 0  # commands that wait for a reply
    replies: int = 0  # replies the host sent
    connections: int = 0  # connections relayed
    framing_lost: int = 0  # connections whose framing the relay could not follow
    version: str = ""  # the protocol the server said in HELLO
    host_s: float = 0.0  # seconds the host took to answer the requests that wait (see above)

    @property
    def bytes(self) -> int:
        return self.bytes_up + self.bytes_down

    def count(self, name: str) -> int:
        return dict(self.commands).get(name, 0)

    def __sub__(self, other: Traffic) -> Traffic:
        mine, theirs = dict(self.commands), dict(other.commands)
        order = [n for n, _ in self.commands] + [n for n, _ in other.commands if n not in mine]
        cmds = tuple(
            (n, mine.get(n, 0) - theirs.get(n, 0)) for n in order if mine.get(n, 0) != theirs.get(n, 0)
        )
        return Traffic(
            bytes_up=self.bytes_up - other.bytes_up,
            bytes_down=self.bytes_down - other.bytes_down,
            commands=cmds,
            round_trips=self.round_trips - other.round_trips,
            replies=self.replies - other.replies,
            connections=self.connections - other.connections,
            framing_lost=self.framing_lost - other.framing_lost,
            version=self.version or other.version,
            host_s=self.host_s - other.host_s,
        )

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Traffic:
        return cls(**{**d, "commands": tuple(d.get("commands", {}).items())})


class _Conn:
    """One relayed connection's counters (written by its two pump threads only)."""

    def __init__(self) -> None:
        self.bytes_up = 0
        self.bytes_down = 0
        self.commands: Counter[int] = Counter()
        self.round_trips = 0
        self.replies = 0
        self.lost = False
        self.version = ""
        self.host_s = 0.0
        self.sent_at: float | None = None  # a request that waits went to the host then

    def sent(self) -> None:
        """The last byte of a request that waits is about to go to the host."""
        self.sent_at = time.perf_counter()

    def answered(self) -> None:
        """The first byte of a reply came from the host (set before, so no race: the
        host cannot answer a request before it was sent)."""
        if self.sent_at is not None:
            self.host_s += time.perf_counter() - self.sent_at
            self.sent_at = None


class _Requests:
    """Follows ``u8 cmd | u64 size | payload`` in the client -> server stream."""

    def __init__(self, conn: _Conn) -> None:
        self.c = conn
        self.head = bytearray()
        self.left = 0  # payload bytes still to come
        self.zero = 0  # of those, how many to clear (the first HELLO's caps)
        self.first = True
        self.waits = False  # the current request waits for a reply

    def feed(self, mv: memoryview, n: int) -> bool:
        """Count the chunk; True if a request that waits for a reply ends in it."""
        c = self.c
        c.bytes_up += n
        if c.lost:
            return False
        i = 0
        ended = False
        while i < n:
            if self.left:
                take = min(self.left, n - i)
                if self.zero:
                    z = min(self.zero, take)
                    mv[i : i + z] = bytes(z)
                    self.zero -= z
                self.left -= take
                i += take
                ended = ended or (self.waits and not self.left)
                continue
            take = min(_REQ_HEAD.size - len(self.head), n - i)
            self.head += mv[i : i + take]
            i += take
            if len(self.head) < _REQ_HEAD.size:
                return ended
            cmd, size = _REQ_HEAD.unpack(self.head)
            self.head.clear()
            if size > _MAX_PAYLOAD:
                c.lost = True
                return False
            c.commands[cmd] += 1
            self.waits = cmd not in REPLY_LESS
            if self.waits:
                c.round_trips += 1
            if self.first and cmd == Cmd.HELLO and size == CONN_CAPS_SIZE:
                self.zero = size
            self.first = False
            self.left = size
            ended = ended or (self.waits and not size)
        return ended


class _Replies:
    """Follows ``u64 size | payload`` in the server -> client stream."""

    def __init__(self, conn: _Conn) -> None:
        self.c = conn
        self.head = bytearray()
        self.left = 0
        self.pos = 0  # offset in the current payload
        self.hello = False  # the current payload is the first HELLO reply
        self.first = True
        self.ver = bytearray()

    def feed(self, mv: memoryview, n: int) -> bool:
        c = self.c
        c.bytes_down += n
        if c.lost:
            return False
        i = 0
        while i < n:
            if self.left:
                take = min(self.left, n - i)
                if self.hello:  # bytes 0..2: version (kept), 4..27: caps (cleared)
                    for k in range(take):
                        off = self.pos + k
                        if off < 3:
                            self.ver.append(mv[i + k])
                        elif off >= 4:
                            mv[i + k] = 0
                    if len(self.ver) == 3:
                        c.version = ".".join(str(b) for b in self.ver)
                self.pos += take
                self.left -= take
                i += take
                continue
            if not self.head:
                c.answered()  # a reply begins
            take = min(_REP_HEAD.size - len(self.head), n - i)
            self.head += mv[i : i + take]
            i += take
            if len(self.head) < _REP_HEAD.size:
                return False
            (size,) = _REP_HEAD.unpack(self.head)
            self.head.clear()
            if size > _MAX_PAYLOAD:
                c.lost = True
                return False
            c.replies += 1
            self.hello = self.first and size == HELLO_RSP.size
            self.first = False
            self.left, self.pos = size, 0
        return False


class _Pacer:
    """One direction of an emulated link: when each chunk may be delivered."""

    def __init__(self, shaping: Shaping) -> None:
        self.delay = shaping.delay_s
        self.rate = shaping.rate_bytes_s
        self.free = 0.0  # when the link has sent everything queued so far
        self._lock = threading.Lock()

    def due(self, n: int, now: float) -> float:
        if self.rate > 0:
            with self._lock:
                self.free = max(now, self.free) + n / self.rate
                return self.free + self.delay
        return now + self.delay


class SharedLink:
    """One emulated link for several relays: the client's own network port, which every
    host's traffic crosses (bytes to two hosts queue on it one after the other)."""

    def __init__(self, shaping: Shaping) -> None:
        self.shaping = shaping
        self.up = _Pacer(shaping)
        self.down = _Pacer(shaping)


def _sleep_until(t: float) -> None:
    while True:
        left = t - time.perf_counter()
        if left <= 0:
            return
        time.sleep(left)


class Relay:
    """Listens on 127.0.0.1 (a free port); every connection is relayed to ``target``.

    ``with Relay(("10.0.0.2", 50052)) as r:`` then point the client at ``r.endpoint``.
    ``traffic()`` is exact once the clients have closed (``quiesce``).
    """

    def __init__(
        self,
        target: tuple[str, int],
        *,
        shaping: Shaping | None = None,
        connect_timeout: float = _CONNECT_TIMEOUT,
    ) -> None:
        self.target = target
        self.shaping = shaping or Shaping()
        self.shared: SharedLink | None = None
        self.connect_timeout = connect_timeout
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port: int = self._listener.getsockname()[1]
        self.endpoint = f"127.0.0.1:{self.port}"
        self._conns: list[_Conn] = []
        self._socks: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._active = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._closed = threading.Event()
        self.errors: list[str] = []  # upstream connects that failed
        self._accept = threading.Thread(target=self._serve, name=f"relay-{self.port}", daemon=True)

    def __enter__(self) -> Relay:
        self._accept.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_shaping(self, shaping: Shaping | None, shared: SharedLink | None = None) -> None:
        """For connections made from now on; ``shared``: pace on a link other relays use too
        (else each connection has its own link)."""
        self.shaping = shared.shaping if shared is not None else (shaping or Shaping())
        self.shared = shared

    # counting ------------------------------------------------------------------------------
    def traffic(self) -> Traffic:
        with self._lock:
            conns = list(self._conns)
        cmds: Counter[int] = Counter()
        for c in conns:
            cmds.update(c.commands)
        return Traffic(
            bytes_up=sum(c.bytes_up for c in conns),
            bytes_down=sum(c.bytes_down for c in conns),
            commands=tuple((cmd_name(k), cmds[k]) for k in sorted(cmds)),
            round_trips=sum(c.round_trips for c in conns),
            replies=sum(c.replies for c in conns),
            connections=len(conns),
            framing_lost=sum(c.lost for c in conns),
            version=next((c.version for c in conns if c.version), ""),
            host_s=sum(c.host_s for c in conns),
        )

    def quiesce(self, timeout: float = 10.0) -> bool:
        """Wait until no connection is open (the client exited): True if so in time."""
        end = time.monotonic() + timeout
        with self._idle:
            while self._active:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    # relaying ------------------------------------------------------------------------------
    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.target, timeout=self.connect_timeout)
        except OSError as e:
            self.errors.append(f"{self.target[0]}:{self.target[1]}: {e.strerror or e}")
            client.close()
            return
        server.settimeout(None)
        for s in (client, server):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn()
        shaping, shared = self.shaping, self.shared
        with self._lock:
            if self._closed.is_set():
                client.close()
                server.close()
                return
            self._conns.append(conn)
            self._socks.update((client, server))
            self._active += 1
        done = threading.Barrier(2, action=lambda: self._finish(client, server))
        up, down = (shared.up, shared.down) if shared else (_Pacer(shaping), _Pacer(shaping))
        pumps = [
            threading.Thread(
                target=self._pump, daemon=True, args=(client, server, _Requests(conn), shaping, up, done)
            ),
            threading.Thread(
                target=self._pump, daemon=True, args=(server, client, _Replies(conn), shaping, down, done)
            ),
        ]
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + pumps
        for t in pumps:
            t.start()

    def _finish(self, client: socket.socket, server: socket.socket) -> None:
        for s in (client, server):
            with contextlib.suppress(OSError):
                s.close()
        with self._idle:
            self._socks.difference_update((client, server))
            self._active -= 1
            self._idle.notify_all()

    def _pump(
        self,
        src: socket.socket,
        dst: socket.socket,
        parser: _Requests | _Replies,
        shaping: Shaping,
        pacer: _Pacer,
        done: threading.Barrier,
    ) -> None:
        try:
            if shaping.active:
                self._pump_shaped(src, dst, parser, pacer)
            else:
                buf = bytearray(_CHUNK)
                mv = memoryview(buf)
                while True:
                    n = src.recv_into(buf)
                    if not n:
                        break
                    if parser.feed(mv, n):
                        parser.c.sent()
                    dst.sendall(mv[:n])
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)  # the other side sees the end, like a direct socket
            with contextlib.suppress(OSError):
                src.shutdown(socket.SHUT_RD)
            with contextlib.suppress(threading.BrokenBarrierError):
                done.wait()

    def _pump_shaped(
        self, src: socket.socket, dst: socket.socket, parser: _Requests | _Replies, pacer: _Pacer
    ) -> None:
        q: queue.Queue[tuple[float, bytes, bool] | None] = queue.Queue(maxsize=_QUEUE_CHUNKS)
        failed = threading.Event()

        def deliver() -> None:
            while True:
                item = q.get()
                if item is None:
                    return
                if failed.is_set():
                    continue  # drain, so the reader never blocks on a dead writer
                due, data, ended = item
                _sleep_until(due)
                if ended:
                    parser.c.sent()
                try:
                    dst.sendall(data)
                except OSError:
                    failed.set()

        writer = threading.Thread(target=deliver, daemon=True)
        writer.start()
        buf = bytearray(_SHAPED_CHUNK)
        mv = memoryview(buf)
        try:
            while not failed.is_set():
                n = src.recv_into(buf)
                if not n:
                    break
                ended = parser.feed(mv, n)
                q.put((pacer.due(n, time.perf_counter()), bytes(mv[:n]), ended))
        finally:
            q.put(None)
            writer.join()

    def close(self) -> None:
        """Stop listening, cut every relayed connection, wait for the threads."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept() on Linux
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            socks, threads = list(self._socks), list(self._threads)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        for t in threads:
            t.join(timeout=5)
        if self._accept.is_alive():
            self._accept.join(timeout=5)
