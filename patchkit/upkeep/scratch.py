"""Does a patch series apply to a set of files? ``git apply`` in a scratch folder.

The scratch folder holds only the files the series touches, written from blobs
(no checkout, no index, nothing written into the repository). Patches are
applied one after the other, so patch N is checked on top of patches 1..N-1.
This module also parses ``git apply -v`` output into offsets and conflicts.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

from patchkit.core.enums import StrEnum
from patchkit.git.repo import TreeEntry
from patchkit.model.patchfile import Hunk
from patchkit.git.runner import run_git, scratch_env

__all__ = [
    "Conflict",
    "Offset",
    "PatchVerdict",
    "Scratch",
    "Status",
    "parse_apply_output",
]


class Status(StrEnum):
    APPLIES = "applies"
    OFFSET = "applies-with-offset"
    CONFLICTS = "conflicts"
    UPSTREAM = "already-upstream"
    NA = "n/a"

    @property
    def applies(self) -> bool:
        return self in (Status.APPLIES, Status.OFFSET)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Offset:
    file: str
    hunk: int
    lines: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class Conflict:
    file: str
    hunk: int | None  # None: the whole file (missing, already exists, ...)
    header: str
    reason: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.hunk}" if self.hunk is not None else f"{self.file} ({self.reason})"

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "hunk": self.hunk, "header": self.header, "reason": self.reason}


@dataclasses.dataclass(frozen=True, kw_only=True)
class PatchVerdict:
    patch: str
    status: Status
    offsets: tuple[Offset, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    note: str = ""  # e.g. which earlier patches were left out because they failed

    @property
    def label(self) -> str:
        if self.status is Status.CONFLICTS and self.conflicts:
            return f"conflicts ({', '.join(c.where for c in self.conflicts)})"
        if self.status is Status.OFFSET:
            return "applies-with-offset (" + ", ".join(
                f"{o.file}:{o.hunk} {o.lines:+d}" for o in self.offsets) + ")"
        return self.status.value

    def to_json(self) -> dict[str, object]:
        return {
            "patch": self.patch,
            "status": self.status.value,
            "offsets": [{"file": o.file, "hunk": o.hunk, "lines": o.lines} for o in self.offsets],
            "conflicts": [c.to_json() for c in self.conflicts],
            "note": self.note,
        }


_CHECKING = re.compile(r"^Checking patch (.+)\.\.\.$")
_SUCCEEDED = re.compile(r"^Hunk #(\d+) succeeded at (\d+)(?: \(offset (-?\d+) lines?\))?")
_FAILED = re.compile(r"^error: patch failed: (.+):(\d+)$")
_FILE_ERR = re.compile(r"^error: (.+?): (No such file or directory|already exists in working "
                       r"directory|does not exist in index|does not match index|"
                       r"patch does not apply|.+)$")


def parse_apply_output(out: str, hunks: Sequence[Hunk]) -> tuple[list[Offset], list[Conflict]]:
    """Offsets and conflicts from ``git apply -v`` (forward) output."""
    offsets: list[Offset] = []
    conflicts: list[Conflict] = []
    current = ""
    searching = False
    used: set[tuple[str, int]] = set()
    for line in out.splitlines():
        if searching:
            if not line.startswith("error: patch failed:"):
                continue
            searching = False
        if m := _CHECKING.match(line):
            current = m.group(1)
            continue
        if line.startswith("error: while searching for:"):
            searching = True
            continue
        if m := _SUCCEEDED.match(line):
            if m.group(3) and int(m.group(3)) != 0:
                offsets.append(Offset(file=current, hunk=int(m.group(1)), lines=int(m.group(3))))
            continue
        if m := _FAILED.match(line):
            file, pos = m.group(1), int(m.group(2))
            hunk = next((h for h in hunks if h.file == file and h.old_start == pos
                         and (file, h.number) not in used), None)
            if hunk is not None:
                used.add((file, hunk.number))
                conflicts.append(Conflict(file=file, hunk=hunk.number, header=hunk.header,
                                          reason="context does not match"))
            else:
                conflicts.append(Conflict(file=file, hunk=None, header=f"line {pos}",
                                          reason="context does not match"))
            continue
        if line.startswith("error: ") and (m := _FILE_ERR.match(line)):
            file, reason = m.group(1), m.group(2)
            if reason == "patch does not apply" and any(c.file == file for c in conflicts):
                continue
            if reason == "patch does not apply":
                reason = "does not apply"
            conflicts.append(Conflict(file=file, hunk=None, header="", reason=reason))
    return offsets, conflicts


class Scratch:
    """A private temp folder: ``tree/`` holds the files, ``patches/`` the patch bytes."""

    def __init__(self, patches: Sequence[tuple[str, bytes]]) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="patchkit-check-"))
        self.tree = self.root / "tree"
        pdir = self.root / "patches"
        pdir.mkdir()
        self.patch_files: dict[str, Path] = {}
        for i, (name, data) in enumerate(patches):
            f = pdir / f"{i:04d}.patch"
            f.write_bytes(data)
            self.patch_files[name] = f
        # never let git discover a repository above the scratch folder
        self.env = scratch_env(self.root)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Scratch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def load(self, entries: dict[str, TreeEntry], blobs: dict[str, bytes]) -> None:
        """Make ``tree/`` hold exactly these files."""
        if self.tree.exists():
            shutil.rmtree(self.tree)
        self.tree.mkdir()
        for path, entry in entries.items():
            if entry.mode == "160000":  # a submodule: nothing to write
                continue
            target = self.tree / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(blobs[entry.oid])
            if entry.mode == "100755" and os.name != "nt":
                target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)

    def apply(self, name: str, *, check: bool = False, reverse: bool = False,
              reject: bool = False) -> tuple[bool, str]:
        args = ["apply", "-v", "--whitespace=nowarn"]
        if check:
            args.append("--check")
        if reverse:
            args.append("-R")
        if reject:
            args.append("--reject")
        args.append(str(self.patch_files[name]))
        r = run_git(self.tree, *args, check=False, env=self.env)
        out = r.stdout + r.stderr
        failed = not r.ok or any(ln.startswith("error: ") for ln in out.splitlines())
        return not failed, out
