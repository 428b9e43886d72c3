"""A small client for ggml's RPC protocol (``ggml-rpc-server``), versions 4.x and 5.0-5.1.

Wire format (ggml/src/ggml-rpc/ggml-rpc.cpp, upstream bb4caa754018 = 5.1.0,
82bb48500a9a = 5.0.0 and e95dae18d64a = 4.0.1; all integers little-endian, structs packed):

- request  ``u8 cmd | u64 size | payload``; reply ``u64 size | payload``.
- HELLO (14) must be the first command on a connection: 24 capability bytes in
  (zeros = plain TCP), ``u8 major | u8 minor | u8 patch | u8 pad | 24 caps`` out.
  Servers before 4.0 (until 2026-04) took a 0-byte HELLO and sent 3 bytes back.
- SET_TENSOR, GRAPH_COMPUTE and GRAPH_RECOMPUTE get no reply.
- On any failure the server closes the connection (there is no error status);
  an assertion (GGML_ASSERT) kills the whole server process instead.
- 4.x and 5.x differ only in MEMSET_TENSOR (17, 5.x only), which this client
  does not send.
- 5.1 (af5172627, #27142): ``rpc_tensor``'s last 4 bytes, padding until 5.0, are
  ``int32_t use_count`` (the graph's use count of the tensor, for backend fusion). Same
  size (296 bytes); this client sends it only to servers of 5.1 or later (zeros before).
- Compatibility, as upstream's client applies it (``negotiate_hello``): the server's
  major must equal the client's and its minor must not be higher
  (``patchkit.spec.rpcproto``). This client knows 4.x and 5.0-5.1.
"""

from __future__ import annotations

import dataclasses
import enum
import socket
import struct
import time
from collections.abc import Sequence

from patchkit.core.errors import Problem, RpcError
from patchkit.rpc.problems import RpcTimedOut
from patchkit.spec.rpcproto import ProtoVersion

__all__ = [
    "CLIENT_VERSION",
    "CONN_CAPS_SIZE",
    "HELLO_RSP",
    "MAX_DEVICES",
    "RPC_TENSOR",
    "SUPPORTED_MAJORS",
    "Cmd",
    "GgmlType",
    "RpcClient",
    "RpcClosed",
    "RpcError",
    "RpcProtocolError",
    "RpcTensor",
    "RpcTimeout",
    "RpcUnreachable",
    "RpcVersionError",
    "Version",
    "encode_graph",
    "encode_request",
    "speaks",
]

SUPPORTED_MAJORS = (4, 5)
CLIENT_VERSION = ProtoVersion(major=5, minor=1, patch=0)  # the newest this client speaks
_MAX_MINOR = {5: CLIENT_VERSION.minor}  # per major; 4.x: every 4.0.x seen had the same wire
_USE_COUNT_FROM = ProtoVersion(major=5, minor=1, patch=0)
# what comes off the wire is capped: a server reporting more devices than this is broken or
# hostile (real ones have a handful); every reply size is checked before it is read
MAX_DEVICES = 256
_RECV_CHUNK = 1 << 16  # one read is at most this much, whatever the reply claims
CONN_CAPS_SIZE = 24
GGML_MAX_DIMS = 4
GGML_MAX_SRC = 10
GGML_MAX_OP_PARAMS = 64
GGML_MAX_NAME = 64


class Cmd(enum.IntEnum):
    ALLOC_BUFFER = 0
    GET_ALIGNMENT = 1
    GET_MAX_SIZE = 2
    BUFFER_GET_BASE = 3
    FREE_BUFFER = 4
    BUFFER_CLEAR = 5
    SET_TENSOR = 6
    SET_TENSOR_HASH = 7
    GET_TENSOR = 8
    COPY_TENSOR = 9
    GRAPH_COMPUTE = 10
    GET_DEVICE_MEMORY = 11
    INIT_TENSOR = 12
    GET_ALLOC_SIZE = 13
    HELLO = 14
    DEVICE_COUNT = 15
    GRAPH_RECOMPUTE = 16
    MEMSET_TENSOR = 17  # 5.x only


class GgmlType(enum.IntEnum):
    F32 = 0
    F16 = 1


