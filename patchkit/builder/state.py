"""What a recipe's work folder holds, and whether it can be reused.

``state.json`` (in the recipe's work folder, see core.paths.CacheLayout) records what
patchkit made there: the source id (commit, URL, patch hashes, sparse patterns), the
tree the worktree had after patching, each patch's result, the pinned commit's build
number, and the configure id. It is
written only after a stage succeeded, so an interrupted run redoes that stage; an
unreadable state is an empty one (everything is redone).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from patchkit.builder.problems import WorktreeNotOurs
from patchkit.core.errors import SourceError
from patchkit.core.fs import atomic_write_json
from patchkit.core.record import Record
from patchkit.git.cache import own_worktree
from patchkit.git.runner import git_out, run_git

__all__ = ["BuildState", "digest", "read_state", "refuse_user_work", "worktree_matches", "write_state"]


def digest(obj: object) -> str:
    """sha256 of an object's canonical JSON."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildState(Record):
    source_id: str = ""
    tree: str = ""  # `git write-tree` of the patched worktree
    results: tuple[str, ...] = ()  # each patch's ApplyResult value, in order
    commit_date: str = ""
    subject: str = ""
    # llama.cpp's build number of the pinned commit (git.cache.build_number); 0: none (a
    # shallow clone), -1: not counted yet
    build_number: int = -1
    config_id: str | None = None  # None: configure has not succeeded with these inputs


_RESULTS = ("applied", "already-present")


def read_state(path: Path) -> BuildState:
    """The recorded state; an empty one when it is missing or not what patchkit writes."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        results = data.get("results") or []
        if not isinstance(results, list) or any(r not in _RESULTS for r in results):
            return BuildState()
        return BuildState(
            source_id=str(data.get("source_id") or ""),
            tree=str(data.get("tree") or ""),
            results=tuple(results),
            commit_date=str(data.get("commit_date") or ""),
            subject=str(data.get("subject") or ""),
            build_number=_count(data.get("build_number")),
            config_id=data.get("config_id") if isinstance(data.get("config_id"), str) else None,
        )
    except (OSError, ValueError, AttributeError, TypeError):
        return BuildState()


def _count(v: object) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else -1


def write_state(path: Path, state: BuildState) -> None:
    atomic_write_json(path, state.to_json())


def worktree_matches(path: Path, tree: str, commit: str, *, repo: Path) -> bool:
    """True if the worktree is exactly as patchkit left it: the cache clone ``repo``'s own
    worktree (git.cache.own_worktree: git runs in nothing else), HEAD at the pin, the
    recorded tree in the index, no edits, no untracked or ignored files.

    It writes nothing: llama.cpp's CMake lists the worktree's git index among the files
    that re-run the configure, so a check that rewrote it (``update-index --refresh``,
    porcelain ``git diff``, ``git status`` with its optional index refresh) made every
    build after an edit configure again. A file whose timestamps changed is compared by
    content (``status`` refreshes in memory only, with optional locks off)."""
    if not tree or not own_worktree(repo, path):
        return False
    try:
        head = git_out(path, "rev-parse", "HEAD")
        # the index holds the recorded tree (unlike write-tree, never writes the index)
        staged = run_git(path, "diff-index", "--cached", "--quiet", tree, "--", check=False)
        status = git_out(path, "--no-optional-locks", "status", "--porcelain", "-z", "-uno", "--no-renames")
        extra = git_out(path, "ls-files", "--others")
    except SourceError:
        return False
    return head == commit and staged.returncode == 0 and not _unstaged(status) and not extra


def _unstaged(status: str) -> bool:
    """Whether ``git status --porcelain -z`` lists a change between the index and the
    files (its second column; the first is the series' changes against HEAD)."""
    return any(len(entry) < 3 or entry[1] != " " for entry in status.split("\0") if entry)


def refuse_user_work(src: Path, commit: str, *, repo: Path) -> None:
    """Raise unless the worktree holds nothing but what patchkit put there."""
    if not own_worktree(repo, src):
        raise SourceError(problem=WorktreeNotOurs(worktree=src, found="foreign"))
    try:
        head = git_out(src, "rev-parse", "HEAD")
        changed = git_out(src, "--no-optional-locks", "status", "--porcelain", "--ignored")
    except SourceError:
        raise SourceError(problem=WorktreeNotOurs(worktree=src, found="broken")) from None
    if head != commit:
        subject = git_out(src, "log", "-1", "--format=%h %s", "HEAD")
        raise SourceError(problem=WorktreeNotOurs(worktree=src, found="commits", subject=subject))
    if changed:
        raise SourceError(problem=WorktreeNotOurs(worktree=src, found="changes"), detail=changed[:2000])
