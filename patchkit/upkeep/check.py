"""`patchkit check`: does the series still apply to upstream refs, and since when not?

Nothing is checked out: for each ref we read the ids of the blobs the series
touches straight from its tree (one ``ls-tree`` + one ``diff-tree --stdin`` for
any number of refs), and refs whose touched blobs are identical share one
verdict. Only distinct states are written to a scratch folder and run through
``git apply`` (see :mod:`patchkit.upkeep.scratch`). The series is cumulative: patch N
is checked on top of patches 1..N-1 (those that failed are left out, and said so).

``bisect`` binary-searches first-parent history for the first commit where each
patch stops applying: about log2(range) states, not the range.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from patchkit.core.enums import StrEnum
from patchkit.core.errors import ConfigError, PatchError, SourceError
from patchkit.git.repo import CommitInfo, Git, TreeEntry
from patchkit.spec.patchfile import Hunk, parse_apply_output, parse_diff
from patchkit.spec.series import Patch
from patchkit.upkeep.scratch import (
    PatchVerdict,
    Scratch,
    Status,
)

__all__ = [
    "BisectReport",
    "BisectResult",
    "CheckReport",
    "RefResult",
    "Verdict",
    "bisect",
    "check_range",
    "check_series",
    "in_when_range",
    "when_bounds",
]

JSON_SCHEMA = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class RefResult:
    name: str  # as the user gave it (or the short sha for range commits)
    commit: CommitInfo
    results: tuple[PatchVerdict, ...]

    @property
    def failed(self) -> bool:
        return any(r.status is Status.CONFLICTS for r in self.results)


def _commit_json(c: CommitInfo | None) -> dict[str, str] | None:
    if c is None:
        return None
    return {"sha": c.sha, "date": c.date, "subject": c.subject}


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckReport:
    repo: str
    patches: tuple[str, ...]
    refs: tuple[RefResult, ...]
    states: int  # distinct file states run through git apply

    @property
    def ok(self) -> bool:
        return not any(r.failed for r in self.refs)

    def failures(self) -> list[tuple[RefResult, PatchVerdict]]:
        return [(r, p) for r in self.refs for p in r.results if p.status is Status.CONFLICTS]

    def to_json(self) -> dict[str, object]:
        return {
            "schema": JSON_SCHEMA,
            "kind": "check",
            "repo": self.repo,
            "ok": self.ok,
            "states": self.states,
            "patches": list(self.patches),
            "refs": [
                {"ref": r.name, "commit": _commit_json(r.commit), "results": [p.to_json() for p in r.results]}
                for r in self.refs
            ],
        }


class Verdict(StrEnum):
    """What bisecting a range says about one patch."""

    APPLIES_THROUGHOUT = "applies-throughout"
    BROKEN = "broken"  # stops applying at first_bad
    MERGED_UPSTREAM = "merged-upstream"  # first_bad has it (it reverse-applies)
    FAILS_AT_START = "fails-at-start"
    NA = "n/a"  # outside its When range across the whole range


@dataclasses.dataclass(frozen=True, kw_only=True)
class BisectResult:
    patch: str
    verdict: Verdict
    last_good: CommitInfo | None = None
    first_bad: CommitInfo | None = None
    result: PatchVerdict | None = None  # the patch's result at first_bad (or at the start)
    files: tuple[str, ...] = ()  # the patch's files first_bad changed

    @property
    def failed(self) -> bool:
        return self.verdict in (Verdict.BROKEN, Verdict.FAILS_AT_START) and (
            self.result is not None and self.result.status is Status.CONFLICTS
        )

    def to_json(self) -> dict[str, object]:
        return {
            "patch": self.patch,
            "verdict": self.verdict.value,
            "last_good": _commit_json(self.last_good),
            "first_bad": _commit_json(self.first_bad),
            "result": self.result.to_json() if self.result else None,
            "files": list(self.files),
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class BisectReport:
    repo: str
    old: CommitInfo
    new: CommitInfo
    range_size: int  # first-parent commits in old..new
    probes: int  # commits looked at
    states: int  # distinct file states run through git apply
    results: tuple[BisectResult, ...]

    @property
    def ok(self) -> bool:
        return not any(r.failed for r in self.results)

    def to_json(self) -> dict[str, object]:
        return {
            "schema": JSON_SCHEMA,
            "kind": "bisect",
            "repo": self.repo,
            "ok": self.ok,
            "old": _commit_json(self.old),
            "new": _commit_json(self.new),
            "range_size": self.range_size,
            "probes": self.probes,
            "states": self.states,
            "results": [r.to_json() for r in self.results],
        }


_Key = tuple[tuple[tuple[str, str, str], ...], tuple[bool, ...]]


class _Engine:
    """Verdicts for the series at commits, memoised on (touched blobs, in-range mask)."""

    def __init__(self, git: Git, patches: Sequence[Patch]) -> None:
        if not patches:
            raise ConfigError("no patches to check: the recipe selects none and --all was not given")
        self.git = git
        self.patches = tuple(patches)
        self.data = [(p.name, p.read_verified()) for p in self.patches]
        self.hunks: dict[str, tuple[Hunk, ...]] = {}
        self.files: dict[str, set[str]] = {}
        paths: list[str] = []
        for name, data in self.data:
            parsed = parse_diff(data.decode("utf-8", "replace"))
            files = parsed.paths
            self.hunks[name] = parsed.hunks
            self.files[name] = set(files)
            paths.extend(f for f in files if f not in paths)
        self.paths = tuple(paths)
        self.bounds = [when_bounds(git, p) for p in self.patches]
        self.memo: dict[_Key, tuple[PatchVerdict, ...]] = {}
        self.scratch = Scratch(self.data)

    def close(self) -> None:
        self.scratch.close()

    # -- when ranges -------------------------------------------------------------
    def in_range(self, commit: str) -> tuple[bool, ...]:
        return tuple(
            (lo is None or self.git.is_ancestor(lo, commit))
            and (hi is None or self.git.is_ancestor(commit, hi))
            for lo, hi in self.bounds
        )

    def chain_masks(self, chain: Sequence[str]) -> list[tuple[bool, ...]]:
        """Masks for a first-parent chain (oldest first): each end is found by bisection,
        since "FROM is an ancestor" only turns true and "is an ancestor of TO" only false."""
        n = len(chain)
        cols: list[list[bool]] = []
        anc = self.git.is_ancestor
        for lo, hi in self.bounds:
            start = 0 if lo is None else _first_true(n, lambda i, lo=lo: anc(lo, chain[i]))
            stop = n if hi is None else _first_true(n, lambda i, hi=hi: not anc(chain[i], hi))
            cols.append([start <= i < stop for i in range(n)])
        return [tuple(col[i] for col in cols) for i in range(n)]

    # -- verdicts --------------------------------------------------------------------
    def results(
        self, commits: Sequence[str], masks: Sequence[tuple[bool, ...]] | None = None
    ) -> list[tuple[PatchVerdict, ...]]:
        entries = self.git.tree_entries(commits, self.paths)
        if masks is None:
            masks = [self.in_range(c) for c in commits]
        keys: list[_Key] = [
            (tuple(sorted((p, e.mode, e.oid) for p, e in ent.items())), m) for ent, m in zip(entries, masks)
        ]
        todo = {k: ent for k, ent in zip(keys, entries) if k not in self.memo}
        if todo:
            blobs = self.git.read_blobs(
                e.oid for ent in todo.values() for e in ent.values() if e.mode != "160000"
            )
            for key, ent in todo.items():
                self.memo[key] = self._evaluate(ent, blobs, key[1])
        return [self.memo[k] for k in keys]

    def _evaluate(
        self, entries: dict[str, TreeEntry], blobs: dict[str, bytes], mask: tuple[bool, ...]
    ) -> tuple[PatchVerdict, ...]:
        self.scratch.load(entries, blobs)
        out: list[PatchVerdict] = []
        left_out: list[str] = []
        for (name, _data), inr in zip(self.data, mask):
            if not inr:
                out.append(PatchVerdict(patch=name, status=Status.NA))
                continue
            overlap = [n for n in left_out if self.files[n] & self.files[name]]
            note = f"checked without {', '.join(overlap)}" if overlap else ""
            ok, text = self.scratch.apply(name)
            if ok:
                offsets, _ = parse_apply_output(text, self.hunks[name])
                out.append(
                    PatchVerdict(
                        patch=name,
                        status=Status.OFFSET if offsets else Status.APPLIES,
                        offsets=tuple(offsets),
                        note=note,
                    )
                )
                continue
            rev_ok, _ = self.scratch.apply(name, check=True, reverse=True)
            if rev_ok:
                out.append(PatchVerdict(patch=name, status=Status.UPSTREAM, note=note))
                continue
            _, text = self.scratch.apply(name, check=True, reject=True)
            _, conflicts = parse_apply_output(text, self.hunks[name])
            if not conflicts:
                raise PatchError(
                    f"{name}: git apply cannot use the patch: " + _first_error(text),
                    hint="regenerate it with `git diff`",
                )
            out.append(
                PatchVerdict(patch=name, status=Status.CONFLICTS, conflicts=tuple(conflicts), note=note)
            )
            left_out.append(name)
        return tuple(out)


def when_bounds(git: Git, p: Patch) -> tuple[str | None, str | None]:
    """The patch's When ends as full shas (None = open)."""
    ends: list[str | None] = []
    for label, end in (("start", p.when_from), ("end", p.when_to)):
        if end is None:
            ends.append(None)
            continue
        try:
            ends.append(git.resolve(end))
        except SourceError:
            raise PatchError(
                f"{p.filename}: When {label} {end} is not a commit in {git.repo}",
                hint="fetch newer history, or fix the patch's When header",
            ) from None
    return ends[0], ends[1]


