"""Commits made with git's plumbing on a private index file: ``read-tree`` into it,
``update-index --index-info`` / ``apply --cached`` to change it, ``write-tree``,
``commit-tree``. No checkout, no HEAD or branch moved, the repository's own index and work
tree untouched; the index file is the caller's (a temp file it removes).

Used where patchkit makes commits it does not check out: a refresh's scratch repository
(its roots, and the commits it rewrites when a resolution reaches beyond the series'
files) and ``series export --to-branch`` (a branch of the queue in the user's clone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from patchkit.core.errors import FatalError, SourceError
from patchkit.core.proc import RunResult
from patchkit.git.repo import TreeEntry
from patchkit.git.runner import run_git

__all__ = ["PrivateIndex", "index_info"]


def index_info(entries: Mapping[str, TreeEntry]) -> bytes:
    """``update-index --index-info`` input for these paths."""
    return "".join(f"{e.mode} {e.oid}\t{p}\n" for p, e in entries.items()).encode("utf-8")


class PrivateIndex:
    """git in ``repo`` with ``GIT_INDEX_FILE`` set to ``index``.

    ``env``: the environment git runs with (GIT_INDEX_FILE added); ``config``: ``-c``
    arguments put before each command; ``error``: raised, one line, when a command fails;
    ``identity``: patchkit's own committer identity (:func:`patchkit.git.runner.run_git`)."""

    def __init__(
        self,
        repo: Path,
        index: Path,
        *,
        env: Mapping[str, str],
        config: Sequence[str] = (),
        error: type[FatalError] = SourceError,
        identity: bool = False,
    ) -> None:
        self.repo = repo
        self.index = index
        self._env = {**env, "GIT_INDEX_FILE": str(index)}
        self._config = tuple(config)
        self._error = error
        self._identity = identity

    def git(
        self,
        *args: str,
        input: bytes | None = None,
        check: bool = True,
        env: Mapping[str, str] | None = None,
        what: str = "",
    ) -> RunResult:
        return run_git(
            self.repo,
            *self._config,
            *args,
            input=input,
            check=check,
            env={**self._env, **(env or {})},
            error=self._error,
            identity=self._identity,
            what=what or f"git {args[0]} in {self.repo}",
        )

    def read_tree(self, treeish: str, *, what: str = "") -> None:
        """The index becomes ``treeish``'s files (``--empty``: none)."""
        self.git("read-tree", treeish, what=what)

    def set_entries(self, entries: Mapping[str, TreeEntry]) -> None:
        """Put these blobs at these paths (each with its mode)."""
        self.git("update-index", "--index-info", input=index_info(entries))

    def apply(self, patch: Path, *, check_only: bool = False) -> RunResult:
        """``git apply --cached`` of a patch file onto the index (not raising: ``.ok`` says)."""
        return self.git(
            "apply",
            "--cached",
            *(("--check",) if check_only else ()),
            "--whitespace=nowarn",
            str(patch),
            check=False,
        )

    def write_tree(self) -> str:
        return self.git("write-tree").stdout.strip()

    def commit(
        self, tree: str, *, parents: Sequence[str], message: str, env: Mapping[str, str] | None = None
    ) -> str:
        """A commit of ``tree`` on ``parents`` with ``message`` (as is: end it with a
        newline); ``env``: author and committer variables, for a commit with the author's
        name and date. Nothing points at it: the caller moves a ref."""
        args = ["commit-tree", "--no-gpg-sign", tree]
        for p in parents:
            args += ["-p", p]
        return self.git(*args, input=message.encode("utf-8"), env=env).stdout.strip()
