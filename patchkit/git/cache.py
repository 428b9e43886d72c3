"""Upstream source: one clone per upstream in the cache, one worktree per build.

The clone is bare and, for remote URLs, partial (``--filter=blob:none``): blobs
are fetched only for what a checkout needs. A local path (a mirror) is cloned
plainly, which is how users build offline. Worktrees use a sparse checkout that
leaves out files a build never reads (model blobs, large CSVs). A URL is shown only
redacted (``core.redact``: no ``user:TOKEN@``, no ``?token=``); the clone's own git config
keeps it whole, since later fetches need it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from pathlib import Path

from patchkit.core.errors import SourceError
from patchkit.core.lock import cache_lock
from patchkit.core.log import log
from patchkit.core.paths import CacheLayout
from patchkit.core.redact import redact_url
from patchkit.git.problems import NotARepository, UpstreamMissing
from patchkit.git.runner import git_out

__all__ = [
    "DEFAULT_SPARSE_EXCLUDE",
    "Worktree",
    "build_number",
    "commit_info",
    "ensure_clone",
    "ensure_commit",
    "is_local",
    "local_path",
    "open_upstream",
    "own_worktree",
    "prepare_worktree",
    "remove_worktree",
    "update_clone",
]

DEFAULT_SPARSE_EXCLUDE = ("/models/*.gguf", "/docs/ops/*.csv")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Worktree:
    path: Path
    commit: str
    commit_date: str  # ISO 8601, committer date
    subject: str


# scheme://... or scp-like user@host:path; anything else is a path on this machine
_REMOTE = re.compile(r"^[a-z][a-z0-9+.-]*://|^[^/\\]+@[^/\\]+:")


def local_path(url: str) -> Path | None:
    """The path an upstream names on this machine (``file://`` URLs included); None for a
    remote URL. The answer depends on the text only: a mistyped path is still a path."""
    if url.startswith("file://"):
        return Path(url[len("file://") :])
    if _REMOTE.match(url):
        return None
    return Path(url).expanduser()


def is_local(url: str) -> bool:
    return local_path(url) is not None


def _normalise(url: str) -> str:
    path = local_path(url)
    if path is not None:
        return str(path.resolve())
    return url.rstrip("/").removesuffix(".git")


def _check_local(url: str, path: Path) -> Path:
    if not path.exists():
        raise SourceError(problem=NotARepository(shown=str(path), option="upstream", found="missing"))
    if not (path / "HEAD").exists() and not (path / ".git").exists():
        raise SourceError(problem=NotARepository(shown=redact_url(url), option="upstream", found="not-git"))
    return path.resolve()


def _clone_dir(cache: Path, url: str) -> Path:
    norm = _normalise(url)
    # the folder's name: the URL's last path segment, never its query or userinfo
    name = norm if is_local(url) else redact_url(norm).split("?", 1)[0].split("#", 1)[0]
    return CacheLayout(root=cache).repo(name.rstrip("/").split("/")[-1] or "upstream", norm)


def ensure_clone(cache: Path, url: str) -> Path:
    """The cache's bare clone of ``url``, cloning it first if needed (atomically)."""
    target = _clone_dir(cache, url)
    if (target / "HEAD").is_file():
        return target
    path = local_path(url)
    local = path is not None
    source = url
    if path is not None:
        resolved = _check_local(url, path)
        if not url.startswith("file://"):
            source = str(resolved)
    tmp = target.with_name(target.name + f".partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    args = ["clone", "--bare", "--quiet"]
    if not local:
        args.append("--filter=blob:none")
    shown = redact_url(url)
    log.info(f"cloning {shown} into the cache ({'local' if local else 'partial, blob:none'})")
    try:
        try:
            git_out(cache, *args, "--", source, str(tmp), what=f"cloning {shown}")
        except SourceError as e:
            raise SourceError(
                problem=UpstreamMissing(stage="clone", said=e.message), detail=e.detail
            ) from None
        # keep the remote so later fetches (new commits, lazy blobs) know where to go,
        # and track its branches as origin/* (`patchkit check --ref origin/master`)
        git_out(tmp, "config", "remote.origin.url", source)
        git_out(tmp, "config", "remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*")
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def open_upstream(url: str, cache: Path) -> Path:
    """A local repository for read-only work on ``url``: a local path as it is; a remote
    URL through the cache's partial clone, fetched first (so ``origin/master`` is current)."""
    path = local_path(url)
    if path is not None:
        return _check_local(url, path)
    with cache_lock(cache, f"patchkit check ({redact_url(url)})"):
        clone = ensure_clone(cache, url)
        update_clone(clone, url)
    return clone


def update_clone(repo: Path, url: str) -> None:
    """Fetch the remote's branches and tags (origin/*); offline, keep what the clone has."""
    extra = [] if is_local(url) else ["--filter=blob:none"]
    try:
        git_out(repo, "fetch", "--quiet", "--tags", *extra, "origin")
    except SourceError as e:
        log.warning(f"could not fetch {redact_url(url)} ({e.message}): using the cached clone as it is")


def _has_commit(repo: Path, commit: str) -> bool:
    try:
        git_out(repo, "cat-file", "-e", f"{commit}^{{commit}}")
    except SourceError:
        return False
    return True


def ensure_commit(repo: Path, url: str, commit: str, ref: str | None = None) -> None:
    """Make sure ``commit`` is in the clone (fetching it if not) and that ``ref`` names it."""
    shown = redact_url(url)
    if not _has_commit(repo, commit):
        log.info(f"fetching {commit[:12]} from {shown}")
        extra = [] if is_local(url) else ["--filter=blob:none"]
        try:
            git_out(repo, "fetch", "--quiet", *extra, "origin", commit)
        except SourceError as e:
            said = f"commit {commit} is not in {shown} ({e.message})"
            raise SourceError(problem=UpstreamMissing(stage="commit", said=said)) from None
        if not _has_commit(repo, commit):
            raise SourceError(f"commit {commit} is not in {shown}")
    if ref:
        try:
            git_out(repo, "fetch", "--quiet", "--tags", "origin")
        except SourceError:
            pass  # offline: resolve against what the clone has
        try:
            resolved = git_out(
                repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"
            )
        except SourceError:
            raise SourceError(f"upstream.ref {ref!r} does not exist in {shown}") from None
        if resolved != commit:
            raise SourceError(
                f"upstream.ref {ref!r} resolves to {resolved[:12]}, but the recipe pins {commit[:12]}",
                hint="fix upstream.commit or upstream.ref so they name the same commit",
            )


def commit_info(repo: Path, commit: str) -> tuple[str, str]:
    out = git_out(repo, "show", "-s", "--format=%cI%x00%s", commit)
    date, _, subject = out.partition("\x00")
    return date, subject


def build_number(repo: Path, commit: str) -> int | None:
    """llama.cpp's build number: the commits reachable from ``commit`` (what upstream's
    cmake computes with `git rev-list --count HEAD`); None in a shallow clone (too few)."""
    if git_out(repo, "rev-parse", "--is-shallow-repository").strip() == "true":
        return None
    count = git_out(repo, "rev-list", "--count", commit).strip()
    return int(count) if count.isdigit() and int(count) > 0 else None


_GITDIR_MAX = 4096


def own_worktree(repo: Path, path: Path) -> bool:
    """Whether ``path`` is a worktree of the bare clone ``repo`` as git made it: its ``.git``
    a plain file (no link, no folder) naming ``repo``'s ``worktrees/<name>`` folder, which
    names ``path/.git`` back. A ``.git`` that whoever could write the worktree replaced (a
    build's code: a folder with a config of its own, ``core.fsmonitor`` a shell command; a
    file naming another repository) is not, and git must not run there."""
    dotgit = path / ".git"
    try:
        if path.is_symlink() or dotgit.is_symlink() or not dotgit.is_file():
            return False
        with dotgit.open("rb") as f:
            data = f.read(_GITDIR_MAX + 1)
        m = re.fullmatch(rb"gitdir: ([^\n]+)\n?", data)
        if m is None or len(data) > _GITDIR_MAX:
            return False
        named = Path(os.fsdecode(m.group(1)))
        gitdir = (named if named.is_absolute() else path / named).resolve()
        if gitdir.parent != (repo.resolve() / "worktrees") or not gitdir.is_dir():
            return False
        back_file = gitdir / "gitdir"
        if back_file.is_symlink():
            return False
        back = Path(back_file.read_text(encoding="utf-8", errors="replace").strip())
        back = back if back.is_absolute() else (gitdir / back)
        return back.resolve() == dotgit.resolve()
    except (OSError, ValueError):
        return False


def remove_worktree(repo: Path, path: Path) -> None:
    """Remove the worktree and git's record of it; one that is not :func:`own_worktree`'s
    is deleted as files (git never runs in it)."""
    if path.is_symlink():
        path.unlink()
    elif path.exists() and not own_worktree(repo, path):
        shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        try:
            git_out(repo, "worktree", "remove", "--force", "--force", str(path))
        except SourceError:
            shutil.rmtree(path, ignore_errors=True)
    git_out(repo, "worktree", "prune")


def prepare_worktree(repo: Path, path: Path, commit: str, sparse_exclude: tuple[str, ...] = ()) -> Worktree:
    """A clean worktree at ``commit`` (created, or reset if it exists)."""
    excludes = tuple(dict.fromkeys((*DEFAULT_SPARSE_EXCLUDE, *sparse_exclude)))
    if not own_worktree(repo, path):  # missing, or not the one git made: made afresh
        remove_worktree(repo, path)
        path.parent.mkdir(parents=True, exist_ok=True)
        git_out(
            repo,
            "worktree",
            "add",
            "--quiet",
            "--no-checkout",
            "--detach",
            str(path),
            commit,
            what="creating the worktree",
        )
    # every time: a changed sparse_exclude must reach an existing worktree too
    patterns = ["/*", *(f"!{p if p.startswith('/') else '/' + p}" for p in excludes)]
    git_out(path, "sparse-checkout", "set", "--no-cone", *patterns, what="sparse checkout")
    git_out(path, "reset", "--quiet", "--hard", commit, what=f"checking out {commit[:12]}")
    git_out(path, "clean", "-fdxq")
    date, subject = commit_info(repo, commit)
    return Worktree(path=path, commit=commit, commit_date=date, subject=subject)
