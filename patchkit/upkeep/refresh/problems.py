"""Why a refresh refuses to start, go on or abort, as records (the words and the next steps
are the CLI's: ``patchkit/cli/problems/refresh.py``). A stop where a person is needed is
:class:`~patchkit.upkeep.refresh.options.RefreshStop`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from patchkit.core.errors import Problem

__all__ = [
    "DropAloneLater",
    "DropRefreshedAlready",
    "ForeignInWorkdir",
    "MarkersLeft",
    "NoRefreshHere",
    "NotStaged",
    "RefreshBusy",
    "RefreshInProgress",
    "RefreshJustFinished",
    "ResolutionRefused",
    "SourceChanged",
    "StateUnusable",
    "StillUnmerged",
    "TreeMoved",
    "WorkdirNotEmpty",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RefreshJustFinished(Problem):
    """The refresh that held the folder's lock finished (and removed it) meanwhile."""

    workdir: Path


@dataclasses.dataclass(frozen=True, kw_only=True)
class RefreshBusy(Problem):
    """Another refresh holds the folder's lock."""

    workdir: Path


@dataclasses.dataclass(frozen=True, kw_only=True)
class RefreshInProgress(Problem):
    """A refresh is in progress there already: a new one cannot start."""

    workdir: Path


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkdirNotEmpty(Problem):
    workdir: Path


@dataclasses.dataclass(frozen=True, kw_only=True)
class DropAloneLater(Problem):
    """``--drop NAME`` alone names a patch after the stopped one (``current``)."""

    current: str
    name: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class DropRefreshedAlready(Problem):
    """``--drop`` names a patch (``file``, named ``name``) before the stopped one."""

    file: str
    name: str
    current: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class StillUnmerged(Problem):
    patch: str
    files: tuple[str, ...]
    tree: Path


@dataclasses.dataclass(frozen=True, kw_only=True)
class NotStaged(Problem):
    patch: str
    files: tuple[str, ...]
    tree: Path


@dataclasses.dataclass(frozen=True, kw_only=True)
class MarkersLeft(Problem):
    patch: str
    file: str
    tree: Path


@dataclasses.dataclass(frozen=True, kw_only=True)
class TreeMoved(Problem):
    """The scratch tree moved since the refresh stopped at ``patch``."""

    workdir: Path
    patch: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResolutionRefused(Problem):
    """What the person staged would be refused as a patch (``refusal``: the first reason,
    ``more``: how many others)."""

    patch: str
    refusal: str
    more: int
    tree: Path


@dataclasses.dataclass(frozen=True, kw_only=True)
class ForeignInWorkdir(Problem):
    """The work folder holds ``name``, which a refresh did not write: --abort leaves it."""

    workdir: Path
    name: str
    link: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class StateUnusable(Problem):
    """refresh-state.json (``path``) cannot be used: ``why``."""

    path: Path
    workdir: Path
    why: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class NoRefreshHere(Problem):
    workdir: Path


@dataclasses.dataclass(frozen=True, kw_only=True)
class SourceChanged(Problem):
    """A patch file of the series changed since the refresh started."""

    path: Path
    workdir: Path
