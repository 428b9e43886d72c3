"""The one parser of patch files: the ``Key: value`` header and the git diff after it.

A patch file is a header of ``Key: value`` lines, a blank line, free text, then a diff
in ``git diff`` format (``git apply`` skips everything before the first ``diff --git``).
``parse_diff`` reads, per file: its old and new path, its modes (``new file mode``,
``new mode``, ``deleted file mode``, the mode on the ``index`` line), and its hunks.
"""

from __future__ import annotations

import dataclasses
import re

from patchkit.core.errors import PatchError
from patchkit.core.text import did_you_mean

__all__ = [
    "HEADER_KEYS",
    "SYMLINK_MODE",
    "FileDiff",
    "Hunk",
    "ParsedDiff",
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
