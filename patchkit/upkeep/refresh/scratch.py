"""The refresh's scratch repository (``WORKDIR/tree``): git run there with nothing of the
user's configuration, its two roots (the old base's files and the new base's, only those
the series touches), reading files and diffs back, and the folder's own files.

It borrows the upstream's objects through ``objects/info/alternates`` (nothing is
written into the upstream repository); a partial clone's promisor is copied so missing
blobs are fetched lazily, as in its source.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from patchkit.core.errors import PatchError
from patchkit.core.proc import RunResult
from patchkit.git.commit import PrivateIndex, index_info
from patchkit.git.repo import Git, TreeEntry
from patchkit.git.runner import run_git, scratch_env

__all__ = [
    "CONFLICT_LIMIT",
    "LOOSE",
    "OWNED_DIRS",
    "OWNED_FILES",
    "commit_staged",
    "head",
    "make_scratch",
    "out",
    "private_index",
    "read_text",
    "rmtree",
    "scratch_git",
    "show",
    "unmerged",
]

CONFLICT_LIMIT = 8 << 20  # bytes of one conflicted file kept to learn its resolution from
_CONFIG = ("-c", "merge.conflictStyle=diff3", "-c", "rerere.enabled=false")
# what a refresh writes in its work folder (abort removes a folder holding only these)
OWNED_FILES = frozenset(
    {"refresh-state.json", "cascade.index", "graft.index", "effect.patch", "lock", "lock.owner"}
)
OWNED_DIRS = ("tree", "patches", "conflicts")
# how a patch that does not apply on its own base as it is goes in there after all (as
# GNU patch takes a stale quilt or conda patch: hunk counts recounted, up to two context
# lines at each end let go), so that its 3-way merge still has the base it was made on
LOOSE = (
    ("its hunks' line counts recounted", ("--recount",)),
    ("reduced context (at least 1 line, as `patch --fuzz 2`)", ("-C1",)),
    ("its line counts recounted and reduced context", ("--recount", "-C1")),
)


def _env(tree: Path) -> dict[str, str]:
    env = scratch_env(tree.parent)
    env["GIT_CONFIG_GLOBAL"] = os.devnull  # the user's conflict style, hooks, rerere: not here
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    return env


def scratch_git(
    tree: Path, *args: str, check: bool = True, input: bytes | None = None, binary: bool = False
) -> RunResult:
    return run_git(
        tree,
        *_CONFIG,
        *args,
        check=check,
        input=input,
        binary=binary,
        env=_env(tree),
        error=PatchError,
        identity=True,
        what=f"git {args[0]} in {tree}",
    )


def private_index(tree: Path, index: Path) -> PrivateIndex:
    """Plumbing on ``index`` (a file of the work folder) in the scratch repository."""
    return PrivateIndex(tree, index, env=_env(tree), config=_CONFIG, error=PatchError, identity=True)


def out(tree: Path, *args: str) -> str:
    return scratch_git(tree, *args).stdout


def head(tree: Path) -> str:
    return out(tree, "rev-parse", "HEAD").strip()


def make_scratch(
    git: Git,
    tree: Path,
    onto: str,
    paths: Sequence[str],
    base: str | None,
    pfiles: Sequence[Path | None],
    names: Sequence[str],
    *,
    independent: bool = False,
) -> tuple[str, list[str | None], dict[int, str]]:
    """Set up the scratch repo; returns the old base's root commit ('' without a base),
    the patch commits made on it (None: not made): each on the one before, or with
    ``independent`` each on the old base alone, and the patches that went in there only
    loosely (:data:`LOOSE`: index -> how)."""
    commits = [base, onto] if base else [onto]
    all_entries = git.tree_entries(commits, paths)
    git.read_blobs(
        e.oid for ents in all_entries for e in ents.values() if e.mode != "160000"
    )  # fetches them once if the source is partial
    scratch_git(tree, "init", "-q")
    alt = tree / ".git" / "objects" / "info" / "alternates"
    alt.write_text(str(git.objects_dir()) + "\n", encoding="utf-8")
    promisor = _promisor_url(git)
    if promisor:  # let the scratch repo fetch blobs lazily, like its source
        for key, value in (
            ("core.repositoryformatversion", "1"),
            ("extensions.partialClone", "origin"),
            ("remote.origin.url", promisor),
            ("remote.origin.promisor", "true"),
            ("remote.origin.partialclonefilter", "blob:none"),
        ):
            scratch_git(tree, "config", key, value)
    old_commits: list[str | None] = [None] * len(pfiles)
    loose: dict[int, str] = {}
    old_root = ""
    if base:
        _load_root(tree, paths, all_entries[0], f"upstream {base[:12]} (the series' base)")
        old_root = head(tree)
        for i, pfile in enumerate(pfiles):
            if pfile is None:
                continue
            if independent and head(tree) != old_root:
                scratch_git(tree, "reset", "-q", "--hard", old_root)
            for how, flags in (("", ()), *LOOSE):
                proc = scratch_git(
                    tree, "apply", "--index", "--whitespace=nowarn", *flags, str(pfile), check=False
                )
                if proc.ok:
                    commit_staged(tree, names[i])  # the name a conflict marker shows
                    old_commits[i] = head(tree)
                    if how:
                        loose[i] = how
                    break
        scratch_git(tree, "update-ref", "refs/patchkit/old", "HEAD")
    _load_root(tree, paths, all_entries[-1], f"upstream {onto[:12]}, the files the series touches")
    return old_root, old_commits, loose


def _load_root(tree: Path, paths: Sequence[str], entries: dict[str, TreeEntry], msg: str) -> None:
    """Make HEAD a new root commit holding exactly ``entries``, and check it out."""
    for p in paths:
        (tree / p).unlink(missing_ok=True)
    scratch_git(tree, "read-tree", "--empty")
    scratch_git(tree, "update-index", "--index-info", input=index_info(entries))
    scratch_git(tree, "checkout-index", "-a", "-f", "-u")
    tree_id = out(tree, "write-tree").strip()
    commit = out(tree, "commit-tree", tree_id, "-m", msg).strip()
    scratch_git(tree, "update-ref", "HEAD", commit)


def _promisor_url(git: Git) -> str | None:
    remote = git.config("extensions.partialClone")
    if not remote:
        return None
    url = git.config(f"remote.{remote}.url")
    if url and not re.match(r"^[a-z][a-z0-9+.-]*://", url) and not Path(url).is_absolute():
        url = str((git.repo / url).resolve())
    return url or None


def commit_staged(tree: Path, name: str) -> None:
    """Commit what is staged (maybe nothing) as ``name`` (a patch's name)."""
    scratch_git(tree, "commit", "-q", "--allow-empty", "--no-verify", "-m", name)


def unmerged(tree: Path) -> list[str]:
    return sorted({ln.split("\t", 1)[1] for ln in out(tree, "ls-files", "-u").splitlines() if "\t" in ln})


def show(tree: Path, spec: str) -> str | None:
    """``git show SPEC`` as text (None: not there, or bigger than :data:`CONFLICT_LIMIT`)."""
    proc = scratch_git(tree, "show", spec, check=False, binary=True)
    if not proc.ok or len(proc.data) > CONFLICT_LIMIT:
        return None
    return proc.data.decode("utf-8", "surrogateescape")


def read_text(path: Path) -> str | None:
    """A file of the scratch tree as text (None: not a file, too big, unreadable)."""
    try:
        if not path.is_file() or path.stat().st_size > CONFLICT_LIMIT:
            return None
        return path.read_bytes().decode("utf-8", "surrogateescape")
    except OSError:
        return None


def rmtree(path: Path) -> None:
    def onerror(func, p, _exc):  # type: ignore[no-untyped-def]  # read-only git objects on Windows
        os.chmod(p, stat.S_IWRITE)
        func(p)

    if path.exists():
        shutil.rmtree(path, onerror=onerror)
