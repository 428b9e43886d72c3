"""Why a file did not merge though it holds no conflict markers: one side deleted it.

Upstream deleted (or renamed, or split) a file the patch changes: the commit of
``old..new`` that did it is named, and where the patch's hunks' lines live now is found
by content (the lines each hunk keeps and removes, searched in upstream's new tree; the
files that hold most of them first), so the person knows where to apply them again. Or
the patch deletes a file upstream changed meanwhile: the commits that changed it are
named.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Sequence

from patchkit.core.errors import SourceError
from patchkit.git.repo import CommitInfo, Git
from patchkit.spec.patchfile import Hunk, parse_diff

__all__ = ["MAX_HOMES", "Gone", "gone_file", "hunk_homes"]

MAX_HOMES = 3  # files named per hunk
_MAX_NAMES = 40  # names of one hunk searched for


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gone:
    """What happened to a file that merged without markers."""

    side: str  # "upstream" (deleted or renamed it) | "patch" (the patch deletes it) | "unknown"
    commit: CommitInfo | None  # the commit of old..new that deleted it / last changed it
    renamed_to: str | None = None
    folder_gone: bool = False  # the file's folder is gone too (a backend removed, not moved)
    # per hunk of the patch: (its @@ range, [(file, lines found there, lines searched)])
    homes: tuple[tuple[str, tuple[tuple[str, int, int], ...]], ...] = ()

    @property
    def new_files(self) -> tuple[str, ...]:
        """The files the hunks' lines are in now, best first."""
        seen: dict[str, int] = {}
        for _, found in self.homes:
            for rank, (f, _n, _total) in enumerate(found):
                seen[f] = seen.get(f, 0) + MAX_HOMES - rank
        if self.renamed_to and self.renamed_to not in seen:
            seen[self.renamed_to] = 1 << 30
        return tuple(sorted(seen, key=lambda f: -seen[f]))

    def lines(self, path: str) -> list[str]:
        """The stop message's lines for ``path``."""
        c = self.commit
        who = f"{c.short} {c.subject[:100]}" if c else "a commit outside the range"
        if self.side == "patch":
            out = [f"{path}: the patch deletes it; upstream changed it meanwhile"]
            if c:
                out.append(f"  upstream {who} (the last to change it)")
            return out
        if self.side == "unknown":
            return [f"{path}: not merged (no conflict markers: deleted or added on one side)"]
        verb = f"renamed to {self.renamed_to}" if self.renamed_to else "deleted"
        out = [f"{path}: {verb} upstream by {who}; the patch changes it"]
        if self.folder_gone:
            out.append(
                f"  its folder {posixpath.dirname(path)}/ is gone too: the code may be gone, not moved"
            )
        for where, found in self.homes:
            if found:
                names = ", ".join(f"{f} ({n} of its {total} names)" for f, n, total in found)
                verb = "the nearest like it is in" if self.folder_gone else "its code is now in"
                out.append(f"  the patch's hunk `{where}`: {verb} {names}")
            else:
                out.append(f"  the patch's hunk `{where}`: none of its names is in upstream's new tree there")
        if self.homes and not any(found for _, found in self.homes):
            out.append("  (the code it changed is gone upstream: the patch may not be needed there)")
        return out

    def summary(self) -> str:
        """A few words for the stop's first line."""
        c = self.commit
        if self.side == "patch":
            return "the patch deletes it, upstream changed it" + (f" ({c.short})" if c else "")
        if self.side == "unknown" or c is None:
            return "deleted on one side"
        verb = "renamed" if self.renamed_to else "deleted"
        if self.folder_gone:
            return f"{verb} upstream by {c.short}, with its folder"
        homes = self.new_files[:MAX_HOMES]
        return f"{verb} upstream by {c.short}" + (f", its code now in {', '.join(homes)}" if homes else "")


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}")
_COMMON = frozenset(
    [
        "const",
        "static",
        "struct",
        "return",
        "void",
        "char",
        "bool",
        "true",
        "false",
        "NULL",
        "nullptr",
        "size_t",
        "int32_t",
        "int64_t",
        "uint32_t",
        "uint64_t",
        "uint8_t",
        "int8_t",
        "float",
        "double",
        "unsigned",
        "signed",
        "sizeof",
        "else",
        "while",
        "break",
        "continue",
        "switch",
        "case",
        "default",
        "defined",
        "ifdef",
        "ifndef",
        "endif",
        "define",
        "include",
        "typedef",
        "auto",
        "this",
        "self",
        "nil",
    ]
)


