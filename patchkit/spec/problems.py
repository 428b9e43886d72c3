"""What is wrong with a file patchkit reads (a recipe looked up, a build-info.json), as
fields. Each states its facts as its own one line (``str``), so a caller that quotes the
error keeps those words; the CLI (``patchkit/cli/problems/spec.py``) adds the advice: the
command that makes or lists the file."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

from patchkit.core.errors import Problem
from patchkit.core.text import did_you_mean

__all__ = ["BuildInfoUnusable", "NoFinishedBuild", "RecipeNotFound"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildInfoUnusable(Problem):
    """A build-info.json this patchkit cannot use (``found``: what is wrong with it, one
    line, its path first); a build makes a new one."""

    found: str

    def __str__(self) -> str:
        return self.found


@dataclasses.dataclass(frozen=True, kw_only=True)
class NoFinishedBuild(Problem):
    """``out_dir`` holds no build-info.json (``exists``: the folder itself is there)."""

    out_dir: Path
    exists: bool

    def __str__(self) -> str:
        what = "holds no build-info.json" if self.exists else "does not exist"
        return f"no finished build: {self.out_dir} {what}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecipeNotFound(Problem):
    """No recipe where ``arg`` points: by a bare name (``by`` ``name``: not in
    ``recipes``, whose recipes are ``known``; ``file_here``: a file of that name is in
    the current folder), or by a path (``by`` ``path``: no such file; ``known`` holds the
    recipe of that file's name when there is one in recipes/)."""

    arg: str
    by: Literal["name", "path"]
    recipes: Path
    known: tuple[str, ...] = ()
    file_here: bool = False

    def __str__(self) -> str:
        if self.by == "path":
            return f"recipe file {self.arg} does not exist"
        return f"no recipe named {self.arg!r} in {self.recipes}" + did_you_mean(self.arg, self.known)
