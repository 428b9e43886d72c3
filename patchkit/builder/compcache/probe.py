"""Is the remote there? A TCP connect for every host:port remote (http, memcached, an
sccache-dist scheduler) and, for redis://, just enough of the protocol (AUTH, SELECT, PING),
all under one deadline, so that a remote that is down or refuses the credentials costs one
warning before the build instead of a timeout per compile.
"""

from __future__ import annotations

import socket
import time

from patchkit.builder.compcache.remote import RemoteUrl, redact

__all__ = ["PROBE_TIMEOUT", "probe"]

PROBE_TIMEOUT = 3.0
_REPLY_CAP = 512  # bytes read from a remote's reply to the probe


def _resp(*args: str) -> bytes:
    out = f"*{len(args)}\r\n".encode()
    for a in args:
        b = a.encode()
        out += b"$%d\r\n%s\r\n" % (len(b), b)
    return out


def _read_line(sock: socket.socket, deadline: float) -> str:
    data = b""
    while b"\r\n" not in data and len(data) < _REPLY_CAP:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer")
        sock.settimeout(left)
        chunk = sock.recv(_REPLY_CAP - len(data))
        if not chunk:
            raise ConnectionError("closed the connection")
        data += chunk
    return data.split(b"\r\n", 1)[0].decode("utf-8", "replace")


def probe(remote: RemoteUrl, *, timeout: float = PROBE_TIMEOUT) -> str | None:
    """None when the remote answers, else why not (one phrase, no credentials).

    TCP connect within ``timeout`` for every host:port remote; for redis:// also AUTH
    (when the URL has credentials), SELECT and PING, each reply capped and under the same
    deadline. Cloud remotes (s3, gcs, gha) are left to the launcher, which tolerates them.
    """
    addr = remote.address
    if addr is None:
        return None
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection(addr, timeout=timeout) as sock:
            if remote.scheme != "redis":
                return None
            cmds: list[tuple[str, ...]] = []
            if remote.password:
                cmds.append(
                    ("AUTH", remote.username, remote.password)
                    if remote.username
                    else ("AUTH", remote.password)
                )
            if remote.path.strip("/"):
                cmds.append(("SELECT", remote.path.strip("/")))
            cmds.append(("PING",))
            for cmd in cmds:
                sock.sendall(_resp(*cmd))
                reply = _read_line(sock, deadline)
                if reply.startswith("-"):
                    word = reply[1:].split(" ", 1)[0]
                    what = {
                        "NOAUTH": "asks for a password the URL does not give",
                        "WRONGPASS": "refused the credentials",
                        "NOPERM": "refused the credentials",
                    }.get(word)
                    return what or f"answered {cmd[0]} with {redact(reply[:80], remote)!r}"
            return None
    except TimeoutError:
        return f"did not answer within {timeout:.0f}s"
    except ConnectionRefusedError:
        return "refused the connection"
    except OSError as e:
        return redact(e.strerror or type(e).__name__, remote).lower()
