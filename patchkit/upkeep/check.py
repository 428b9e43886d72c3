"""`patchkit check`: does the series still apply to upstream refs, and since when not?

Nothing is checked out: for each ref we read the ids of the blobs the series
touches straight from its tree (one ``ls-tree`` + one ``diff-tree --stdin`` for
any number of refs), and refs whose touched blobs are identical share one
verdict. The series is cumulative: patch N is checked on top of patches 1..N-1
(those that failed are left out, and said so; a patch that fails only because one
of them did is a *cascade* of it, :class:`CheckVerdict`).

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

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

from patchkit.core.enums import StrEnum
from patchkit.core.errors import ConfigError, PatchError, SourceError
from patchkit.git.repo import CommitInfo, Git, TreeEntry
from patchkit.spec.patchfile import Conflict, Hunk, parse_apply_output, parse_diff
from patchkit.spec.series import Patch
from patchkit.upkeep.scratch import (
    PatchVerdict,
    Scratch,
    Status,
)
from patchkit.upkeep.textapply import FileCache, FileContent, PatchText, blob_id, prepare, significant
from patchkit.upkeep.textapply import apply as apply_text

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

JSON_SCHEMA = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class RefResult:
    name: str  # as the user gave it (or the short sha for range commits)
    commit: CommitInfo
    results: tuple[CheckVerdict, ...]

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
    states: int  # distinct states of the touched files (commits with equal ones share a verdict)
    # how each patch's verdict came: "python" (upkeep.textapply), "git" (git apply in a
    # scratch folder), "reused" (its input files were the same as at an earlier commit)
    runs: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(r.failed for r in self.refs)

    def failures(self) -> list[tuple[RefResult, CheckVerdict]]:
        return [(r, p) for r in self.refs for p in r.results if p.status is Status.CONFLICTS]

    def to_json(self) -> dict[str, object]:
        return {
            "schema": JSON_SCHEMA,
            "kind": "check",
            "repo": self.repo,
            "ok": self.ok,
            "states": self.states,
            "runs": dict(self.runs),
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
    result: CheckVerdict | None = None  # the patch's result at first_bad (or at the start)
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
# a patch's input: (path, mode, blob id) of each file it touches, None/None when absent
_PreKey = tuple[tuple[str, str | None, str | None], ...]
_CHUNK = 64  # distinct states whose blobs are read in one `cat-file --batch`
_STEPS_KEPT = 16  # per patch: the last inputs and what they gave


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckVerdict(PatchVerdict):
    """A patch's result at one commit; ``cascade_of``: it conflicts only because these
    earlier patches failed (each conflicting hunk needs lines one of them adds)."""

    cascade_of: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        if self.cascade_of:
            return f"cascade of {', '.join(self.cascade_of)}"
        return super().label

    def to_json(self) -> dict[str, object]:
        return {**super().to_json(), "cascade_of": list(self.cascade_of)}


@dataclasses.dataclass(kw_only=True)
class _Step:
    """One patch on one set of input files: its verdict (no note yet), the files after it
    (applied only); for a conflict its input files, and once a cascade test asked, per
    conflict the lines its hunk needs that the file lacks."""

    verdict: PatchVerdict
    post: dict[str, FileContent | None]
    inputs: dict[str, FileContent | None] = dataclasses.field(default_factory=dict)
    missing: tuple[tuple[str, int | None, frozenset[bytes]], ...] | None = None


class _Engine:
    """Verdicts for the series at commits.

    Two memos: a whole commit's verdicts on (touched blobs, in-range mask), and each
    patch's verdict on its own input files (their blobs after the earlier patches), so a
    commit that changed one file re-checks only the patches whose input changed. A patch
    is checked by :mod:`upkeep.textapply` (git apply's matching, in Python), or by ``git
    apply`` in a scratch folder when it holds what that does not model.
    """

    def __init__(self, git: Git, patches: Sequence[Patch]) -> None:
        if not patches:
            raise ConfigError("no patches to check: the recipe selects none and --all was not given")
        self.git = git
        self.patches = tuple(patches)
        self.data = [(p.name, p.read_verified()) for p in self.patches]
        self.hunks: dict[str, tuple[Hunk, ...]] = {}
        self.files: dict[str, set[str]] = {}
        self.order: list[tuple[str, ...]] = []
        self.texts: list[PatchText | None] = []
        self.added: list[dict[str, frozenset[bytes]]] = []  # per patch: file -> lines it adds
        # per patch: (file, hunk number) -> the hunk's preimage lines (context and "-")
        self.preimages: list[dict[tuple[str, int], tuple[bytes, ...]]] = []
        self.creates: list[frozenset[str]] = []
        paths: list[str] = []
        for name, data in self.data:
            parsed = parse_diff(data)
            files = parsed.paths
            self.hunks[name] = parsed.hunks
            self.files[name] = set(files)
            self.order.append(tuple(files))
            self.texts.append(prepare(data, parsed))
            added: dict[str, set[bytes]] = {}
            pres: dict[tuple[str, int], tuple[bytes, ...]] = {}
            for f in parsed.files:
                for h in f.hunks:
                    for ln in h.added:
                        if s := significant(ln.encode("utf-8", "surrogateescape")):
                            added.setdefault(f.new_path, set()).add(s)
                    if h.before:
                        pres[(f.new_path, h.number)] = tuple(
                            ln.encode("utf-8", "surrogateescape") for ln in h.before
                        )
            self.added.append({f: frozenset(v) for f, v in added.items()})
            self.preimages.append(pres)
            self.creates.append(frozenset(f.new_path for f in parsed.files if f.status in ("A", "R", "C")))
            paths.extend(f for f in files if f not in paths)
        self.paths = tuple(paths)
        self.names = [name for name, _ in self.data]
        self.bounds = [when_bounds(git, p) for p in self.patches]
        self.memo: dict[_Key, tuple[CheckVerdict, ...]] = {}
        self.steps: list[dict[_PreKey, _Step]] = [{} for _ in self.patches]
        self.file_cache: list[FileCache] = [{} for _ in self.patches]
        self.line_sets: dict[str, frozenset[bytes]] = {}  # blob id -> its lines
        self.store: dict[str, bytes] = {}  # blob id -> bytes, of the states being evaluated
        self._scratch: Scratch | None = None
        self.stats = {"python": 0, "git": 0, "reused": 0}

    def close(self) -> None:
        if self._scratch is not None:
            self._scratch.close()

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
    ) -> list[tuple[CheckVerdict, ...]]:
        entries = self.git.tree_entries(commits, self.paths)
        if masks is None:
            masks = [self.in_range(c) for c in commits]
        keys: list[_Key] = [
            (tuple(sorted((p, e.mode, e.oid) for p, e in ent.items())), m) for ent, m in zip(entries, masks)
        ]
        todo = list({k: ent for k, ent in zip(keys, entries) if k not in self.memo}.items())
        for i in range(0, len(todo), _CHUNK):
            chunk = todo[i : i + _CHUNK]
            want = {e.oid for _, ent in chunk for e in ent.values() if e.mode != "160000"}
            self.store.update(self.git.read_blobs(o for o in want if o not in self.store))
            for key, ent in chunk:
                self.memo[key] = self._evaluate(ent, key[1])
            keep = {e.oid for e in chunk[-1][1].values()}  # the next commit is most like the last
            self.store = {o: b for o, b in self.store.items() if o in keep}
        return [self.memo[k] for k in keys]

    def _evaluate(self, entries: dict[str, TreeEntry], mask: tuple[bool, ...]) -> tuple[CheckVerdict, ...]:
        cur: dict[str, FileContent] = {
            p: FileContent(mode=e.mode, oid=e.oid, data=self.store.get(e.oid, b""))
            for p, e in entries.items()
        }
        out: list[CheckVerdict] = []
        left_out: list[int] = []
        for k, ((name, _data), inr) in enumerate(zip(self.data, mask)):
            if not inr:
                out.append(CheckVerdict(patch=name, status=Status.NA))
                continue
            pre: _PreKey = tuple(
                (f, cur[f].mode, cur[f].oid) if f in cur else (f, None, None) for f in self.order[k]
            )
            step = self.steps[k].get(pre)
            if step is None:
                step = self._step(k, {f: cur.get(f) for f in self.order[k]})
                memo = self.steps[k]
                if len(memo) >= _STEPS_KEPT:
                    del memo[next(iter(memo))]
                memo[pre] = step
            else:
                self.stats["reused"] += 1
            overlap = [self.data[j][0] for j in left_out if self.files[self.data[j][0]] & self.files[name]]
            v = step.verdict
            out.append(
                CheckVerdict(
                    patch=v.patch,
                    status=v.status,
                    offsets=v.offsets,
                    conflicts=v.conflicts,
                    note=f"checked without {', '.join(overlap)}" if overlap else "",
                    cascade_of=self._cascade(step, left_out),
                )
            )
            if v.status.applies:
                for f, content in step.post.items():
                    if content is None:
                        cur.pop(f, None)
                    else:
                        cur[f] = content
            elif v.status is Status.CONFLICTS:
                left_out.append(k)
        return tuple(out)

    def _cascade(self, step: _Step, left_out: Sequence[int]) -> tuple[str, ...]:
        """The earlier failed patches that explain every conflict of this one: each of its
        conflicting hunks needs a line (absent from the file) that one of them adds, or
        its file is one of them creates."""
        if step.verdict.status is not Status.CONFLICTS or not left_out:
            return ()
        name = step.verdict.patch
        if not any(self.files[self.data[j][0]] & self.files[name] for j in left_out):
            return ()
        if step.missing is None:
            step.missing = self._missing(self.names.index(name), step)
        if not step.missing:
            return ()
        who: set[int] = set()
        for file, hunk, missing in step.missing:
            found = [
                j
                for j in left_out
                if (hunk is None and file in self.creates[j])
                or (hunk is not None and missing & self.added[j].get(file, frozenset()))
            ]
            if not found:
                return ()
            who.update(found)
        return tuple(self.data[j][0] for j in sorted(who))

    def _step(self, k: int, files: dict[str, FileContent | None]) -> _Step:
        name = self.data[k][0]
        text = self.texts[k]
        if text is None or any(c is not None and c.mode not in ("100644", "100755") for c in files.values()):
            return self._git_step(k, files)
        self.stats["python"] += 1
        cache = self.file_cache[k]
        res = apply_text(text, files, cache=cache)
        if res.ok:
            status = Status.OFFSET if res.offsets else Status.APPLIES
            return _Step(
                verdict=PatchVerdict(patch=name, status=status, offsets=res.offsets), post=dict(res.post)
            )
        if apply_text(text, files, reverse=True, cache=cache).ok:
            return _Step(verdict=PatchVerdict(patch=name, status=Status.UPSTREAM), post={})
        return self._conflicts(k, files, res.conflicts)

    def _conflicts(
        self, k: int, files: dict[str, FileContent | None], conflicts: Sequence[Conflict]
    ) -> _Step:
        verdict = PatchVerdict(patch=self.data[k][0], status=Status.CONFLICTS, conflicts=tuple(conflicts))
        return _Step(verdict=verdict, post={}, inputs=files)

    def _missing(self, k: int, step: _Step) -> tuple[tuple[str, int | None, frozenset[bytes]], ...]:
        """Per conflict of a conflicting step: (file, hunk, the significant lines of its
        preimage the file lacks); () when a conflict is none a cascade could explain."""
        hunks = self.preimages[k]
        missing: list[tuple[str, int | None, frozenset[bytes]]] = []
        for c in step.verdict.conflicts:
            if c.hunk is None:
                if c.reason != "No such file or directory":
                    return ()
                missing.append((c.file, None, frozenset()))
                continue
            h = hunks.get((c.file, c.hunk))
            if h is None:
                return ()
            have = self._line_set(step.inputs.get(c.file))
            need = {s for ln in h if (s := significant(ln)) and ln.rstrip(b"\n") not in have}
            missing.append((c.file, c.hunk, frozenset(need)))
        return tuple(missing)

    def _line_set(self, content: FileContent | None) -> frozenset[bytes]:
        """The file's lines (without their newlines), as a set."""
        if content is None:
            return frozenset()
        got = self.line_sets.get(content.oid)
        if got is None:
            if len(self.line_sets) >= 64:
                del self.line_sets[next(iter(self.line_sets))]
            got = frozenset(content.data.split(b"\n"))
            self.line_sets[content.oid] = got
        return got

    def _git_step(self, k: int, files: dict[str, FileContent | None]) -> _Step:
        """``git apply`` in the scratch folder, holding only this patch's input files."""
        self.stats["git"] += 1
        if self._scratch is None:
            self._scratch = Scratch(self.data)
        scratch = self._scratch
        name = self.data[k][0]
        entries = {f: TreeEntry(mode=c.mode, oid=c.oid) for f, c in files.items() if c is not None}
        scratch.load(entries, {c.oid: c.data for c in files.values() if c is not None})
        ok, text = scratch.apply(name)
        if ok:
            offsets, _ = parse_apply_output(text, self.hunks[name])
            status = Status.OFFSET if offsets else Status.APPLIES
            post: dict[str, FileContent | None] = {}
            for f in self.order[k]:
                path = scratch.tree / f
                before = files.get(f)
                if path.is_symlink():
                    data, mode = os.readlink(path).encode("utf-8", "surrogateescape"), "120000"
                elif path.is_file():
                    data = path.read_bytes()
                    mode = "100755" if os.access(path, os.X_OK) else "100644"
                else:
                    post[f] = None
                    continue
                oid = blob_id(data)
                if before is not None and before.oid == oid:
                    mode = before.mode  # unchanged (a link or submodule entry stays what it was)
                post[f] = FileContent(mode=mode, oid=oid, data=data)
            return _Step(verdict=PatchVerdict(patch=name, status=status, offsets=tuple(offsets)), post=post)
        rev_ok, _ = scratch.apply(name, check=True, reverse=True)
        if rev_ok:
            return _Step(verdict=PatchVerdict(patch=name, status=Status.UPSTREAM), post={})
        _, text = scratch.apply(name, check=True, reject=True)
        _, conflicts = parse_apply_output(text, self.hunks[name])
        if not conflicts:
            raise PatchError(
                f"{name}: git apply cannot use the patch: " + _first_error(text),
                hint="regenerate it with `git diff`",
            )
        return self._conflicts(k, files, conflicts)


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
        runs=dict(engine.stats),
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
        runs=dict(engine.stats),
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
