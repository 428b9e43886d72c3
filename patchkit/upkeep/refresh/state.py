"""The record of a refresh in progress: ``WORKDIR/refresh-state.json``.

:class:`RefreshState` is a record (:mod:`patchkit.core.record`): its fields are the file
format and one converter reads and writes it. Each field checks its own values (commits
are 40 hex digits, patch files are plain names, the recipe and the patches folder are
absolute paths); :meth:`RefreshState.load` adds what relates fields to each other. The
merge loop moves it on only through its methods (:meth:`~RefreshState.advance`,
:meth:`~RefreshState.drop_current`), which keep one commit per patch done.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path

from patchkit.core.errors import PatchError
from patchkit.core.fs import atomic_write_json
from patchkit.core.record import RecordError, decode, encode, meta
from patchkit.git.repo import CommitInfo
from patchkit.upkeep.refresh.options import Dropped, Review
from patchkit.upkeep.refresh.problems import NoRefreshHere, StateUnusable
from patchkit.upkeep.refresh.review import Finding
from patchkit.upkeep.upstreamed import Upstreamed

__all__ = [
    "STATE_FILE",
    "DropRecord",
    "NoRefresh",
    "PatchState",
    "RefreshState",
    "ReviewRecord",
    "StateDamaged",
    "UpstreamRecord",
]

STATE_FILE = "refresh-state.json"
_STATE_VERSION = 2
_MAX_STATE = 16 << 20
_SHA = re.compile(r"[0-9a-f]{40}")
STOP_KINDS = ("conflict", "apply", "empty", "duplicate")


def _sha(value: str) -> bool:
    return _SHA.fullmatch(value) is not None


def _sha_or_empty(value: str) -> bool:
    return value == "" or _sha(value)


def _shas(values: list[str | None]) -> bool:
    return all(v is None or _sha(v) for v in values)


def _plain_name(value: str) -> bool:
    """A file name inside one folder: no folder part, nothing that leads elsewhere."""
    return (
        value not in ("", ".", "..")
        and Path(value).name == value
        and not any(c in value for c in "/\\\0")
        and value.isprintable()
    )


def _absolute(value: str) -> bool:
    return value != "" and "\0" not in value and Path(value).is_absolute()


def _recipe_path(value: str) -> bool:
    return _absolute(value) and value.endswith(".toml")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PatchState:
    name: str
    file: str = dataclasses.field(metadata=meta(check=_plain_name))
    sha256: str = dataclasses.field(
        metadata=meta(check=lambda v: re.fullmatch(r"[0-9a-f]{64}", v) is not None)
    )
    # outside its When range at onto: left as it is (the file's key is "skip")
    outside_when: bool = dataclasses.field(metadata=meta(key="skip"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class UpstreamRecord:
    """A patch found upstream (a rule of upkeep.upstreamed, or ``effect``)."""

    file: str
    rule: str
    detail: str = ""
    sha: str = dataclasses.field(default="", metadata=meta(check=_sha_or_empty))  # '' when none was found
    date: str = ""
    subject: str = ""

    def upstreamed(self) -> Upstreamed:
        commit = CommitInfo(sha=self.sha, date=self.date, subject=self.subject) if self.sha else None
        return Upstreamed(file=self.file, rule=self.rule, commit=commit, detail=self.detail)

    @classmethod
    def of(cls, u: Upstreamed) -> UpstreamRecord:
        c = u.commit
        return cls(
            file=u.file,
            rule=u.rule,
            detail=u.detail,
            sha=c.sha if c else "",
            date=c.date if c else "",
            subject=c.subject if c else "",
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class DropRecord:
    """A patch that leaves the series, as the state file keeps it (:class:`Dropped` in
    the result)."""

    file: str
    reason: str
    sha: str = dataclasses.field(default="", metadata=meta(check=_sha_or_empty))
    date: str = ""
    subject: str = ""

    def dropped(self) -> Dropped:
        commit = CommitInfo(sha=self.sha, date=self.date, subject=self.subject) if self.sha else None
        return Dropped(file=self.file, reason=self.reason, commit=commit)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReviewRecord:
    """One finding of a clean merge to review (:class:`~patchkit.upkeep.refresh.review.Finding`)."""

    file: str  # the patch
    kind: str = dataclasses.field(metadata=meta(check=lambda v: v in ("nearby", "inside", "api")))
    path: str
    text: str
    name: str = ""

    def finding(self) -> Finding:
        return Finding(kind=self.kind, path=self.path, text=self.text, name=self.name)


class StateDamaged(PatchError):
    """refresh-state.json cannot be used as it is (unreadable, another version, damaged);
    ``path`` and ``workdir`` say where. The refresh can only be aborted."""

    def __init__(self, path: Path, workdir: Path, why: str) -> None:
        problem = StateUnusable(path=path, workdir=workdir, why=why)
        super().__init__(f"{path} {why}", problem=problem)
        self.path = path
        self.workdir = workdir
        self.why = why


class NoRefresh(PatchError):
    """No refresh is in progress in ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(f"no refresh in progress in {workdir}", problem=NoRefreshHere(workdir=workdir))
        self.workdir = workdir


