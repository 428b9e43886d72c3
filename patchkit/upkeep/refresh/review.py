"""Clean merges to review: a 3-way merge without conflicts can still keep code upstream's
change made wrong (a call to a function upstream renamed or gave another signature, a
hunk placed beside lines upstream rewrote in the same function). Found before the build
does, per patch, as ``merged cleanly, review``:

- ``nearby``: a hunk of the patch sits in the same function (git's hunk-header context)
  as lines upstream changed or removed in ``old..new`` (lines it only added leave the
  patch's as they were), within :data:`NEAR` lines of them;
- ``inside``: upstream changed, removed or added lines among a hunk's own lines or right
  next to them (git merges that cleanly when one unchanged line is left between the two
  changes), in any kind of file (a CMake property list, a Python call);
- ``api``: a line the patch adds calls a function one of whose declarations in a header
  upstream changed in ``old..new`` is gone (other parameters, or renamed or removed).

:class:`Upstream` reads upstream's side once per refresh run (the diff of each file, the
changed headers' declarations) and keeps it for the next patch.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Sequence

from patchkit.core.errors import SourceError
from patchkit.git.repo import Git
from patchkit.spec.patchfile import Hunk, parse_diff
from patchkit.upkeep.conflict import find_run, last_touched

__all__ = ["NEAR", "Finding", "Upstream", "review_patch"]

NEAR = 12  # lines between a patch's hunk and upstream's change that count as "beside"
_HEADERS = ("*.h", "*.hpp", "*.hh", "*.cuh", "*.inc")
_MAX_HEADERS = 400  # changed headers read for declarations
_CALL = re.compile(r"(?<![\w$])([A-Za-z_]\w*)\s*\(")
_NOT_CALLS = frozenset(
    [
        "if",
        "for",
        "while",
        "switch",
        "return",
        "sizeof",
        "alignof",
        "decltype",
        "defined",
        "static_assert",
        "catch",
        "new",
        "delete",
        "case",
        "do",
        "else",
        "typeof",
        "__attribute__",
        "assert",
    ]
)
_TYPE_END = re.compile(r"(?:[\w>]|[*&])\s*$")
_NOT_TYPES = frozenset(["return", "else", "new", "delete", "case", "throw", "co_return", "goto"])


@dataclasses.dataclass(frozen=True, kw_only=True)
class Finding:
    kind: str  # "nearby" | "inside" | "api"
    path: str  # the patched file
    text: str  # what to say
    name: str = ""  # "api": the function called


def _is_function(line: str) -> bool:
    """A hunk header's context line that opens a function (not a struct, an enum, a
    table, ``extern "C"``)."""
    head = line.split("(", 1)[0]
    return (
        "(" in line
        and "=" not in head
        and not re.match(r"\s*(struct|enum|class|union|extern|namespace|if|for|while)\b", line)
    )


def _hunk_function(h: Hunk) -> str:
    """The function a hunk's first change is in: the last line of its leading context that
    opens one (as git's default function-name pattern sees it: a line starting with a
    letter, ``_`` or ``$``), else its header's context."""
    found = ""
    for line in h.lines:
        if line[:1] != " ":
            break
        text = line[1:]
        if text[:1].isalpha() or text[:1] in "_$":
            found = text.rstrip()
    return found or _funcline(h)


def _funcline(h: Hunk) -> str:
    parts = h.header.split("@@", 2)
    return parts[2].strip() if len(parts) == 3 else ""


