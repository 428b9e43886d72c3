"""Why a parsed patch must not be applied (:func:`refusals`): paths outside the worktree,
symlinks whose target leaves it (or is not stated), diffs patchkit cannot check, binary
blocks that would inflate past the cap on a patch file."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from patchkit.spec.patchfile import ParsedDiff

__all__ = ["BINARY_MAX", "refusals"]

# the most a binary block may inflate to: a patch file's own cap (spec.series.PATCH_MAX),
# so a small patch cannot make every `git apply` of it inflate gigabytes
BINARY_MAX = 64 << 20


def _unsafe_path(path: str) -> str | None:
    """Why a path in a patch is not a plain path inside the worktree, or None."""
    if not path or "\0" in path:
        return "is empty or holds a NUL byte"
    if path.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", path):
        return "is absolute"
    if "\\" in path:
        return "holds a backslash (a folder separator on Windows)"
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "has an empty, '.' or '..' component"
    if any(p.lower().rstrip(". ") == ".git" for p in parts):
        return "is inside .git"
    return None


def _link_escapes(path: str, target: str) -> str | None:
    """Why a symlink at ``path`` pointing to ``target`` may leave the worktree, or None."""
    if not target or "\0" in target:
        return "an empty target"
    if target.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", target):
        return "an absolute target"
    if "\\" in target:
        return "a target with a backslash (a folder separator on Windows)"
    depth = path.count("/")  # folders above the link, up to the worktree's root
    named = False
    for part in target.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if named:  # x/.. goes wherever x's parent is, and x may be a link
                return "a target with '..' after a folder name (cannot be checked)"
            depth -= 1
            if depth < 0:
                return "a target above the worktree"
            continue
        if part.lower().rstrip(". ") == ".git":
            return "a target inside .git"
        named = True
    return None


def refusals(parsed: ParsedDiff) -> list[str]:
    """Why a parsed patch must not be applied: paths outside the worktree, symlinks whose
    target leaves it (or is not stated), diffs patchkit cannot check. One line each."""
    out = list(parsed.problems)
    for f in parsed.files:
        for p in dict.fromkeys((f.old_path, f.new_path, *f.names)):
            why = _unsafe_path(p)
            if why is not None:
                out.append(f"the path {p!r} {why}")
        for block in f.binary_blocks:
            size = block.size if block.kind == "literal" else max(block.size, block.result_size() or 0)
            if size > BINARY_MAX:
                out.append(
                    f"{f.new_path}: a binary {block.kind} that inflates to {size:,} bytes "
                    f"(more than {BINARY_MAX >> 20} MiB, the most a patch file may hold)"
                )
                break
        if f.makes_symlink:
            target = f.symlink_target
            if target is None:
                out.append(
                    f"{f.new_path}: makes a symlink without stating its target "
                    "(a mode change alone, binary data or a partial hunk)"
                )
                continue
            why = _link_escapes(f.new_path, target)
            if why is not None:
                out.append(f"{f.new_path}: makes a symlink to {target!r}, {why}: it would leave the worktree")
    return out
