"""ggml's RPC protocol version: read from the source, and upstream's compatibility rule.

The version lives in ``ggml/include/ggml-rpc.h`` as three defines
(``RPC_PROTO_MAJOR_VERSION`` / ``_MINOR_`` / ``_PATCH_``). A client says HELLO and gets
the server's version back; upstream's client (``negotiate_hello`` in ggml-rpc.cpp, the
same at 82bb48500a9a = 5.0.0 and bb4caa754018 = 5.1.0) refuses a server whose major
differs or whose minor is higher than its own::

    if (response.major != RPC_PROTO_MAJOR_VERSION || response.minor > RPC_PROTO_MINOR_VERSION)
        -> "RPC server version mismatch"

so a 5.1 client uses a 5.0 server, a 5.0 client refuses a 5.1 server, and any two
majors refuse each other. The patch number never matters.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from patchkit.core.fs import read_regular

__all__ = [
    "RPC_HEADER",
    "ProtoVersion",
    "SkewVerdict",
    "judge",
    "parse_rpc_header",
    "read_rpc_protocol",
]

RPC_HEADER = "ggml/include/ggml-rpc.h"
_DEFINE = re.compile(
    r"^[ \t]*#[ \t]*define[ \t]+RPC_PROTO_(MAJOR|MINOR|PATCH)_VERSION[ \t]+"
    r"\(?[ \t]*(\d{1,3})[ \t]*\)?[ \t]*(?://.*|/\*.*)?$",
    re.MULTILINE,
)
_MAX_HEADER = 1 << 20


@dataclasses.dataclass(frozen=True, kw_only=True, order=True)
class ProtoVersion:
    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    @classmethod
    def parse(cls, text: str) -> ProtoVersion:
        """``"5.1.0"`` -> ProtoVersion; ValueError otherwise."""
        parts = text.strip().split(".")
        if len(parts) != 3 or not all(p.isdigit() and len(p) <= 3 for p in parts):
            raise ValueError(f"{text!r} is not MAJOR.MINOR.PATCH")
        major, minor, patch = (int(p) for p in parts)
        if max(major, minor, patch) > 255:
            raise ValueError(f"{text!r}: each part is one byte on the wire (0-255)")
        return cls(major=major, minor=minor, patch=patch)


def parse_rpc_header(text: str) -> ProtoVersion | None:
    """The version ``ggml-rpc.h`` defines; None when it defines none (no RPC backend, or a
    llama.cpp from before the protocol was versioned). A header that defines only some of
    the three, or one twice with different values, is not trusted either (None)."""
    if len(text) > _MAX_HEADER:
        return None
    found: dict[str, int] = {}
    for m in _DEFINE.finditer(text):
        key, value = m.group(1), int(m.group(2))
        if found.get(key, value) != value or value > 255:
            return None
        found[key] = value
    if set(found) != {"MAJOR", "MINOR", "PATCH"}:
        return None
    return ProtoVersion(major=found["MAJOR"], minor=found["MINOR"], patch=found["PATCH"])


@dataclasses.dataclass(frozen=True, kw_only=True)
class SkewVerdict:
    """Can a client of version ``client`` use a server of version ``server``?"""

    client: ProtoVersion
    server: ProtoVersion

    @property
    def ok(self) -> bool:
        return self.server.major == self.client.major and self.server.minor <= self.client.minor

    @property
    def reason(self) -> str:
        c, s = self.client, self.server
        if self.ok:
            older = " (an older minor: the client only uses what it has)" if s.minor < c.minor else ""
            return f"client {c} can use server {s}{older}"
        if s.major != c.major:
            return f"major versions differ (client {c}, server {s}): they refuse each other"
        return (
            f"the server's minor is newer (client {c}, server {s}): upstream's client "
            "refuses a server with a higher minor"
        )

    @property
    def rebuild(self) -> str:
        """Which side to rebuild ('' when nothing needs to be)."""
        if self.ok:
            return ""
        if self.server > self.client:
            return "the client side (its llama.cpp is older than the server's)"
        return "the server (its llama.cpp is older than the client's)"


def judge(client: ProtoVersion, server: ProtoVersion) -> SkewVerdict:
    """Upstream's rule: same major, server minor <= client minor (see the module doc)."""
    return SkewVerdict(client=client, server=server)


def read_rpc_protocol(source_dir: Path) -> ProtoVersion | None:
    """The version in ``source_dir/ggml/include/ggml-rpc.h``; None when there is none, or
    when it is not a regular file of at most 1 MiB (a build could have put a link to a host
    file or a FIFO there: core.fs.read_regular)."""
    try:
        data = read_regular(source_dir / RPC_HEADER, limit=_MAX_HEADER)
    except OSError:
        return None
    return parse_rpc_header(data.decode("utf-8", errors="replace"))
