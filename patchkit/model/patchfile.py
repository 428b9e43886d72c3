"""The one parser of patch files (the ``Key: value`` header and the git diff after it) and
of what ``git apply -v`` says about them (offsets, conflicts by hunk).

A patch file is a header of ``Key: value`` lines, a blank line, free text, then a diff
in ``git diff`` format (``git apply`` skips everything before the first ``diff --git``).
``parse_diff`` reads, per file: its old and new path, its modes (``new file mode``,
``new mode``, ``deleted file mode``, the mode on the ``index`` line), and its hunks.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from patchkit.core.errors import PatchError
from patchkit.core.text import did_you_mean

__all__ = [
    "HEADER_KEYS",
    "SYMLINK_MODE",
    "Conflict",
    "FileDiff",
    "Hunk",
    "Offset",
    "ParsedDiff",
    "parse_apply_output",
    "parse_diff",
    "parse_header",
]

HEADER_KEYS = ("Name", "Subject", "Why", "Upstream-Status", "When", "Default", "Experimental")
SYMLINK_MODE = "120000"

_DIFF = re.compile(r"^diff --git a/(\S+) b/(\S+)$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")
_MODE = re.compile(r"^(new file mode|deleted file mode|new mode|old mode) ([0-7]{6})$")
_INDEX = re.compile(r"^index [0-9a-f]+\.\.[0-9a-f]+(?: ([0-7]{6}))?$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Hunk:
    file: str
    number: int  # 1-based within its file, as git counts
    old_start: int
    new_start: int
    header: str  # the whole "@@ -a,b +c,d @@ ..." line


@dataclasses.dataclass(frozen=True, kw_only=True)
class FileDiff:
    old_path: str
    new_path: str
    old_mode: str | None = None  # None: unchanged / not said
    new_mode: str | None = None  # the file's mode after the patch, when the diff says it
    hunks: tuple[Hunk, ...] = ()
    body: tuple[str, ...] = ()  # the lines after the headers (hunks, binary data)

    @property
    def makes_symlink(self) -> bool:
        return self.new_mode == SYMLINK_MODE


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParsedDiff:
    files: tuple[FileDiff, ...]

    @property
    def targets(self) -> tuple[str, ...]:
        """The paths the patch writes, in order, each once."""
        return tuple(dict.fromkeys(f.new_path for f in self.files))

    @property
    def paths(self) -> tuple[str, ...]:
        """Every path the patch reads or writes, in order, each once."""
        return tuple(dict.fromkeys(p for f in self.files for p in (f.old_path, f.new_path)))

    @property
    def hunks(self) -> tuple[Hunk, ...]:
        return tuple(h for f in self.files for h in f.hunks)


def parse_diff(text: str) -> ParsedDiff:
    """Every ``diff --git`` section of a patch, with its modes and hunks."""
    files: list[FileDiff] = []
    cur: dict[str, object] | None = None
    hunks: list[Hunk] = []
    body: list[str] = []

    def close() -> None:
        if cur is not None:
            files.append(FileDiff(hunks=tuple(hunks), body=tuple(body), **cur))  # type: ignore[arg-type]

    in_headers = False
    for line in text.splitlines():
        m = _DIFF.match(line)
        if m:
            close()
            cur = {"old_path": m.group(1), "new_path": m.group(2)}
            hunks, body, in_headers = [], [], True
            continue
        if cur is None:
            continue
        if in_headers:
            if mm := _MODE.match(line):
                kind, mode = mm.group(1), mm.group(2)
                if kind in ("new file mode", "new mode"):
                    cur["new_mode"] = mode
                else:
                    cur["old_mode"] = mode
                continue
            if mi := _INDEX.match(line):
                if mi.group(1):
                    cur.setdefault("new_mode", mi.group(1))
                    cur.setdefault("old_mode", mi.group(1))
                continue
            if not line.startswith(("@@", "GIT binary patch", "Binary files")):
                continue  # ---/+++, similarity, rename/copy lines
            in_headers = False
        h = _HUNK.match(line)
        if h:
            hunks.append(Hunk(file=str(cur["new_path"]), number=len(hunks) + 1,
                              old_start=int(h.group(1)), new_start=int(h.group(2)),
                              header=line.rstrip()))
        body.append(line)
    close()
    return ParsedDiff(files=tuple(files))


def parse_header(text: str, where: str) -> dict[str, str]:
    """``Key: value`` lines up to the first blank line or diff."""
    header: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith(("diff --git", "---", "From ")):
            break
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep or " " in key:
            break
        if key not in HEADER_KEYS:
            raise PatchError(
                f"{where}: unknown header key {key!r}{did_you_mean(key, HEADER_KEYS)}"
            )
        header[key] = value.strip()
    return header


# -- git apply -v output ------------------------------------------------------------------

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
