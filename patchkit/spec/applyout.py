"""What ``git apply -v`` says about a patch: the offsets its hunks applied at, and its
conflicts by file and hunk (the hunks are :mod:`patchkit.spec.patchfile`'s)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from patchkit.core.record import Record

if TYPE_CHECKING:
    from patchkit.spec.patchfile import Hunk

__all__ = ["Conflict", "Offset", "parse_apply_output"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Offset:
    file: str
    hunk: int
    lines: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class Conflict(Record):
    file: str  # the file, as the patch names it
    hunk: int | None  # None: the whole file (missing, already exists, ...)
    header: str  # the hunk's @@ line ("" for a whole file)
    reason: str  # what git apply said

    @property
    def where(self) -> str:
        return f"{self.file}:{self.hunk}" if self.hunk is not None else f"{self.file} ({self.reason})"


_CHECKING = re.compile(r"^Checking patch (.+)\.\.\.$")
_SUCCEEDED = re.compile(r"^Hunk #(\d+) succeeded at (\d+)(?: \(offset (-?\d+) lines?\))?")
_FAILED = re.compile(r"^error: patch failed: (.+):(\d+)$")
_FILE_ERR = re.compile(
    r"^error: (.+?): (No such file or directory|already exists in working "
    r"directory|does not exist in index|does not match index|"
    r"patch does not apply|.+)$"
)


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
            hunk = next(
                (h for h in hunks if h.file == file and h.old_start == pos and (file, h.number) not in used),
                None,
            )
            if hunk is not None:
                used.add((file, hunk.number))
                conflicts.append(
                    Conflict(file=file, hunk=hunk.number, header=hunk.header, reason="context does not match")
                )
            else:
                conflicts.append(
                    Conflict(file=file, hunk=None, header=f"line {pos}", reason="context does not match")
                )
            continue
        if line.startswith("error: ") and (m := _FILE_ERR.match(line)):
            file, reason = m.group(1), m.group(2)
            if reason == "patch does not apply" and any(c.file == file for c in conflicts):
                continue
            if reason == "patch does not apply":
                reason = "does not apply"
            conflicts.append(Conflict(file=file, hunk=None, header="", reason=reason))
    return offsets, conflicts