def in_when_range(git: Git, p: Patch, commit: str) -> bool:
    """Whether ``commit`` lies in the patch's When range (FROM <= commit <= TO by ancestry)."""
    lo, hi = when_bounds(git, p)
    return (lo is None or git.is_ancestor(lo, commit)) and (hi is None or git.is_ancestor(commit, hi))


def _first_error(text: str) -> str:
    errs = [ln.removeprefix("error: ") for ln in text.splitlines() if ln.startswith("error: ")]
    return errs[0] if errs else (text.strip().splitlines() or ["no output"])[-1]


def _first_true(n: int, pred: object) -> int:
    """Smallest i in [0, n) with pred(i) for a predicate that is false...false true...true; n if none."""
    assert callable(pred)
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def check_series(repo_path: Path, patches: Sequence[Patch], refs: Sequence[str]) -> CheckReport:
    """The series checked against each ref (a branch, tag, sha, ``origin/master``...)."""
    git = Git(repo_path)
    if not refs:
        raise ConfigError("no refs to check against")
    shas = [git.resolve(r) for r in refs]
    infos = git.commit_infos(shas)
    engine = _Engine(git, patches)
    try:
        verdicts = engine.results(shas)
    finally:
        engine.close()
    return CheckReport(
        repo=str(repo_path),
        patches=tuple(p.name for p in patches),
        refs=tuple(RefResult(name=r, commit=infos[s], results=v) for r, s, v in zip(refs, shas, verdicts)),
        states=len(engine.memo),
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


def check_range(repo_path: Path, patches: Sequence[Patch], old: str, new: str) -> CheckReport:
    """The series checked against every first-parent commit of ``old..new`` (old excluded)."""
    git = Git(repo_path)
    _, _, commits = _range(git, old, new)
    engine = _Engine(git, patches)
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
    )


def bisect(repo_path: Path, patches: Sequence[Patch], old: str, new: str) -> BisectReport:
    """Per patch, the first commit of ``old..new`` (first-parent) where it stops applying.

    ``old`` is the known-good end. Assumes, like ``git bisect``, that a patch that
    stopped applying does not start again; probes are shared between patches.
    """
    git = Git(repo_path)
    old_info, new_info, commits = _range(git, old, new)
    chain = [old_info.sha] + [c.sha for c in commits]
    infos = [old_info, *commits]
    engine = _Engine(git, patches)
    probed: dict[int, tuple[PatchVerdict, ...]] = {}
    try:
        masks = engine.chain_masks(chain)

        def at(i: int) -> tuple[PatchVerdict, ...]:
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