# struct rpc_tensor: id, type, buffer, ne[4], nb[4], op, op_params[16], flags,
# src[10], view_src, view_offs, data, name[64], use_count (5.1; padding[4] before) -> 296 bytes
RPC_TENSOR = struct.Struct(
    f"<QIQ{GGML_MAX_DIMS}I{GGML_MAX_DIMS}II{GGML_MAX_OP_PARAMS // 4}ii{GGML_MAX_SRC}QQQQ{GGML_MAX_NAME}si"
)
HELLO_RSP = struct.Struct(f"<BBBx{CONN_CAPS_SIZE}s")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_U32_U64 = struct.Struct("<IQ")
_U64_U64 = struct.Struct("<QQ")
_REQ_HEAD = struct.Struct("<BQ")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RpcTensor:
    """One ``rpc_tensor``: what the server deserializes into a ggml_tensor."""

    id: int
    type: int = GgmlType.F32
    buffer: int = 0  # remote buffer handle (ALLOC_BUFFER's remote_ptr), 0 = none
    ne: tuple[int, int, int, int] = (1, 1, 1, 1)
    nb: tuple[int, int, int, int] = (4, 4, 4, 4)
    op: int = 0  # GGML_OP_NONE
    op_params: tuple[int, ...] = (0,) * (GGML_MAX_OP_PARAMS // 4)
    flags: int = 0
    src: tuple[int, ...] = (0,) * GGML_MAX_SRC
    view_src: int = 0
    view_offs: int = 0
    data: int = 0  # server-side address
    name: str = ""
    use_count: int = 0  # 5.1+: uses of the tensor in the graph; padding (sent as 0) before

    @classmethod
    def f32(
        cls, *, id: int, buffer: int, data: int, ne: tuple[int, int, int, int], name: str = ""
    ) -> RpcTensor:
        """A contiguous F32 tensor (strides as ggml computes them)."""
        nb0 = 4
        nb = (nb0, nb0 * ne[0], nb0 * ne[0] * ne[1], nb0 * ne[0] * ne[1] * ne[2])
        return cls(id=id, type=GgmlType.F32, buffer=buffer, ne=ne, nb=nb, data=data, name=name)

    @property
    def nbytes(self) -> int:
        """ggml_nbytes for block size 1 types: 0 when any dimension is 0."""
        if any(n <= 0 for n in self.ne):
            return 0
        size = {GgmlType.F32: 4, GgmlType.F16: 2}[GgmlType(self.type)]
        return size + sum((n - 1) * s for n, s in zip(self.ne, self.nb))

    def pack(self, *, use_count: bool = True) -> bytes:
        """The 296 wire bytes; ``use_count=False``: the 5.0 layout (padding, zeros)."""
        name = self.name.encode("utf-8")[: GGML_MAX_NAME - 1]
        return RPC_TENSOR.pack(
            self.id,
            self.type,
            self.buffer,
            *self.ne,
            *self.nb,
            self.op,
            *self.op_params,
            self.flags,
            *self.src,
            self.view_src,
            self.view_offs,
            self.data,
            name,
            self.use_count if use_count else 0,
        )

    @classmethod
    def unpack(cls, raw: bytes) -> RpcTensor:
        f = RPC_TENSOR.unpack(raw)
        d, s, p = GGML_MAX_DIMS, GGML_MAX_SRC, GGML_MAX_OP_PARAMS // 4
        i = 3
        ne, i = tuple(f[i : i + d]), i + d
        nb, i = tuple(f[i : i + d]), i + d
        op, i = f[i], i + 1
        op_params, i = tuple(f[i : i + p]), i + p
        flags, i = f[i], i + 1
        src, i = tuple(f[i : i + s]), i + s
        view_src, view_offs, data, name, use_count = f[i : i + 5]
        return cls(
            id=f[0],
            type=f[1],
            buffer=f[2],
            ne=ne,
            nb=nb,
            op=op,
            op_params=op_params,
            flags=flags,
            src=src,
            view_src=view_src,
            view_offs=view_offs,
            data=data,
            name=name.split(b"\0", 1)[0].decode("utf-8", "replace"),
            use_count=use_count,
        )


Version = ProtoVersion  # the server's version as HELLO answers it


def encode_request(cmd: int, payload: bytes = b"") -> bytes:
    return _REQ_HEAD.pack(cmd, len(payload)) + payload


def encode_graph(
    device: int, nodes: Sequence[int], tensors: Sequence[RpcTensor], *, use_count: bool = True
) -> bytes:
    """GRAPH_COMPUTE payload: u32 device | u32 n_nodes | u64 ids[n] | u32 n_tensors | rpc_tensor[].

    ``use_count=False`` for a server before 5.1 (the field is padding there)."""
    return b"".join(
        (
            _U32.pack(device),
            _U32.pack(len(nodes)),
            struct.pack(f"<{len(nodes)}Q", *nodes),
            _U32.pack(len(tensors)),
            *(t.pack(use_count=use_count) for t in tensors),
        )
    )


def speaks(version: Version) -> str:
    """'' if this client can use a server of ``version``, else why not (one line)."""
    if version.major not in SUPPORTED_MAJORS:
        return f"major {version.major}, which this client does not know"
    top = _MAX_MINOR.get(version.major)
    if top is not None and version.minor > top:
        return f"a newer minor than this client's {version.major}.{top}"
    return ""


_SPOKEN = "4.x and 5.0-5.1"


class RpcUnreachable(RpcError):
    """No TCP connection (refused, unknown host, no route, connect timeout)."""

    def __init__(
        self,
        message: str = "",
        *,
        refused: bool = False,
        detail: str = "",
        hint: str = "",
        problem: Problem | None = None,
    ) -> None:
        super().__init__(message, detail=detail, hint=hint, problem=problem)
        self.refused = refused


class RpcClosed(RpcError):
    """The server closed the connection: how it reports every failure."""


class RpcTimeout(RpcError):
    pass


class RpcProtocolError(RpcError):
    """The reply does not fit the protocol (wrong size, nonsense values)."""


class RpcVersionError(RpcError):
    """The server speaks a protocol version this client does not."""


class RpcClient:
    """One connection to a ggml RPC server; ``with RpcClient(h, p) as c:`` connects and says HELLO.

    Every method raises an ``RpcError`` subclass on failure; after ``RpcClosed`` the
    connection is gone (the server ends a client's session on any error).
    """

    def __init__(self, host: str, port: int, *, timeout: float = 5.0, deadline: float | None = None) -> None:
        """``timeout``: seconds for the whole session (connect, HELLO and every command),
        not per read, so a server that trickles bytes cannot hold the client; ``deadline``
        (a ``time.monotonic()`` value) ends it sooner, for a probe made of several sessions."""
        self.host, self.port, self.timeout = host, port, timeout
        self.endpoint = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.version: Version | None = None
        self._sock: socket.socket | None = None
        self._deadline = deadline

    # connection -----------------------------------------------------------------------
    def __enter__(self) -> RpcClient:
        self.connect()
        try:
            self.hello()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect(self) -> None:
        session_end = time.monotonic() + self.timeout
        self._deadline = session_end if self._deadline is None else min(self._deadline, session_end)
        self._sock = self._open()

    def _left(self, what: str) -> float:
        """Seconds left before the session's deadline; RpcTimeout when there are none."""
        if self._deadline is None:
            return self.timeout
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise self._timeout(what)
        return left

    def _open(self) -> socket.socket:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self._left("connect"))
        except ConnectionRefusedError:
            raise RpcUnreachable(
                f"{self.endpoint}: connection refused",
                refused=True,
                hint="is ggml-rpc-server running there, and on that port?",
            ) from None
        except socket.gaierror as e:
            raise RpcUnreachable(
                f"{self.endpoint}: cannot resolve host ({e.strerror})", hint="check the host name"
            ) from None
        except TimeoutError:
            raise RpcUnreachable(
                problem=RpcTimedOut(endpoint=self.endpoint, seconds=self.timeout, stage="connect")
            ) from None
        except OSError as e:
            raise RpcUnreachable(
                f"{self.endpoint}: cannot connect ({e.strerror or e})",
                hint="check the address and the network",
            ) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    # raw I/O ---------------------------------------------------------------------------
    def _send(self, data: bytes, what: str, sock: socket.socket | None = None) -> None:
        sock = sock or self._sock
        if sock is None:
            raise RpcClosed(f"{self.endpoint}: not connected")
        try:
            sock.settimeout(self._left(what))
            sock.sendall(data)
        except TimeoutError:
            raise self._timeout(what) from None
        except OSError:
            raise RpcClosed(f"{self.endpoint}: connection closed while sending {what}") from None

    def _recv(self, n: int, what: str, sock: socket.socket | None = None) -> bytes:
        sock = sock or self._sock
        if sock is None:
            raise RpcClosed(f"{self.endpoint}: not connected")
        buf = bytearray()
        while len(buf) < n:
            try:
                sock.settimeout(self._left(what))
                chunk = sock.recv(min(n - len(buf), _RECV_CHUNK))
            except TimeoutError:
                raise self._timeout(what) from None
            except OSError:
                chunk = b""
            if not chunk:
                raise RpcClosed(f"{self.endpoint}: the server closed the connection on {what}")
            buf += chunk
        return bytes(buf)

    def _timeout(self, what: str) -> RpcTimeout:
        return RpcTimeout(
            problem=RpcTimedOut(endpoint=self.endpoint, seconds=self.timeout, stage="exchange", what=what)
        )

    def call(self, cmd: Cmd, payload: bytes = b"", reply_size: int | None = 0) -> bytes:
        """Send one command; read a reply of exactly ``reply_size`` bytes (None: no reply)."""
        self._send(encode_request(cmd, payload), cmd.name)
        if reply_size is None:
            return b""
        return self._reply(cmd.name, reply_size)

    def _reply(self, what: str, expected: int, sock: socket.socket | None = None) -> bytes:
        (size,) = _U64.unpack(self._recv(8, what, sock))
        if size != expected:
            raise RpcProtocolError(
                f"{self.endpoint}: {what} reply is {size} bytes, the protocol says {expected}",
                hint="is that a ggml-rpc-server (protocol 4.x/5.x) port?",
            )
        return self._recv(size, what, sock)

    # commands --------------------------------------------------------------------------
    def hello(self) -> Version:
        """HELLO; RpcVersionError for a server this client cannot use (see ``speaks``)."""
        version = self.read_version()
        why = speaks(version)
        if why:
            self.close()
            raise RpcVersionError(
                f"{self.endpoint} speaks RPC protocol {version} ({why}); patchkit's client speaks {_SPOKEN}",
                hint="use a server and client from the same llama.cpp release, or a newer patchkit",
            )
        self.version = version
        return version

    def read_version(self) -> Version:
        """HELLO, and the server's version as it is: no judgement (``rpc-probe --build``)."""
        try:
            raw = self.call(Cmd.HELLO, bytes(CONN_CAPS_SIZE), HELLO_RSP.size)
        except RpcClosed:
            self.close()
            legacy = self._legacy_hello()
            if legacy is not None:
                raise RpcVersionError(
                    f"{self.endpoint} speaks RPC protocol {legacy} (ggml before 2026-04); "
                    f"patchkit speaks {_SPOKEN}",
                    hint="update the server's llama.cpp",
                ) from None
            raise RpcProtocolError(
                f"{self.endpoint}: the server closed the connection on HELLO",
                hint=f"not a ggml-rpc-server, or one newer than protocol {SUPPORTED_MAJORS[-1]}.x",
            ) from None
        major, minor, patch, _caps = HELLO_RSP.unpack(raw)
        return Version(major=major, minor=minor, patch=patch)

    def _legacy_hello(self) -> Version | None:
        """Protocol < 4: a 0-byte HELLO, a 3-byte reply. None if that is not it either."""
        try:
            sock = self._open()
        except RpcError:
            return None
        try:
            self._send(encode_request(Cmd.HELLO), "HELLO (pre-4.0)", sock)
            raw = self._reply("HELLO (pre-4.0)", 3, sock)
        except RpcError:
            return None
        finally:
            sock.close()
        return Version(major=raw[0], minor=raw[1], patch=raw[2])

    def device_count(self) -> int:
        n = int(_U32.unpack(self.call(Cmd.DEVICE_COUNT, b"", _U32.size))[0])
        if n > MAX_DEVICES:
            self.close()
            raise RpcProtocolError(
                f"{self.endpoint} reports {n:,} devices; patchkit reads at most {MAX_DEVICES}",
                hint="a real ggml-rpc-server has a handful: is that port a ggml-rpc-server?",
            )
        return n

    def get_device_memory(self, device: int) -> tuple[int, int]:
        """(free, total) bytes."""
        free, total = _U64_U64.unpack(self.call(Cmd.GET_DEVICE_MEMORY, _U32.pack(device), _U64_U64.size))
        return free, total

    def get_alignment(self, device: int) -> int:
        return int(_U64.unpack(self.call(Cmd.GET_ALIGNMENT, _U32.pack(device), _U64.size))[0])

    def get_max_size(self, device: int) -> int:
        return int(_U64.unpack(self.call(Cmd.GET_MAX_SIZE, _U32.pack(device), _U64.size))[0])

    def alloc_buffer(self, device: int, size: int) -> tuple[int, int]:
        """(remote_ptr, remote_size); remote_ptr 0 means the server could not allocate."""
        ptr, got = _U64_U64.unpack(self.call(Cmd.ALLOC_BUFFER, _U32_U64.pack(device, size), _U64_U64.size))
        return ptr, got

    def buffer_get_base(self, remote_ptr: int) -> int:
        return int(_U64.unpack(self.call(Cmd.BUFFER_GET_BASE, _U64.pack(remote_ptr), _U64.size))[0])

    def free_buffer(self, remote_ptr: int) -> None:
        self.call(Cmd.FREE_BUFFER, _U64.pack(remote_ptr), 0)

    def graph_compute(self, device: int, nodes: Sequence[int], tensors: Sequence[RpcTensor]) -> None:
        """Send a graph; the server does not reply (a rejected graph closes the connection)."""
        v = self.version
        self.call(
            Cmd.GRAPH_COMPUTE,
            encode_graph(device, nodes, tensors, use_count=v is not None and v >= _USE_COUNT_FROM),
            None,
        )
