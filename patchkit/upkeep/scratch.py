"""Does a patch series apply to a set of files? ``git apply`` in a scratch folder.

The scratch folder holds only the files the series touches, written from blobs
(no checkout, no index, nothing written into the repository). Patches are
applied one after the other, so patch N is checked on top of patches 1..N-1.
``git apply -v``'s output is read by spec.patchfile.parse_apply_output.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

from patchkit.core.enums import StrEnum
from patchkit.git.repo import TreeEntry
from patchkit.git.runner import run_git, scratch_env
from patchkit.spec.patchfile import Conflict, Offset

__all__ = [
    "PatchVerdict",
    "Scratch",
    "Status",
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
            return (
                "applies-with-offset ("
                + ", ".join(f"{o.file}:{o.hunk} {o.lines:+d}" for o in self.offsets)
                + ")"
            )
        return str(self.status.value)

    def to_json(self) -> dict[str, object]:
        return {
            "patch": self.patch,
            "status": self.status.value,
            "offsets": [{"file": o.file, "hunk": o.hunk, "lines": o.lines} for o in self.offsets],
            "conflicts": [c.to_json() for c in self.conflicts],
            "note": self.note,
        }


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

    def apply(
        self, name: str, *, check: bool = False, reverse: bool = False, reject: bool = False
    ) -> tuple[bool, str]:
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
