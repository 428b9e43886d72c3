"""The engine of `patchkit check` (:mod:`patchkit.upkeep.check`): one record per patch
(:class:`_PatchInfo`: its bytes, hunks, files, When bounds, the verdicts kept for its last
inputs) and :class:`Engine`, which takes the series through one state of the patched
files after another: each patch checked on the earlier patches' result (or, for a series
of independent patches, on the commit alone) by git apply's matching done in Python
(:mod:`patchkit.upkeep.textapply`) or ``git apply`` in a scratch folder for what that does
not model; a conflicting patch tried again with the failed earlier ones forced in, which
makes it their cascade when it then applies.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence

from patchkit.core.errors import ConfigError, PatchError, SourceError
from patchkit.git.repo import Git, TreeEntry
from patchkit.spec.patchfile import Conflict, Hunk, parse_apply_output, parse_diff
from patchkit.spec.series import Patch
from patchkit.upkeep.check_report import CheckVerdict
from patchkit.upkeep.scratch import PatchVerdict, Scratch, Status
from patchkit.upkeep.textapply import (
    FileCache,
    FileContent,
    PatchText,
    blob_id,
    force,
    prepare,
    significant,
)
from patchkit.upkeep.textapply import apply as apply_text

__all__ = ["Engine", "in_when_range", "when_bounds"]

_Key = tuple[tuple[tuple[str, str, str], ...], tuple[bool, ...]]
# a patch's input: (path, mode, blob id) of each file it touches, None/None when absent
_PreKey = tuple[tuple[str, str | None, str | None], ...]
_CHUNK = 64  # distinct states whose blobs are read in one `cat-file --batch`
_STEPS_KEPT = 16  # per patch: the last inputs and what they gave


@dataclasses.dataclass(kw_only=True)
class _Step:
    """One patch on one set of input files: its verdict (no note yet), the files after it
    (applied only); for a conflict its input files, and once a cascade test asked, per
    conflict the lines its hunk needs that the file lacks."""

    verdict: PatchVerdict
    post: dict[str, FileContent | None]
    inputs: dict[str, FileContent | None] = dataclasses.field(default_factory=dict)
    missing: tuple[tuple[str, int | None, frozenset[bytes]], ...] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class _PatchInfo:
    """What the engine keeps of one patch: read once from its file, and its own memos."""

    name: str
    data: bytes
    hunks: tuple[Hunk, ...]
    files: tuple[str, ...]  # every path it reads or writes, in order
    text: PatchText | None  # its hunks for upkeep.textapply; None: git apply decides
    added: Mapping[str, frozenset[bytes]]  # file -> the significant lines it adds
    # (file, hunk number) -> the hunk's preimage lines (context and "-")
    preimages: Mapping[tuple[str, int], tuple[bytes, ...]]
    creates: frozenset[str]  # the files it creates (new, renamed to, copied to)
    bounds: tuple[str | None, str | None]  # its When range's ends, as commits
    # its verdicts on its input files (the memo), and textapply's cache of their lines
    steps: dict[_PreKey, _Step] = dataclasses.field(default_factory=dict)
    shadow: dict[tuple[tuple[str, str | None], ...], tuple[bool, Mapping[str, FileContent | None]]] = (
        dataclasses.field(default_factory=dict)
    )
    file_cache: FileCache = dataclasses.field(default_factory=dict)

    @classmethod
    def read(cls, git: Git, patch: Patch) -> _PatchInfo:
        data = patch.read_verified()
        parsed = parse_diff(data)
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
        return cls(
            name=patch.name,
            data=data,
            hunks=parsed.hunks,
            files=parsed.paths,
            text=prepare(data, parsed),
            added={f: frozenset(v) for f, v in added.items()},
            preimages=pres,
            creates=frozenset(f.new_path for f in parsed.files if f.status in ("A", "R", "C")),
            bounds=when_bounds(git, patch),
        )

    def touches(self, other: _PatchInfo) -> bool:
        return not set(self.files).isdisjoint(other.files)


class Engine:
    """Verdicts for the series at commits.

    Two memos: a whole commit's verdicts on (touched blobs, in-range mask), and each
    patch's verdict on its own input files (their blobs after the earlier patches), so a
    commit that changed one file re-checks only the patches whose input changed. A patch
    is checked by :mod:`upkeep.textapply` (git apply's matching, in Python), or by ``git
    apply`` in a scratch folder when it holds what that does not model.
    """

    def __init__(self, git: Git, patches: Sequence[Patch], *, independent: bool = False) -> None:
        if not patches:
            raise ConfigError("no patches to check: the recipe selects none and --all was not given")
        self.git = git
        self.independent = independent  # each patch on the commit alone, none on another
        self.patches = tuple(patches)
        self.series = [_PatchInfo.read(git, p) for p in self.patches]
        paths: list[str] = []
        for e in self.series:
            paths.extend(f for f in e.files if f not in paths)
        self.paths = tuple(paths)
        # per patch: the files a later patch touches (only those need its forced result)
        self.later: list[frozenset[str]] = []
        seen: set[str] = set()
        for e in reversed(self.series):
            self.later.append(frozenset(seen))
            seen.update(e.files)
        self.later.reverse()
        self.memo: dict[_Key, tuple[CheckVerdict, ...]] = {}
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
            for lo, hi in (e.bounds for e in self.series)
        )

    def chain_masks(self, chain: Sequence[str]) -> list[tuple[bool, ...]]:
        """Masks for a first-parent chain (oldest first): each end is found by bisection,
        since "FROM is an ancestor" only turns true and "is an ancestor of TO" only false."""
        n = len(chain)
        cols: list[list[bool]] = []
        anc = self.git.is_ancestor
        for lo, hi in (e.bounds for e in self.series):
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
        # the files as they would be with the patches that failed put in anyway (forced,
        # :func:`textapply.force`), where that differs from ``cur``: a patch that applies
        # there fails only because of them
        shadow: dict[str, FileContent | None] = {}
        for k, (e, inr) in enumerate(zip(self.series, mask)):
            if not inr:
                out.append(CheckVerdict(patch=e.name, status=Status.NA))
                continue
            pre: _PreKey = tuple(
                (f, cur[f].mode, cur[f].oid) if f in cur else (f, None, None) for f in e.files
            )
            step = e.steps.get(pre)
            if step is None:
                step = self._step(k, {f: cur.get(f) for f in e.files})
                memo = e.steps
                if len(memo) >= _STEPS_KEPT:
                    del memo[next(iter(memo))]
                memo[pre] = step
            else:
                self.stats["reused"] += 1
            overlap = [self.series[j].name for j in left_out if self.series[j].touches(e)]
            v = step.verdict
            view: dict[str, FileContent | None] = {}
            on_shadow: tuple[bool, Mapping[str, FileContent | None]] | None = None
            if self.independent:
                pass  # nothing to cascade from
            elif e.text is not None and (v.status is Status.CONFLICTS or any(f in shadow for f in e.files)):
                same = not any(f in shadow for f in e.files)
                view = {f: shadow[f] if f in shadow else cur.get(f) for f in e.files}
                on_shadow = self._on_shadow(
                    k, view, fails=same and v.status is Status.CONFLICTS, needed=self.later[k]
                )
            if v.status is Status.CONFLICTS and on_shadow is not None and on_shadow[0] and overlap:
                cascade = tuple(overlap)
            else:
                cascade = self._cascade(k, step, left_out)
            out.append(
                CheckVerdict(
                    patch=v.patch,
                    status=v.status,
                    offsets=v.offsets,
                    conflicts=v.conflicts,
                    note=f"checked without {', '.join(overlap)}" if overlap else "",
                    cascade_of=cascade,
                )
            )
            if self.independent:
                continue
            if v.status.applies:
                for f, content in step.post.items():
                    if content is None:
                        cur.pop(f, None)
                    else:
                        cur[f] = content
            elif v.status is Status.CONFLICTS:
                left_out.append(k)
            for f in e.files:
                if on_shadow is None:
                    shadow.pop(f, None)  # not modelled: taken as the plain result
                    continue
                got = on_shadow[1][f] if f in on_shadow[1] else view.get(f)
                now = cur.get(f)
                if (got is None) == (now is None) and (got is None or now is None or got.oid == now.oid):
                    shadow.pop(f, None)
                else:
                    shadow[f] = got
        return tuple(out)

    def _on_shadow(
        self,
        k: int,
        view: dict[str, FileContent | None],
        *,
        fails: bool = False,
        needed: frozenset[str] = frozenset(),
    ) -> tuple[bool, Mapping[str, FileContent | None]]:
        """Patch ``k`` on the files with the failed earlier patches forced in: (whether it
        applies there, the files after it: applied, else forced too, those in ``needed``
        only: the files a later patch reads). ``fails``: the files are the ones it was
        just checked on and failed."""
        e = self.series[k]
        assert e.text is not None
        key = tuple((f, c.oid if c else None) for f, c in sorted(view.items()))
        got = e.shadow.get(key)
        if got is None:
            res = None if fails else apply_text(e.text, view, cache=e.file_cache)
            if res is not None and res.ok:
                got = (True, res.post)
            else:
                want = {f: c for f, c in view.items() if f in needed}
                got = (False, force(e.text, want) if want else {})
            if len(e.shadow) >= _STEPS_KEPT:
                del e.shadow[next(iter(e.shadow))]
            e.shadow[key] = got
        return got

    def _cascade(self, k: int, step: _Step, left_out: Sequence[int]) -> tuple[str, ...]:
        """The earlier failed patches that explain every conflict of this one: each of its
        conflicting hunks needs a line (absent from the file) that one of them adds, or
        its file is one of them creates."""
        if step.verdict.status is not Status.CONFLICTS or not left_out:
            return ()
        if not any(self.series[j].touches(self.series[k]) for j in left_out):
            return ()
        if step.missing is None:
            step.missing = self._missing(k, step)
        if not step.missing:
            return ()
        who: set[int] = set()
        for file, hunk, missing in step.missing:
            found = [
                j
                for j in left_out
                if (hunk is None and file in self.series[j].creates)
                or (hunk is not None and missing & self.series[j].added.get(file, frozenset()))
            ]
            if not found:
                return ()
            who.update(found)
        return tuple(self.series[j].name for j in sorted(who))

    def _step(self, k: int, files: dict[str, FileContent | None]) -> _Step:
        name, text = self.series[k].name, self.series[k].text
        if text is None or any(c is not None and c.mode not in ("100644", "100755") for c in files.values()):
            return self._git_step(k, files)
        self.stats["python"] += 1
        cache = self.series[k].file_cache
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
        verdict = PatchVerdict(patch=self.series[k].name, status=Status.CONFLICTS, conflicts=tuple(conflicts))
        return _Step(verdict=verdict, post={}, inputs=files)

    def _missing(self, k: int, step: _Step) -> tuple[tuple[str, int | None, frozenset[bytes]], ...]:
        """Per conflict of a conflicting step: (file, hunk, the significant lines of its
        preimage the file lacks); () when a conflict is none a cascade could explain."""
        hunks = self.series[k].preimages
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
            self._scratch = Scratch([(e.name, e.data) for e in self.series])
        scratch = self._scratch
        patch = self.series[k]
        name = patch.name
        entries = {f: TreeEntry(mode=c.mode, oid=c.oid) for f, c in files.items() if c is not None}
        scratch.load(entries, {c.oid: c.data for c in files.values() if c is not None})
        ok, text = scratch.apply(name)
        if ok:
            offsets, _ = parse_apply_output(text, patch.hunks)
            status = Status.OFFSET if offsets else Status.APPLIES
            post: dict[str, FileContent | None] = {}
            for f in patch.files:
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
        _, conflicts = parse_apply_output(text, patch.hunks)
        if not conflicts:  # git apply cannot read it (a hunk's counts off): this patch's verdict
            why = "git apply cannot read the patch: " + _first_error(text)
            conflicts = [Conflict(file=f, hunk=None, header="", reason=why) for f in patch.files[:1]]
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
