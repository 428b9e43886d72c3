"""One exception base for every user-facing failure, each class with its own exit code.

Only the CLI catches these; everything below it raises and never prints tracebacks
for a user error.

Structured errors: an engine that knows *what* went wrong but should not spell the
command line or the advice raises the error with a :class:`Problem` (a frozen record of
typed fields: the folder, the entry, the owner) instead of words:
``raise ConfigError(problem=ForeignEntry(folder=out, entry=found, owner="build"))``.
The CLI renders it (``patchkit/cli/problems.py``: one renderer per problem type, the
message and the hint); tests assert on the fields, and a few golden tests per command on
the rendered words. Without a renderer (a caller outside the CLI) the message is the
problem's fields, so nothing is ever silent.
"""

from __future__ import annotations

import dataclasses

__all__ = [
    "BuildError",
    "CheckFailed",
    "ConfigError",
    "CudaError",
    "FatalError",
    "LockBusy",
    "PEError",
    "PatchError",
    "Problem",
    "RebuildDiffers",
    "RecipeError",
    "ReleaseError",
    "RpcError",
    "ServerStartError",
    "SmokeError",
    "SourceError",
    "ToolMissing",
]


class Problem:
    """Base of the structured reasons an engine raises (each a frozen, keyword-only
    dataclass): its fields say what went wrong, the CLI says it in words."""

    def __str__(self) -> str:
        fields = ", ".join(f"{f.name}={getattr(self, f.name)!s}" for f in dataclasses.fields(self))  # type: ignore[arg-type]
        return f"{type(self).__name__}({fields})"


class FatalError(Exception):
    """A failure reported to the user as one line (plus optional detail lines)."""

    exit_code: int = 1

    def __init__(
        self, message: str = "", *, detail: str = "", hint: str = "", problem: Problem | None = None
    ) -> None:
        message = message or (str(problem) if problem is not None else "")
        super().__init__(message)
        self.message = message
        self.detail = detail  # extra lines shown under the message (log tail, ...)
        self.hint = hint  # "what to do", shown after the message
        self.problem = problem  # what went wrong, as fields: the CLI renders it

    def __str__(self) -> str:
        return self.message


class ConfigError(FatalError):
    """Bad command-line input or environment that is not a recipe."""

    exit_code = 2


class RecipeError(FatalError):
    exit_code = 3


class SourceError(FatalError):
    exit_code = 4


class PatchError(FatalError):
    exit_code = 5


class BuildError(FatalError):
    exit_code = 6


class SmokeError(FatalError):
    exit_code = 7


class ToolMissing(FatalError):
    exit_code = 8


class LockBusy(FatalError):
    exit_code = 9


class PEError(FatalError):
    exit_code = 10


class CheckFailed(FatalError):
    """`patchkit check` found an in-range patch that no longer applies."""

    exit_code = 11


class ReleaseError(FatalError):
    exit_code = 12


class CudaError(FatalError):
    """The toolkit cannot build what the recipe asks, or the binary lacks a requested arch."""

    exit_code = 13


class RpcError(FatalError):
    """An RPC server could not be reached (refused, unresolvable, no route, timeout) or
    did not speak ggml's RPC protocol."""

    exit_code = 14


class RebuildDiffers(FatalError):
    """`patchkit rebuild` finished, and the rebuilt files are not the release's bytes."""

    exit_code = 15


class ServerStartError(FatalError):
    """A server patchkit starts itself (a loopback ggml-rpc-server, the sccache server) could
    not be started or did not listen in time."""

    exit_code = 16