def _split_params(params: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in params:
        if ch in "(<[{":
            depth += 1
        elif ch in ")>]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _is_param_list(params: str) -> bool:
    """Parameters as a declaration has them (``int x``, ``const T & y``, ``void``, none),
    not arguments (``x, 1``)."""
    parts = _split_params(params)
    return all(
        p == "void" or p == "..." or len(re.findall(r"\w+", p.split("=")[0])) >= 2 or "*" in p or "&" in p
        for p in parts
    )


def _declarations(text: str, name: str) -> set[str]:
    """The declarations of ``name`` in a header's ``text``, each as its parameter list
    (whitespace normalized), one per overload: a type before the name on its line, no
    comment, parameters (not arguments) in the parentheses."""
    found: set[str] = set()
    for m in re.finditer(rf"(?<![\w.>:$]){re.escape(name)}\s*\(", text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        before = text[line_start : m.start()]
        if (
            not _TYPE_END.search(before)
            or any(c in before for c in "=(/#\"'")
            or before.lstrip().startswith("*")
        ):
            continue
        words = re.findall(r"\w+", before)
        if not words or words[-1] in _NOT_TYPES:
            continue
        depth, k = 0, m.end() - 1
        while k < len(text):
            if text[k] == "(":
                depth += 1
            elif text[k] == ")":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        if depth:
            continue
        params = " ".join(re.sub(r"//[^\n]*", "", text[m.end() : k]).split())
        after = text[k + 1 : k + 40].lstrip()
        if not _is_param_list(params) or not re.match(
            r"(;|\{|const\b|override\b|noexcept\b|=\s*0|->|final\b)", after
        ):
            continue
        found.add(params)
    return found


class Upstream:
    """Upstream's change in ``old..new``, read as the patches need it."""

    def __init__(self, git: Git, old: str, new: str) -> None:
        self.git, self.old, self.new = git, old, new
        self._hunks: dict[str, list[Hunk]] = {}
        self._old_text: dict[str, list[str]] = {}
        self._headers: list[str] | None = None
        self._blobs: dict[tuple[str, str], str | None] = {}
        self._decl: dict[str, list[tuple[str, set[str], set[str]]]] = {}

    def hunks(self, path: str) -> list[Hunk]:
        if path not in self._hunks:
            try:
                diff = self.git.run(
                    "diff",
                    "--no-color",
                    "--no-ext-diff",
                    "--no-renames",
                    "-U0",
                    self.old,
                    self.new,
                    "--",
                    path,
                )
            except SourceError:
                diff = ""
            self._hunks[path] = [h for f in parse_diff(diff).files for h in f.hunks]
        return self._hunks[path]

    def _blob(self, commit: str, path: str) -> str | None:
        key = (commit, path)
        if key not in self._blobs:
            try:
                self._blobs[key] = self.git.run("cat-file", "blob", f"{commit}:{path}")
            except SourceError:
                self._blobs[key] = None
        return self._blobs[key]

    def headers(self) -> list[str]:
        if self._headers is None:
            try:
                out = self.git.run("diff", "--no-renames", "--name-only", self.old, self.new, "--", *_HEADERS)
            except SourceError:
                out = ""
            self._headers = [p for p in out.splitlines() if p][:_MAX_HEADERS]
        return self._headers

    def headers_of(self, path: str) -> list[str]:
        """The changed headers ``path`` can see: those in its folder, and those its
        ``#include`` lines name (by file name)."""
        text = self._blob(self.new, path) or self._blob(self.old, path) or ""
        included = {
            posixpath.basename(m)
            for m in re.findall(r'^\s*#\s*(?:include|import)\s*[<"]([^>"]+)[>"]', text, re.M)
        }
        folder = posixpath.dirname(path)
        return [
            h for h in self.headers() if posixpath.dirname(h) == folder or posixpath.basename(h) in included
        ]

    def changed_declarations(self, name: str, path: str) -> list[tuple[str, set[str], set[str]]]:
        """(header, declarations at old, at new) of the headers ``path`` sees where one of
        ``name``'s declarations is gone (and, when none is left, it is declared in none
        of them any more)."""
        key = f"{path}\0{name}"
        if key not in self._decl:
            found: list[tuple[str, set[str], set[str]]] = []
            seen = self.headers_of(path)
            for h in seen:
                old_text, new_text = self._blob(self.old, h) or "", self._blob(self.new, h) or ""
                if name not in old_text:
                    continue
                before, after = _declarations(old_text, name), _declarations(new_text, name)
                if before - after:
                    found.append((h, before, after))
            if (
                found
                and not any(after for _, _, after in found)
                and any(_declarations(self._blob(self.new, h) or "", name) for h in seen)
            ):
                found = []  # declared in another header now: moved, not gone
            self._decl[key] = found
        return self._decl[key]

    def old_lines(self, path: str) -> list[str]:
        if path not in self._old_text:
            self._old_text[path] = (self._blob(self.old, path) or "").splitlines()
        return self._old_text[path]


def _commit_of(up: Upstream, path: str, h: Hunk) -> str:
    if h.new_count <= 0:
        return ""
    c = last_touched(up.git, up.old, up.new, path, h.new_start, h.new_count)
    return f" (upstream {c[0].commit.short} {c[0].commit.subject[:80]})" if c else ""


def _inside(h: Hunk, at: int, u: Hunk) -> bool:
    """Whether upstream's hunk ``u`` (old..new, no context) changed, removed or added lines
    among the lines of the patch's hunk ``h`` (at line ``at`` of the old file) or right
    next to them (what a 3-way merge takes cleanly beside the patch's change)."""
    first, last = at - 1, at + h.old_count  # the lines just outside it too
    if u.old_count == 0:  # lines added after old line u.old_start
        return first <= u.old_start <= last
    return u.old_start <= last and u.old_start + u.old_count - 1 >= first


def _inside_finding(
    up: Upstream, path: str, h: Hunk, old_lines: list[str], theirs: Sequence[Hunk]
) -> Finding | None:
    """The ``inside`` finding of hunk ``h`` (placed by its whole old image), if any."""
    exact = find_run(old_lines, list(h.before)) if h.before else []
    u_in = next((u for u in theirs if exact and _inside(h, exact[0] + 1, u)), None)
    if u_in is None:
        return None
    return Finding(
        kind="inside",
        path=path,
        text=f"{path}: the hunk `{h.header.split('@@')[1].strip()}` merged with upstream's change "
        f"among or right next to its lines{_commit_of(up, path, u_in)}",
    )


def review_patch(up: Upstream, diff: str) -> list[Finding]:
    """What of ``diff`` (a patch that merged cleanly, as made on the old base) to review."""
    out: list[Finding] = []
    called: dict[str, str] = {}
    flagged: set[tuple[str, str]] = set()  # (file, function): said once
    for f in parse_diff(diff).files:
        path = f.new_path
        if f.old_path != f.new_path or not f.hunks:
            continue
        theirs = up.hunks(path)
        old_lines = up.old_lines(path)
        for h in f.hunks:
            for line in h.lines:
                if line.startswith("+"):
                    for m in _CALL.finditer(line[1:]):
                        if m.group(1) not in _NOT_CALLS:
                            called.setdefault(m.group(1), path)
            fl = _hunk_function(h)
            if not theirs or (path, fl) in flagged:
                continue
            if not _is_function(fl):
                inside = _inside_finding(up, path, h, old_lines, theirs)
                if inside is not None:
                    out.append(inside)
                continue
            ctx = [ln for ln in h.before if ln.strip()][:3]
            hits = find_run(old_lines, ctx) if ctx else []
            at = hits[0] + 1 if hits else None
            for u in theirs:
                if u.old_count == 0 or _funcline(u) != fl:  # lines upstream only added leave the patch's be
                    continue
                if at is not None and not (
                    u.old_start - NEAR <= at + h.old_count and at - NEAR <= u.old_start + u.old_count
                ):
                    continue
                out.append(
                    Finding(
                        kind="nearby",
                        path=path,
                        text=f"{path}: the hunk `{h.header.split('@@')[1].strip()}` merged beside lines "
                        f"upstream changed in the same function `{fl[:80]}`{_commit_of(up, path, u)}",
                    )
                )
                flagged.add((path, fl))
                break
            else:
                inside = _inside_finding(up, path, h, old_lines, theirs)
                if inside is not None:
                    out.append(inside)
    for name, path in called.items():
        for header, before, after in up.changed_declarations(name, path):
            how = "other parameters" if after else "no declaration any more (renamed or removed)"
            was = sorted(before - after)[0]
            now = f"; now `{name}({sorted(after - before or after)[0][:120]})`" if after else ""
            out.append(
                Finding(
                    kind="api",
                    path=path,
                    name=name,
                    text=f"{path}: calls {name}(), which has {how} in {header} upstream "
                    f"(was `{name}({was[:120]})`{now})",
                )
            )
            break
    return out


def names(findings: Sequence[Finding]) -> list[str]:
    return list(dict.fromkeys(f.name for f in findings if f.name))