@dataclasses.dataclass(kw_only=True)
class RefreshState:
    """A refresh in progress, advanced one patch at a time."""

    version: int = _STATE_VERSION  # another version's state is not read (load says so)
    repo: str = dataclasses.field(metadata=meta(check=lambda v: v != "" and "\0" not in v))
    onto: str = dataclasses.field(metadata=meta(check=_sha))
    base: str = dataclasses.field(metadata=meta(check=_sha))  # the scratch commit the patches go onto
    # the scratch commit of the old base's files ('' without a base)
    old_root: str = dataclasses.field(default="", metadata=meta(check=_sha_or_empty))
    # the upstream commit the series applied on ('' unknown)
    upstream_base: str = dataclasses.field(default="", metadata=meta(check=_sha_or_empty))
    patches_dir: str = dataclasses.field(metadata=meta(check=_absolute))
    recipe: str | None = dataclasses.field(
        metadata=meta(absent=None, check=lambda v: v is None or _recipe_path(v))
    )
    move_pin: bool
    patches: list[PatchState]
    # the index of the patch to do next (the file's key is "next")
    next_index: int = dataclasses.field(default=0, metadata=meta(key="next", required=True))
    # one per patch done (None: not applied: outside When, dropped)
    commits: list[str | None] = dataclasses.field(
        default_factory=list, metadata=meta(required=True, check=_shas)
    )
    # each patch's commit on the old base (None: it does not apply there, or no base)
    old_commits: list[str | None] = dataclasses.field(
        default_factory=list, metadata=meta(required=True, check=_shas)
    )
    # pins moved with recipe's; the key only when there are any
    more_recipes: list[str] = dataclasses.field(
        default_factory=list, metadata=meta(omit="empty", check=lambda v: all(map(_recipe_path, v)))
    )
    drop_upstreamed: bool = False
    # a series of independent patches: each patch's commit sits on ``base`` (and on
    # ``old_root`` for the old ones), none on another
    independent: bool = False
    to_drop: list[str] = dataclasses.field(default_factory=list)  # files to drop when reached
    found: list[UpstreamRecord] = dataclasses.field(default_factory=list)
    dropped: list[DropRecord] = dataclasses.field(default_factory=list)
    # whether resolutions are recorded and replayed ('' none); the folder is the caller's
    rerere: str = dataclasses.field(default="", metadata=meta(check=lambda v: v == "" or _absolute(v)))
    reused: int = dataclasses.field(default=0, metadata=meta(check=lambda v: v >= 0))
    # what the clean merges left to review, per patch (the key only when there is any)
    review: list[ReviewRecord] = dataclasses.field(default_factory=list, metadata=meta(omit="empty"))
    # why it stopped at the current patch: conflict | apply | empty | duplicate ('' running);
    # the file's key is "stop"
    stop_kind: str = dataclasses.field(
        default="", metadata=meta(key="stop", check=lambda v: v in ("", *STOP_KINDS))
    )
    # the conflicted files saved in conflicts/ (<sha256 of the path>.txt)
    conflicts: list[str] = dataclasses.field(
        default_factory=list,
        metadata=meta(check=lambda v: all(re.fullmatch(r"[0-9a-f]{64}\.txt", c) for c in v)),
    )

    # -- reading -----------------------------------------------------------------------------
    @property
    def recipes(self) -> list[str]:
        return ([self.recipe] if self.recipe else []) + self.more_recipes

    @property
    def done(self) -> bool:
        return self.next_index >= len(self.patches)

    @property
    def current(self) -> PatchState:
        return self.patches[self.next_index]

    @property
    def dropped_files(self) -> set[str]:
        return {d.file for d in self.dropped}

    def upstreamed(self, file: str) -> Upstreamed | None:
        """What was found upstream of ``file`` (None: nothing)."""
        return next((f.upstreamed() for f in self.found if f.file == file), None)

    # -- moving on (each keeps one commit per patch done) ---------------------------------------
    @property
    def tip(self) -> str:
        """The commit the current patch is merged onto: the last patch done's (the new base
        before any); with ``independent`` always the new base."""
        if self.independent:
            return self.base
        return next((c for c in reversed(self.commits) if c), self.base)

    def advance(self, commit: str | None) -> None:
        """The current patch is done: its commit (None: left out)."""
        self.commits.append(commit)
        self.next_index += 1

    def drop_current(self, reason: str, upstreamed: Upstreamed | None = None) -> None:
        """The current patch leaves the series (``reason``; the upstream commit that has it)."""
        c = upstreamed.commit if upstreamed else None
        self.dropped.append(
            DropRecord(
                file=self.current.file,
                reason=reason,
                sha=c.sha if c else "",
                date=c.date if c else "",
                subject=c.subject if c else "",
            )
        )
        self.advance(None)

    def note_upstream(self, u: Upstreamed) -> None:
        """Keep what was found upstream of a patch (the first finding stays)."""
        if self.upstreamed(u.file) is None:
            self.found.append(UpstreamRecord.of(u))

    def note_review(self, file: str, findings: list[Finding]) -> None:
        """What of a patch that merged cleanly (or its files that did, at a stop) to review."""
        for f in findings:
            r = ReviewRecord(file=file, kind=f.kind, path=f.path, text=f.text, name=f.name)
            if r not in self.review:
                self.review.append(r)

    def reviews(self) -> tuple[Review, ...]:
        """The patches to review (series order), those that left the series not among them."""
        gone = self.dropped_files
        out: list[Review] = []
        for p in self.patches:
            mine = tuple(r.finding() for r in self.review if r.file == p.file)
            if mine and p.file not in gone:
                out.append(Review(file=p.file, findings=mine))
        return tuple(out)

    def remap_commits(self, remap: Mapping[str, str]) -> None:
        """The base and the commits done, rewritten (``remap``: old commit → new)."""
        self.base = remap[self.base]
        self.commits = [remap[c] if c else None for c in self.commits]

    # -- the file ------------------------------------------------------------------------------
    def save(self, workdir: Path) -> None:
        atomic_write_json(workdir / STATE_FILE, encode(self))

    def _disagreement(self) -> str:
        """What relates the fields to each other and does not hold ('' when all does)."""
        files = {p.file for p in self.patches}
        if not (0 <= self.next_index <= len(self.patches)) or len(self.commits) != self.next_index:
            return "its counters disagree"
        if len(self.old_commits) != len(self.patches) or len(files) != len(self.patches):
            return "its counters disagree"
        if not (Path(self.patches_dir) / "series").is_file() or not all(
            Path(r).is_file() for r in self.recipes
        ):
            return "names a patches/ folder or a recipe that is not there"
        # a dropped patch's file is removed at the end: only ever one of the series'
        if any(
            f not in files
            for f in [
                *self.to_drop,
                *(d.file for d in self.dropped),
                *(f.file for f in self.found),
                *(r.file for r in self.review),
            ]
        ):
            return "names files outside its series"
        return ""

    @classmethod
    def load(cls, workdir: Path) -> RefreshState:
        path = workdir / STATE_FILE
        if not path.is_file():
            raise NoRefresh(workdir)
        try:
            if path.stat().st_size > _MAX_STATE:
                raise ValueError(f"larger than {_MAX_STATE >> 20} MiB")
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError, RecursionError) as e:
            raise StateDamaged(path, workdir, f"is unreadable ({str(e)[:200] or type(e).__name__})") from None
        if not isinstance(data, dict) or data.get("version") != _STATE_VERSION:
            raise StateDamaged(path, workdir, "was written by another patchkit version")
        try:
            state = decode(cls, data)
        except RecordError as e:
            raise StateDamaged(
                path, workdir, f"is damaged ({e.key}: a field is missing or of the wrong type or value)"
            ) from None
        why = state._disagreement()
        if why:
            raise StateDamaged(path, workdir, f"is damaged ({why})")
        return state
