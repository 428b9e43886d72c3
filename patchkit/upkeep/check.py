"""`patchkit check`: does the series still apply to upstream refs, and since when not?

Nothing is checked out: for each ref we read the ids of the blobs the series
touches straight from its tree (one ``ls-tree`` + one ``diff-tree --stdin`` for
any number of refs), and refs whose touched blobs are identical share one
verdict. The series is cumulative: patch N is checked on top of patches 1..N-1
(those that failed are left out, and said so; a patch that fails only because one
of them did is a *cascade* of it, :class:`CheckVerdict`), unless it is a series of
independent patches (``independent``: each made against the clean base and applied
alone), where each patch is checked on the commit alone and none cascades.

Per patch, a verdict is kept for its input files (their blobs after the earlier
patches): a patch is checked again only at commits that changed one of its files (or
an earlier patch's result on them), so a range of hundreds of commits costs about as
many checks as there are changes to the patched files. A check is git apply's
matching done in Python (:mod:`patchkit.upkeep.textapply`: byte-exact, offsets and
failing hunks as git reports them), or ``git apply`` itself in a scratch folder
(:mod:`patchkit.upkeep.scratch`) for what that does not model (renames, binary
patches, mode changes, links).

``bisect`` binary-searches first-parent history for the first commit where each
patch stops applying: about log2(range) states, not the range.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from patchkit.core.errors import ConfigError, SourceError
from patchkit.git.repo import CommitInfo, Git
from patchkit.spec.patchdoc import split_parts
from patchkit.spec.series import Patch
from patchkit.upkeep.check_engine import Engine, in_when_range, when_bounds
from patchkit.upkeep.check_report import (
    BisectReport,
    BisectResult,
    CheckReport,
    CheckVerdict,
    RefResult,
    Verdict,
)
from patchkit.upkeep.scratch import Status
from patchkit.upkeep.upstreamed import Candidate, Upstreamed, confirmed, find_upstreamed

__all__ = [
    "BisectReport",
    "BisectResult",
    "CheckReport",
    "CheckVerdict",
    "RefResult",
    "Verdict",
    "bisect",
    "check_range",
    "check_series",
    "in_when_range",
    "when_bounds",
]


def _upstream(
    git: Git, engine: Engine, base: str | None, last: str, at_last: Sequence[CheckVerdict]
) -> tuple[Upstreamed, ...]:
    """The patches upstream at ``last``, as the refresh finds them: upkeep.upstreamed's
    rules over ``base..last`` (a title or pull request only proposes), and the ``effect``
    (the patch reverse-applies there), which proves, a suggestion too."""
    found: dict[str, Upstreamed] = {}
    if base is not None and base != last and git.is_ancestor(base, last):
        cands = []
        for e, p in zip(engine.series, engine.patches, strict=True):
            parts = split_parts(e.data)
            cands.append(
                Candidate(
                    file=p.name,  # check names patches by name
                    subject=p.subject,
                    header=(parts.head + parts.message).decode("utf-8", "replace"),
                    diff=parts.diff,
                    files=p.files,
                )
            )
        found = find_upstreamed(git, base, last, cands)
    out: list[Upstreamed] = []
    for p, v in zip(engine.patches, at_last, strict=True):
        u = found.get(p.name)
        if v.status is Status.UPSTREAM:
            effect = Upstreamed(file=p.name, rule="effect", commit=None)
            u = effect if u is None else u if u.proven else confirmed(u, effect)
        if u is not None:
            out.append(u)
    return tuple(out)


def check_series(
    repo_path: Path,
    patches: Sequence[Patch],
    refs: Sequence[str],
    *,
    base: str | None = None,
    independent: bool = False,
) -> CheckReport:
    """The series checked against each ref (a branch, tag, sha, ``origin/master``...);
    ``base`` (the pin): what is upstream at the last ref is looked for since it;
    ``independent``: each patch on the ref alone (a series of independent patches)."""
    git = Git(repo_path)
    if not refs:
        raise ConfigError("no refs to check against")
    shas = [git.resolve(r) for r in refs]
    base_sha = git.resolve(base) if base else None
    infos = git.commit_infos([*shas, *([base_sha] if base_sha else [])])
    engine = Engine(git, patches, independent=independent)
    try:
        verdicts = engine.results(shas)
    finally:
        engine.close()
    return CheckReport(
        repo=str(repo_path),
        patches=tuple(p.name for p in patches),
        refs=tuple(RefResult(name=r, commit=infos[s], results=v) for r, s, v in zip(refs, shas, verdicts)),
        states=len(engine.memo),
        runs=dict(engine.stats),
        upstream=_upstream(git, engine, base_sha, shas[-1], verdicts[-1]),
        base=infos[base_sha] if base_sha else None,
    )


def _range(git: Git, old: str, new: str) -> tuple[CommitInfo, CommitInfo, list[CommitInfo]]:
    old_sha, new_sha = git.resolve(old), git.resolve(new)
    if old_sha == new_sha:
        raise ConfigError(f"range {old}..{new} is empty: both name {old_sha[:12]}")
    if not git.is_ancestor(old_sha, new_sha):
        raise ConfigError(
            f"range {old}..{new}: {old} is not an ancestor of {new}",
            hint="give the older commit first: --range OLD..NEW",
        )
    commits = git.first_parent_range(old_sha, new_sha)
    if not commits:
        raise ConfigError(f"range {old}..{new} holds no first-parent commits")
    infos = git.commit_infos([old_sha, new_sha])
    return infos[old_sha], infos[new_sha], commits


def check_range(
    repo_path: Path, patches: Sequence[Patch], old: str, new: str, *, independent: bool = False
) -> CheckReport:
    """The series checked against every first-parent commit of ``old..new`` (old excluded)."""
    git = Git(repo_path)
    old_info, _, commits = _range(git, old, new)
    engine = Engine(git, patches, independent=independent)
    try:
        chain = [c.sha for c in commits]
        verdicts = engine.results(chain, engine.chain_masks(chain))
    finally:
        engine.close()
    return CheckReport(
        repo=str(repo_path),
        patches=tuple(p.name for p in patches),
        refs=tuple(RefResult(name=c.short, commit=c, results=v) for c, v in zip(commits, verdicts)),
        states=len(engine.memo),
        runs=dict(engine.stats),
        upstream=_upstream(git, engine, old_info.sha, chain[-1], verdicts[-1]),
        base=old_info,
    )


def bisect(
    repo_path: Path, patches: Sequence[Patch], old: str, new: str, *, independent: bool = False
) -> BisectReport:
    """Per patch, the first commit of ``old..new`` (first-parent) where it stops applying.

    ``old`` is the known-good end. Assumes, like ``git bisect``, that a patch that
    stopped applying does not start again; probes are shared between patches.
    """
    git = Git(repo_path)
    old_info, new_info, commits = _range(git, old, new)
    chain = [old_info.sha] + [c.sha for c in commits]
    infos = [old_info, *commits]
    engine = Engine(git, patches, independent=independent)
    probed: dict[int, tuple[CheckVerdict, ...]] = {}
    try:
        masks = engine.chain_masks(chain)

        def at(i: int) -> tuple[CheckVerdict, ...]:
            if i not in probed:
                probed[i] = engine.results([chain[i]], [masks[i]])[0]
            return probed[i]

        out: list[BisectResult] = []
        for k, patch in enumerate(engine.patches):
            inside = [i for i, m in enumerate(masks) if m[k]]
            if not inside:
                out.append(BisectResult(patch=patch.name, verdict=Verdict.NA))
                continue
            lo, hi = inside[0], inside[-1]
            if not at(lo)[k].status.applies:
                out.append(
                    BisectResult(
                        patch=patch.name,
                        verdict=Verdict.FAILS_AT_START,
                        first_bad=infos[lo],
                        result=at(lo)[k],
                    )
                )
                continue
            if at(hi)[k].status.applies:
                out.append(
                    BisectResult(
                        patch=patch.name,
                        verdict=Verdict.APPLIES_THROUGHOUT,
                        last_good=infos[hi],
                        result=at(hi)[k],
                    )
                )
                continue
            good, bad = lo, hi
            while bad - good > 1:
                mid = (good + bad) // 2
                if at(mid)[k].status.applies:
                    good = mid
                else:
                    bad = mid
            res = at(bad)[k]
            try:
                files = tuple(git.changed_paths(f"{chain[bad]}^", chain[bad], patch.files))
            except SourceError:  # a root commit has no parent
                files = ()
            verdict = Verdict.MERGED_UPSTREAM if res.status is Status.UPSTREAM else Verdict.BROKEN
            out.append(
                BisectResult(
                    patch=patch.name,
                    verdict=verdict,
                    last_good=infos[good],
                    first_bad=infos[bad],
                    result=res,
                    files=files,
                )
            )
    finally:
        engine.close()
    return BisectReport(
        repo=str(repo_path),
        old=old_info,
        new=new_info,
        range_size=len(commits),
        probes=len(probed),
        states=len(engine.memo),
        results=tuple(out),
    )
