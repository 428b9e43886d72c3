"""What stops a rebuild, as fields: the CLI says it in words (``patchkit/cli/problems/rebuild.py``),
and names the commands and options that help."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

from patchkit.core.errors import Problem

__all__ = [
    "CacheNotAFolder",
    "NoCarriedSources",
    "NotAReleaseArchive",
    "ReleaseNotVerified",
    "SandboxRefuses",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReleaseNotVerified(Problem):
    """The release folder ``target`` does not verify: ``differences`` files differ."""

    target: Path
    differences: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class NotAReleaseArchive(Problem):
    """An archive is not what patchkit's release writes. ``found`` states what is wrong, in
    one line of facts (the archive's name first); ``against``: what it was checked against
    (``format``: how a release archive is made; ``files``: the manifest's files list, which
    the release folder's verify checks; ``members``: its members against its manifest)."""

    found: str
    against: Literal["format", "files", "members"] = "format"

    def __str__(self) -> str:  # the facts are the message; the CLI adds the advice
        return self.found


@dataclasses.dataclass(frozen=True, kw_only=True)
class NoCarriedSources(Problem):
    """The archive ``archive`` carries no recipe and patches to rebuild from."""

    archive: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class SandboxRefuses(Problem):
    """What was asked cannot be done in the rebuild's sandbox (``asked``: ``sccache``: the
    launcher, from ``launcher_from``; ``smoke``: running the rebuilt binaries)."""

    asked: Literal["sccache", "smoke"]
    launcher_from: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class CacheNotAFolder(Problem):
    """The compile cache folder given (the ``cache`` option) is a link or not a folder."""

    given: Path