def _names(h: Hunk) -> dict[str, int]:
    """The names (identifiers of four characters or more) of a hunk's old side and its
    function line, each with a weight: those of the lines it removes or changes count
    three times as much as those of its context, the function's twice."""
    out: dict[str, int] = {}
    parts = h.header.split("@@", 2)
    texts = [(parts[2] if len(parts) == 3 else "", 2)]
    texts += [(ln[1:], 3 if ln[0] == "-" else 1) for ln in h.lines if ln and ln[0] in " -"]
    for text, weight in texts:
        for w in _WORD.findall(text):
            if w not in _COMMON:
                out[w] = max(out.get(w, 0), weight)
    return dict(sorted(out.items(), key=lambda kv: -kv[1])[:_MAX_NAMES])


def hunk_homes(
    git: Git, commit: str, hunks: Sequence[Hunk], paths: Sequence[str]
) -> list[tuple[str, tuple[tuple[str, int, int], ...]]]:
    """For each hunk, the files of ``commit`` (under ``paths``) that hold most of its
    names, a name found in fewer files counting more: (file, how many of them, of how
    many), at most :data:`MAX_HOMES`, none scoring under half the best one's."""
    out: list[tuple[str, tuple[tuple[str, int, int], ...]]] = []
    for h in hunks:
        want = _names(h)
        where = h.header.split("@@")[1].strip() if h.header.count("@@") >= 2 else h.header
        per: dict[str, set[str]] = {}
        for path, _n, text in git.grep_fixed(commit, list(want), paths, words=True):
            if text in want:
                per.setdefault(path, set()).add(text)
        spread: dict[str, int] = {}
        for found in per.values():
            for w in found:
                spread[w] = spread.get(w, 0) + 1
        score = {f: sum(want[w] / spread[w] for w in found) for f, found in per.items()}
        ranked = sorted(per, key=lambda f: (-score[f], f))[:MAX_HOMES]
        # a file far behind the best one only shares a few common names with the hunk
        ranked = [f for f in ranked if score[f] * 2 >= score[ranked[0]]]
        out.append(
            (where, tuple((f, len(per[f]), len(want)) for f in ranked if len(per[f]) >= min(2, len(want))))
        )
    return out


def _search_paths(git: Git, new: str, path: str, added: Sequence[str]) -> list[str]:
    """Where to search upstream's new tree: the nearest folder of ``path`` still there
    (not the whole tree: a partial clone lacks large blobs elsewhere), and the files
    the deleting commit added."""
    folder = posixpath.dirname(path)
    while folder and not git.path_exists(new, folder):
        folder = posixpath.dirname(folder)
    return [folder or ".", *(a for a in added if not a.startswith(folder + "/"))] if folder else ["."]


def gone_file(git: Git | None, old: str, new: str, path: str, patch_diff: str, *, upstream_has: bool) -> Gone:
    """Why ``path`` merged without markers: ``upstream_has``: it is in upstream's new tree
    (then the patch deletes it)."""
    if git is None or not old:
        return Gone(side="unknown", commit=None)
    try:
        if upstream_has:
            sha = git.run(
                "log", "--no-show-signature", "--format=%H", "-1", f"{old}..{new}", "--", path
            ).strip()
            return Gone(side="patch", commit=git.commit_infos([sha])[sha] if sha else None)
        found = git.deleted_in(old, new, path)
        if found is None:
            return Gone(side="unknown", commit=None)
        commit, renamed, added = found
        hunks = [h for f in parse_diff(patch_diff).files if path in (f.old_path, f.new_path) for h in f.hunks]
        homes = hunk_homes(git, new, hunks, _search_paths(git, new, path, added))
        folder = posixpath.dirname(path)
        folder_gone = renamed is None and bool(folder) and not git.path_exists(new, folder)
    except SourceError:
        return Gone(side="unknown", commit=None)
    return Gone(
        side="upstream", commit=commit, renamed_to=renamed, homes=tuple(homes), folder_gone=folder_gone
    )
