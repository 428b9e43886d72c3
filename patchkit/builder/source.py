"""The source and patch stages: the cache's clone at the pinned commit, the recipe's
worktree, and the patch series applied to it (or the worktree reused as it is).

A worktree is reused when the work folder's state (builder.state) records the same
source id (commit, URL, patch hashes, sparse patterns) and the worktree is exactly as
patchkit left it; one that differs from what patchkit left is the user's work and is
never reset.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from patchkit.builder.patch import AppliedPatch, apply_series
from patchkit.builder.state import (
    BuildState,
    digest,
    read_state,
    refuse_user_work,
    worktree_matches,
    write_state,
)
from patchkit.core.log import log
from patchkit.core.paths import WorkDirs
from patchkit.git.cache import build_number, ensure_clone, ensure_commit, prepare_worktree, remove_worktree
from patchkit.git.runner import git_out
from patchkit.spec.buildinfo import ApplyResult
from patchkit.spec.recipe import Recipe

__all__ = ["Source", "apply_patches", "check_source"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Source:
    """The clone, and what the work folder holds for it."""

    repo: Path  # the cache's bare clone
    state: BuildState  # as recorded (empty after --clean)
    source_id: str  # what the worktree must be made from
    reuse: bool  # the worktree is that, exactly as patchkit left it


def check_source(recipe: Recipe, url: str, cache_root: Path, work: WorkDirs, *, clean: bool) -> Source:
    """The clone (cloned or fetched as needed) and whether the worktree can be reused."""
    repo = ensure_clone(cache_root, url)
    ensure_commit(repo, url, recipe.upstream.commit, recipe.upstream.ref)
    if clean:
        log.info("--clean: removing the worktree and build dir")
        remove_worktree(repo, work.src)
        shutil.rmtree(work.build, ignore_errors=True)
        work.state.unlink(missing_ok=True)
        work.smoke.unlink(missing_ok=True)
    state = read_state(work.state)
    patches = recipe.patches
    for p in patches:
        p.read_verified()  # an edited patch file is caught even when nothing else changed
    source_id = digest(
        {
            "commit": recipe.upstream.commit,
            "url": url,
            "patches": [(p.name, p.sha256) for p in patches],
            "sparse": list(recipe.build.sparse_exclude),
        }
    )
    matches = worktree_matches(work.src, state.tree, recipe.upstream.commit, repo=repo)
    # a worktree that differs from what patchkit left is the user's work: never reset it
    if not matches and state.tree and (work.src / ".git").exists():
        refuse_user_work(work.src, recipe.upstream.commit, repo=repo)
    return Source(repo=repo, state=state, source_id=source_id, reuse=state.source_id == source_id and matches)


def apply_patches(recipe: Recipe, src: Source, work: WorkDirs) -> tuple[BuildState, list[AppliedPatch]]:
    """The worktree at the pin with the series applied (or reused); the state (written) and
    each patch's result. The state holds the pinned commit's build number."""
    patches = recipe.patches
    if src.reuse:
        log.info(
            f"worktree {work.src} is up to date at {recipe.upstream.commit[:12]} "
            f"with {len(patches)} patch(es)"
        )
        state = src.state
        if state.build_number < 0:  # recorded by an older patchkit without it
            state = dataclasses.replace(
                state, build_number=build_number(work.src, recipe.upstream.commit) or 0
            )
            write_state(work.state, state)
        return state, [AppliedPatch(patch=p, result=ApplyResult(r)) for p, r in zip(patches, state.results)]
    work.state.unlink(missing_ok=True)
    wt = prepare_worktree(src.repo, work.src, recipe.upstream.commit, recipe.build.sparse_exclude)
    results = apply_series(work.src, recipe.upstream.commit, patches, work.root)
    for r in results:
        mark = "✓ applied" if r.result is ApplyResult.APPLIED else "= already present upstream"
        log.info(f"  {mark}: {r.patch.filename}")
    state = BuildState(
        source_id=src.source_id,
        tree=git_out(work.src, "write-tree"),
        results=tuple(r.result.value for r in results),
        commit_date=wt.commit_date,
        subject=wt.subject,
        build_number=build_number(work.src, recipe.upstream.commit) or 0,
    )
    write_state(work.state, state)
    return state, results
