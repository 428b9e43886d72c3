"""What a file operation of ``core.fs`` refused or failed on, as fields.

Each problem's ``str`` is the one-line statement of the facts (which path, what it is, where
it leads): these errors come from the bottom of every command, and a caller that quotes
one inside its own message (a ``patchkit list`` row, a recipe's error) says the same words
as the CLI. The advice, which flag to pass or what to do (``--out``, ``--clean``), is the
CLI's alone (``patchkit/cli/problems``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

from patchkit.core.errors import Problem

__all__ = ["CopyRefused", "TooLarge", "WriteFailed", "WriteRefused", "human_size"]


def human_size(n: int) -> str:
    """``1536`` -> ``1.5 KiB`` (3 significant digits), as the file errors say a size."""
    for unit, mult in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult:
            return f"{n / mult:.3g} {unit}"
    return f"{n} bytes"


@dataclasses.dataclass(frozen=True, kw_only=True)
class WriteRefused(Problem):
    """A path patchkit will not write. ``found``: ``special`` (it is ``kind``: a folder, a
    block device, a socket, or a file swapped since it was looked at), ``not-replaceable``
    (it is ``kind``, and the writer needs a temp file renamed over it), ``dangling-link`` (a
    symlink to ``link``, which does not exist), ``no-folder`` (``parent``, the nearest
    existing one, is not a folder), ``no-reader`` (a FIFO that no process reads)."""

    path: Path
    found: Literal["special", "not-replaceable", "dangling-link", "no-folder", "no-reader"]
    kind: str = ""
    link: str = ""
    parent: Path | None = None

    def __str__(self) -> str:
        if self.found == "special":
            return f"{self.path} is {self.kind}: refusing to write to it"
        if self.found == "not-replaceable":
            return f"{self.path} is {self.kind}: refusing to replace it"
        if self.found == "dangling-link":
            return (
                f"{self.path} is a symlink to {self.link}, which does not exist: refusing to write through it"
            )
        if self.found == "no-folder":
            return f"cannot write {self.path}: {self.parent} is not a folder"
        return f"{self.path} is a FIFO that no process reads: refusing to wait for one"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CopyRefused(Problem):
    """A file patchkit will not copy out of a build, worktree or output folder. ``found``:
    ``outside`` (``path`` resolves to ``real``, outside ``root``: a link leaves the folder it
    belongs to), ``not-plain`` (not a regular file). ``what``: what the file is, said first."""

    path: Path
    found: Literal["outside", "not-plain"]
    real: Path | None = None
    root: Path | None = None
    what: str = ""

    def __str__(self) -> str:
        if self.found == "not-plain":
            return f"{self.path} is not a regular file: refusing to copy it"
        where = f"{self.what}: " if self.what else ""
        return f"{where}{self.path} resolves to {self.real}, outside {self.root}: refusing to copy it"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TooLarge(Problem):
    """A file larger than any patchkit writes or reads there: ``label`` (the file, as the
    caller names it) is over ``limit`` bytes."""

    label: str
    limit: int

    def __str__(self) -> str:
        return f"{self.label} is larger than {human_size(self.limit)}: not a file patchkit wrote or reads"


@dataclasses.dataclass(frozen=True, kw_only=True)
class WriteFailed(Problem):
    """Writing ``dest`` into ``folder`` (the folder the user named, e.g. ``--out``) failed.
    ``found``: ``full`` (no space on its file system, mounted at ``mount``, ``free`` bytes
    free or None when unknown), ``too-large`` (the file system or a file size limit refuses
    a file that size), ``refused`` (``reason``: permissions, a read-only file system...)."""

    dest: Path
    folder: Path
    found: Literal["full", "too-large", "refused"]
    reason: str = ""
    mount: Path | None = None
    free: int | None = None

    def __str__(self) -> str:
        free = "free space unknown" if self.free is None else f"{human_size(self.free)} free"
        if self.found == "too-large":
            return (
                f"{self.dest} is too large for {self.folder}: its file system (mounted at {self.mount}, "
                f"{free}) or a file size limit (ulimit -f) refuses it"
            )
        if self.found == "full":
            return (
                f"no space left on the file system of {self.folder} (mounted at {self.mount}, "
                f"{free}) while writing {self.dest}"
            )
        return f"cannot write {self.dest}: {self.reason}"
