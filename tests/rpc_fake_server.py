"""An in-process stand-in for ggml-rpc-server (127.0.0.1, port 0, one thread).

It implements what patchkit's RPC client uses, written from the C++ server's
behaviour (ggml/src/ggml-rpc/ggml-rpc.cpp at 82bb48500a9a) rather than from the
client's code: one client at a time; HELLO first (24 caps bytes in, 28 bytes out);
any error closes the client's connection; a failed GGML_ASSERT kills the process,
which here means: close the listening socket and the client, serve no more.

Modes for deserialize_tensor's bounds check:
- ``patched``: nbytes == 0 passes anywhere; nbytes > 0 outside the buffer is refused.
- ``unpatched``: anything outside [base, base + size] "aborts" (as upstream).
- ``unchecked``: no bounds check at all (a server that must fail the probe).
- ``refuse-zero``: out-of-bounds is refused, zero-byte ones too, without dying.
Behaviours: ``hang`` (accept, never answer), ``legacy`` (protocol 3: 0-byte HELLO,
3-byte reply), ``garbage`` (wrong HELLO reply size), ``version`` (HELLO reply).
"""

from __future__ import annotations

import socket
import struct
import threading

__all__ = ["FakeRpcServer"]

TENSOR_SIZE = 296  # sizeof(rpc_tensor), written out here on purpose


def _recv_exact(conn: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        try:
            chunk = conn.recv(n - len(buf))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return buf


def _nbytes_f32(ne: tuple[int, ...], nb: tuple[int, ...]) -> int:
    if any(n == 0 for n in ne):
        return 0
    return 4 + sum((n - 1) * s for n, s in zip(ne, nb))


class FakeRpcServer:
    def __init__(self, mode: str = "patched", *, version: tuple[int, int, int] = (5, 0, 0),
                 behaviour: str = "", devices: int = 2) -> None:
        self.mode, self.version, self.behaviour, self.devices = mode, version, behaviour, devices
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port: int = self.listener.getsockname()[1]
        self.aborted = threading.Event()
        self.stopped = threading.Event()
        self.log: list[str] = []
        self.buffers: dict[int, tuple[int, int]] = {}  # handle -> (base, size)
        self._next = 0x7F0000001000
        self._hang: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> FakeRpcServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        try:
            self.listener.close()
        except OSError:
            pass
        for c in self._hang:
            c.close()
        self._thread.join(timeout=5)

    # serving ---------------------------------------------------------------------------
    def _serve(self) -> None:
        self.listener.settimeout(0.05)  # poll: closing a socket does not wake accept()
        while not self.stopped.is_set() and not self.aborted.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(10)
            if self.behaviour == "hang":
                self._hang.append(conn)
                continue
            with conn:
                self.buffers.clear()  # buffers live as long as the client
                self._client(conn)
                self.log.append("closed")

    def _abort(self, conn: socket.socket, why: str) -> None:
        self.log.append(f"abort: {why}")
        self.aborted.set()
        self.listener.close()  # first: nobody may connect after the "crash"
        conn.close()

    def _reply(self, conn: socket.socket, payload: bytes) -> None:
        conn.sendall(struct.pack("<Q", len(payload)) + payload)

    def _client(self, conn: socket.socket) -> None:
        head = _recv_exact(conn, 9)
        if head is None or head[0] != 14:
            return
        (size,) = struct.unpack("<Q", head[1:])
        if self.behaviour == "legacy":
            if size == 0:
                self._reply(conn, bytes(self.version))
            return  # a 24-byte HELLO: size mismatch, connection closed
        if size != 24 or _recv_exact(conn, 24) is None:
            return
        if self.behaviour == "garbage":
            self._reply(conn, b"\x05\x00")
            return
        self._reply(conn, bytes(self.version) + b"\0" + bytes(24))
        while True:
            head = _recv_exact(conn, 9)
            if head is None:
                return
            cmd, size = head[0], struct.unpack("<Q", head[1:])[0]
            payload = _recv_exact(conn, size) if size else b""
            if payload is None:
                return
            self.log.append(f"cmd {cmd}")
            if not self._command(conn, cmd, payload):
                return

    def _command(self, conn: socket.socket, cmd: int, p: bytes) -> bool:
        if cmd == 15 and not p:  # DEVICE_COUNT
            self._reply(conn, struct.pack("<I", self.devices))
        elif cmd == 11 and len(p) == 4:  # GET_DEVICE_MEMORY
            dev = struct.unpack("<I", p)[0]
            if dev >= self.devices:
                return False
            self._reply(conn, struct.pack("<QQ", (dev + 1) << 30, (dev + 2) << 30))
        elif cmd == 1 and len(p) == 4:  # GET_ALIGNMENT
            self._reply(conn, struct.pack("<Q", 32))
        elif cmd == 2 and len(p) == 4:  # GET_MAX_SIZE
            self._reply(conn, struct.pack("<Q", 2**64 - 1))
        elif cmd == 0 and len(p) == 12:  # ALLOC_BUFFER
            dev, size = struct.unpack("<IQ", p)
            if dev >= self.devices:
                return False
            handle, base = self._next, self._next + 0x100000
            self._next += 0x10000000
            self.buffers[handle] = (base, size)
            self._reply(conn, struct.pack("<QQ", handle, size))
        elif cmd == 3 and len(p) == 8:  # BUFFER_GET_BASE
            handle = struct.unpack("<Q", p)[0]
            if handle not in self.buffers:
                return False
            self._reply(conn, struct.pack("<Q", self.buffers[handle][0]))
        elif cmd == 4 and len(p) == 8:  # FREE_BUFFER
            if self.buffers.pop(struct.unpack("<Q", p)[0], None) is None:
                return False
            self._reply(conn, b"")
        elif cmd == 10:  # GRAPH_COMPUTE: no reply
            return self._graph(conn, p)
        else:
            return False
        return True

    def _graph(self, conn: socket.socket, p: bytes) -> bool:
        device, n_nodes = struct.unpack_from("<II", p, 0)
        off = 8 + 8 * n_nodes
        (n_tensors,) = struct.unpack_from("<I", p, off)
        off += 4
        if device >= self.devices or len(p) != off + n_tensors * TENSOR_SIZE:
            return False
        for i in range(n_tensors):
            t = p[off + i * TENSOR_SIZE: off + (i + 1) * TENSOR_SIZE]
            buffer = struct.unpack_from("<Q", t, 12)[0]
            ne = struct.unpack_from("<4I", t, 20)
            nb = struct.unpack_from("<4I", t, 36)
            data = struct.unpack_from("<Q", t, 220)[0]
            if buffer not in self.buffers:
                continue
            base, size = self.buffers[buffer]
            nbytes = _nbytes_f32(ne, nb)
            inside = base <= data and data + nbytes <= base + size
            if inside or self.mode == "unchecked":
                continue
            if self.mode == "unpatched":
                self._abort(conn, f"data {data:#x} nbytes {nbytes}")
                return False
            if self.mode == "patched" and nbytes == 0:
                continue
            self.log.append("refused")
            return False
        self.log.append("computed")
        return True
