"""What went wrong in a build, as fields: the CLI says it in words (``patchkit/cli/problems/``).

Each type is one kind of failure, raised from every place that finds it; the fields are
the facts (folders, what was found there, which option gave a value: by its name, never
as the command line spells it). The advice, which flag to pass or which command to run,
is the CLI's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

from patchkit.core.errors import Problem

__all__ = [
    "BuildDirStale",
    "CacheSettingsClash",
    "CudaArchsUnbuildable",
    "LauncherMissing",
    "NoCudaToolkit",
    "OutDirBusy",
    "OutDirClash",
    "OutDirRefused",
    "ProgramMissing",
    "RootDamaged",
    "RootNeedsPrivilege",
    "RootNotPrepared",
    "RootPlantedLink",
    "RootUnknown",
    "SandboxUnavailable",
    "SccacheDidNotStart",
    "WorktreeNotOurs",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildDirStale(Problem):
    """The build dir CMake left cannot be used as it is; a fresh one would be.

    ``found``: ``unusable`` (CMake refuses the folder: ``cause``), ``no-reply`` (no File
    API reply in ``reply``), ``unreadable-reply`` (``reply`` cannot be read: ``cause``),
    ``no-codemodel`` (the reply has no codemodel)."""

    build_dir: Path
    found: Literal["unusable", "no-reply", "unreadable-reply", "no-codemodel"]
    reply: Path | None = None
    cause: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorktreeNotOurs(Problem):
    """The source worktree holds something patchkit did not put there (``found``:
    ``foreign``: not the worktree patchkit made; ``broken``: git cannot read it;
    ``commits``: commits on top, the newest ``subject``; ``changes``: edited files)."""

    worktree: Path
    found: Literal["foreign", "broken", "commits", "changes"]
    subject: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class OutDirRefused(Problem):
    """The output folder exists and is not provably a patchkit output (``found``:
    ``not-a-folder``, ``unlistable`` (``cause``), ``no-record`` (no build-info.json; it
    holds ``entry``), ``bad-json``, ``bad-record`` (``cause``))."""

    folder: Path
    found: Literal["not-a-folder", "unlistable", "no-record", "bad-json", "bad-record"]
    entry: str = ""
    cause: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class OutDirClash(Problem):
    """The output folder (the ``out`` option) is inside patchkit's cache, or holds it."""

    out: Path
    cache: Path
    holds_cache: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class OutDirBusy(Problem):
    """The finished output could not replace the folder (``cause``: the OS's words); the
    previous output is kept in ``kept`` when it could not be put back."""

    out: Path
    cause: str
    kept: Path | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class RootUnknown(Problem):
    """No build root of that name; ``known`` are the names patchkit knows."""

    name: str
    known: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RootNotPrepared(Problem):
    """The build root ``name`` is not prepared in the cache."""

    name: str
    cache: Path


@dataclasses.dataclass(frozen=True, kw_only=True)
class RootNeedsPrivilege(Problem):
    """Preparing the build root ``name`` needs root (debootstrap makes device nodes)."""

    name: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class RootPlantedLink(Problem):
    """``link``, where the root ``name`` is prepared, is a symbolic link."""

    link: Path
    name: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class RootDamaged(Problem):
    """A prepared build root is not what preparing makes (``found``: ``no-libc``: no libc6
    in its dpkg status; ``mount-link``: a link at ``at``, where ``mount`` is mounted)."""

    tree: Path
    found: Literal["no-libc", "mount-link"]
    at: Path | None = None
    mount: Path | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class CudaArchsUnbuildable(Problem):
    """The toolkit cannot compile every requested arch. The facts: the toolkit
    (``toolkit``, described), the archs it lacks (``missing``) and why (``why``), those
    asked for (``wanted``), the releases that compile them all (``toolkits``), their host
    compiler limits (``host_limits``), and what the recipe could drop instead
    (``droppable``: families, else sm_NN)."""

    toolkit: str
    missing: str
    why: str
    wanted: str
    toolkits: str
    host_limits: str
    droppable: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class NoCudaToolkit(Problem):
    """No nvcc on PATH and no toolkit folder named by an option, the recipe or the
    environment."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class CacheSettingsClash(Problem):
    """The compile-cache settings contradict each other (``clash``: ``dist-needs-sccache``:
    distributed compilation asked (by ``where``) with ``launcher`` from
    ``launcher_from``; ``remote-without-launcher``: a remote from ``remote_from`` with
    launcher none; ``ccache-cannot-store``: ccache and a ``scheme`` remote it cannot
    store to (``remote``, redacted)). The ``*_from`` fields name where a value came from."""

    clash: Literal["dist-needs-sccache", "remote-without-launcher", "ccache-cannot-store"]
    where: str = ""
    launcher: str = ""
    launcher_from: str = ""
    remote_from: str = ""
    remote: str = ""
    scheme: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class LauncherMissing(Problem):
    """The compiler launcher asked for (by ``asked_by``) is not installed (``launcher``:
    ``ccache``, ``sccache``, or ``any``: a remote cache needs one, and neither is here)."""

    launcher: Literal["ccache", "sccache", "any"]
    asked_by: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class SccacheDidNotStart(Problem):
    """sccache's server did not start (``why``: its words, secrets redacted)."""

    why: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class SandboxUnavailable(Problem):
    """The rebuild's sandbox cannot run here (``found``: ``no-bwrap``; ``cannot-start``:
    bwrap ends with ``why``; ``leaky``: the probe inside ``bwrap`` found ``why``)."""

    found: Literal["no-bwrap", "cannot-start", "leaky"]
    bwrap: str = ""
    why: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProgramMissing(Problem):
    """A program a build runs is not installed (``program``: cmake, ninja, cuobjdump,
    debootstrap, bwrap); ``found`` states the facts, one line (which version is needed,
    what for). How to install it is the CLI's to say."""

    program: str
    found: str

    def __str__(self) -> str:
        return self.found
