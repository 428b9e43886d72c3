"""What went wrong talking to an RPC server, as fields. Each states its facts as its own
one line (``str``), so a record that keeps the error (bench's latency rows, a probe's
detail) keeps those words; the CLI (``patchkit/cli/problems/rpc.py``) adds the advice,
with the options that help."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

from patchkit.core.errors import Problem

__all__ = ["NoRpcProtocol", "RpcTimedOut"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RpcTimedOut(Problem):
    """No TCP connection to ``endpoint`` (``stage`` ``connect``), or no answer to ``what``
    (``exchange``), within the session's ``seconds``."""

    endpoint: str
    seconds: float
    stage: Literal["connect", "exchange"]
    what: str = ""

    def __str__(self) -> str:
        if self.stage == "connect":
            return f"{self.endpoint}: no TCP connection within {self.seconds:g}s"
        return (
            f"{self.endpoint}: no answer to {self.what} within {self.seconds:g}s "
            "(the limit for the whole exchange)"
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class NoRpcProtocol(Problem):
    """The build-info of ``build`` (recipe ``recipe``) records no RPC protocol."""

    build: Path | str
    recipe: str

    def __str__(self) -> str:
        return (
            f"{self.build}: build-info.json records no RPC protocol (not an RPC build, or built "
            "by a patchkit before it recorded one)"
        )
