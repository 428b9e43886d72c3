"""What stops a bench before it runs, as fields (the options by their names: ``build``,
``model``, ``link``, ``rpc``, ``sweep``); the CLI (``patchkit/cli/problems/bench.py``)
says it with the flags."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

from patchkit.core.errors import Problem

__all__ = ["BuildForAnotherOs", "LinkWithoutRpc", "ModelMissing", "SweepRefused"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildForAnotherOs(Problem):
    """The build (the ``build`` option) is a Windows build, and this is not Windows."""

    build_dir: Path


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelMissing(Problem):
    """The model file (the ``model`` option) does not exist."""

    model: Path


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinkWithoutRpc(Problem):
    """A link shape was given (``link``) without an RPC host to shape (``rpc``)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepRefused(Problem):
    """A sweep the bench cannot run (``found``: ``syntax``: ``spec`` is not KEY=VALUE;
    ``no-option``: this llama-bench lacks ``flag``, which the sweep of ``key`` needs)."""

    found: Literal["syntax", "no-option"]
    spec: str = ""
    key: str = ""
    flag: str = ""
