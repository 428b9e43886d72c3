"""What went wrong finding a repository, a ref or a commit, as fields. Each states its
facts as its own one line (``str``); the CLI (``patchkit/cli/problems/git.py``) adds the
advice, with the options that point elsewhere (by the option's name here: ``repo``,
``upstream``, ``range``)."""

from __future__ import annotations

import dataclasses
from typing import Literal

from patchkit.core.errors import Problem

__all__ = ["BadRange", "NotARepository", "UnknownRef", "UpstreamMissing"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class BadRange(Problem):
    """A commit range (the ``range`` option) that is not OLD..NEW."""

    text: str

    def __str__(self) -> str:
        return f"range {self.text!r} must be OLD..NEW (two commits or refs)"


@dataclasses.dataclass(frozen=True, kw_only=True)
class NotARepository(Problem):
    """``shown`` (a path, or a URL with its credentials masked), given by the ``option``
    option, is not a git repository (``found``: ``missing``: nothing there; ``not-git``)."""

    shown: str
    option: Literal["repo", "upstream"]
    found: Literal["missing", "not-git"]

    def __str__(self) -> str:
        if self.found == "missing":
            return f"upstream path {self.shown} does not exist"
        return f"{self.shown} is not a git repository"


@dataclasses.dataclass(frozen=True, kw_only=True)
class UnknownRef(Problem):
    """``ref`` names no commit, branch or tag in ``repo``."""

    ref: str
    repo: str

    def __str__(self) -> str:
        return f"unknown ref {self.ref!r} in {self.repo}: no such commit, branch or tag"


@dataclasses.dataclass(frozen=True, kw_only=True)
class UpstreamMissing(Problem):
    """The upstream could not be cloned (``stage`` ``clone``: git's own line is ``said``),
    or does not have the pinned commit (``commit``: ``said`` is the whole line)."""

    stage: Literal["clone", "commit"]
    said: str

    def __str__(self) -> str:
        return self.said
