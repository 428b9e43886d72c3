"""What a refresh is given (:class:`RefreshOptions`) and what it gives back: the result
of a finished one (:class:`RefreshResult`) or the stop where a person is needed
(:class:`RefreshStopped`, a PatchError carrying the facts as fields)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

from patchkit.core.errors import PatchError, Problem
from patchkit.core.record import JsonValue, Record, meta
from patchkit.core.text import printable
from patchkit.git.repo import CommitInfo
from patchkit.spec.series import Patch
from patchkit.upkeep.refresh.moved import Gone
from patchkit.upkeep.refresh.review import Finding
from patchkit.upkeep.upstreamed import Upstreamed

__all__ = [
    "CascadeOf",
    "ConflictedFile",
    "Dropped",
    "Duplicate",
    "EarlierAdded",
    "EarlierRemoved",
    "FileGone",
    "FileReport",
    "GoneFile",
    "LeftOut",
    "OwnContext",
    "RefreshOptions",
    "RefreshResult",
    "RefreshStop",
    "RefreshStopped",
    "Review",
    "StaleBefore",
    "StopReason",
    "UnreadableFile",
    "UpstreamTouched",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RefreshOptions:
    repo: Path  # the upstream repository (read-only)
    patches: tuple[Patch, ...]  # in series order
    patches_dir: Path
    onto: str
    workdir: Path
    base: str | None = None  # where the series applies today (the recipe pin)
    recipe_path: Path | None = None
    move_pin: bool = False
    # more recipes whose pin moves with recipe_path's (`patchkit bump`): all or none
    more_recipes: tuple[Path, ...] = ()
    drop_upstreamed: bool = False  # drop the patches found upstream instead of merging them
    drop: tuple[str, ...] = ()  # patches (names or files) to leave out from the start
    rerere: Path | None = None  # the recorded resolutions (None: none kept or replayed)
    # a series of independent patches: each merged onto ``onto`` alone, none on another
    independent: bool = False

    def __post_init__(self) -> None:
        # the merges run git in the scratch tree, elsewhere than the caller's folder: every
        # path is made absolute once, by the caller (the CLI), never guessed here
        for name in ("repo", "patches_dir", "workdir", "recipe_path", "rerere"):
            value = getattr(self, name)
            assert value is None or value.is_absolute(), f"RefreshOptions.{name} must be absolute: {value}"
        assert all(r.is_absolute() for r in self.more_recipes), "RefreshOptions.more_recipes must be absolute"


def _sha(commit: CommitInfo) -> str:
    return commit.sha


def _findings(findings: tuple[Finding, ...]) -> JsonValue:
    out: list[JsonValue] = [{"kind": f.kind, "path": f.path, "text": f.text} for f in findings]
    return out


def _proposed(found: tuple[Upstreamed, ...]) -> JsonValue:
    out: list[JsonValue] = [
        {"patch": u.file, "why": u.describe(), "commit": u.commit.sha if u.commit else None} for u in found
    ]
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class Dropped(Record):
    """A patch that left the series."""

    file: str = dataclasses.field(metadata=meta(key="patch"))
    """the patch file"""
    reason: str  # "already upstream (subject): abc123 ...", "--drop", "skipped at a stop", ...
    commit: CommitInfo | None = dataclasses.field(default=None, metadata=meta(encode=_sha))
    """the upstream commit (full sha) that has it, when known; else null"""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Review(Record):
    """A patch that merged cleanly but is to be reviewed (:mod:`~patchkit.upkeep.refresh.review`):
    what of it upstream's change may have made wrong."""

    json_derived: ClassVar[tuple[str | tuple[str, str], ...]] = ("names",)

    file: str = dataclasses.field(metadata=meta(key="patch"))
    """the patch file"""
    findings: tuple[Finding, ...] = dataclasses.field(metadata=meta(encode=_findings))
    """what to look at, each with its ``kind`` (nearby, inside, api), ``path`` and ``text``"""

    @property
    def names(self) -> tuple[str, ...]:
        """The functions it calls whose declaration upstream changed."""
        return tuple(dict.fromkeys(f.name for f in self.findings if f.name))


@dataclasses.dataclass(frozen=True, kw_only=True)
class RefreshResult(Record):
    """``refresh --json``: what a finished refresh did."""

    onto: str  # the commit (full sha) the series was refreshed onto
    updated: tuple[str, ...]  # patch files whose bytes changed
    unchanged: tuple[str, ...]  # patch files refreshed to the same bytes
    outside_when: tuple[str, ...]  # outside their When range at onto: left as they were
    pin_moved: bool  # whether the recipe's upstream.commit moved to onto
    dropped: tuple[Dropped, ...] = ()  # left the series (upstream, --skip, --drop, empty)
    upstream: tuple[Upstreamed, ...] = dataclasses.field(
        default=(), metadata=meta(key="proposed_for_dropping", encode=_proposed)
    )
    """found upstream but kept, proposed for dropping: each with its ``patch``, ``why`` and
    ``commit`` (full sha, or null)"""
    reused: int = 0  # conflict blocks resolved from recorded resolutions
    review: tuple[Review, ...] = ()  # merged cleanly, to review (series order)

    @property
    def skipped(self) -> tuple[str, ...]:
        """:attr:`outside_when` under its former name (bump's summary reads it)."""
        return self.outside_when


# -- a stop, as a record --------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class LeftOut:
    """A patch left out of this refresh that the stopped one was written on top of."""

    file: str
    dropped: str | None  # why it was dropped (``Dropped.reason``); None: outside its When range


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConflictedFile:
    """A file with conflict markers: its blocks (lines, the patch's hunk, who last touched
    them, a short excerpt of each side) as :func:`patchkit.upkeep.conflict.describe_file`
    tells them."""

    path: str
    blocks: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class GoneFile:
    """A file that did not merge though it holds no markers: one side deleted (renamed,
    split) it."""

    path: str
    gone: Gone


@dataclasses.dataclass(frozen=True, kw_only=True)
class UnreadableFile:
    """A conflicted file too big or not text enough to show."""

    path: str


FileReport = ConflictedFile | GoneFile | UnreadableFile


@dataclasses.dataclass(frozen=True, kw_only=True)
class Duplicate:
    """Lines a clean merge put in a second time."""

    path: str
    at: tuple[int, ...]  # the first line of each copy (1-based)
    lines: tuple[str, ...]  # the lines (as the patch adds them)
    commit: CommitInfo | None  # the upstream commit that added them meanwhile, when known


# why a merge stopped, each reason a record (the first line says them in order)
@dataclasses.dataclass(frozen=True, kw_only=True)
class FileGone:
    """Upstream deleted, renamed or split the file (or the patch deletes what upstream
    changed); ``path`` is None when it is the only file."""

    path: str | None
    gone: Gone


@dataclasses.dataclass(frozen=True, kw_only=True)
class CascadeOf:
    files: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class UpstreamTouched:
    """Upstream commits (short) last touched the conflicting lines."""

    commits: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class EarlierAdded:
    """The lines are an earlier patch's of this refresh (as refreshed here)."""

    patches: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class EarlierRemoved:
    """An earlier patch of this refresh (as resolved here) removed the lines."""

    patches: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class OwnContext:
    """No upstream commit of ``old..new`` and no earlier patch touched the lines."""

    old: str
    new: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class StaleBefore:
    """The patch does not go in on its own base either: stale before this sync."""

    base: str


StopReason = FileGone | CascadeOf | UpstreamTouched | EarlierAdded | EarlierRemoved | OwnContext | StaleBefore


def _reason(r: StopReason) -> str:
    match r:
        case FileGone(path=path, gone=gone):
            return gone.summary() if path is None else f"{path}: {gone.summary()}"
        case CascadeOf(files=files):
            return f"a cascade of {', '.join(files)}"
        case UpstreamTouched(commits=commits):
            return f"upstream {', '.join(commits)}"
        case EarlierAdded(patches=patches):
            return f"lines from the earlier patch {', '.join(patches)}"
        case EarlierRemoved(patches=patches):
            return f"lines the earlier patch {', '.join(patches)} removed"
        case OwnContext(old=old, new=new):
            return (
                f"no commit of {old[:12] or 'the old base'}..{new[:12]} "
                "and no earlier patch touched these lines: the patch's own context differs"
            )
        case StaleBefore(base=base):
            return (
                f"it does not apply on its own base {base[:12]} either, not even with "
                "reduced context: it was stale before this sync"
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class RefreshStop(Problem):
    """Where and why a refresh stopped, as fields; the CLI says it
    (``patchkit/cli/problems/refresh.py``: the detail lines and the next steps).

    ``kind``: ``conflict`` (``files`` hold conflict markers in ``tree``), ``apply`` (it does
    not apply and cannot be 3-way merged; ``errors``: git's), ``empty`` (merged onto
    ``onto``, it changes nothing), ``duplicate`` (a clean merge adds lines upstream added
    meanwhile a second time: ``duplicates``). ``commits``: the upstream commits (short)
    named; ``cascade``: the left-out patches it was written on top of; ``upstreamed``:
    what was found upstream of it; ``reports``: each conflicted file; ``reasons``: why, in
    the order the first line says them; ``review``: what of its cleanly merged files to
    look at too."""

    kind: str
    patch: str
    tree: Path
    onto: str = ""
    files: tuple[str, ...] = ()
    commits: tuple[str, ...] = ()
    cascade: tuple[LeftOut, ...] = ()
    upstreamed: Upstreamed | None = None
    reports: tuple[FileReport, ...] = ()
    reasons: tuple[StopReason, ...] = ()
    errors: tuple[str, ...] = ()
    duplicates: tuple[Duplicate, ...] = ()
    review: tuple[Finding, ...] = ()

    @property
    def summary(self) -> str:
        """The stop's one line (bump's summary quotes it; the CLI prints it)."""
        head = f"refresh stopped at {self.patch}: "
        if self.kind == "conflict":
            why = "; ".join(map(_reason, self.reasons))
            return head + f"conflicts in {', '.join(self.files)}" + (f" ({why})" if why else "")
        if self.kind == "apply":
            said = [_reason(r) for r in self.reasons if isinstance(r, StaleBefore)] + list(self.errors[:1])
            cascade = [r for r in self.reasons if isinstance(r, CascadeOf)]
            return (
                head
                + "it does not apply and cannot be 3-way merged"
                + (f" ({'; '.join(said)})" if said else "")
                + (f" ({_reason(cascade[0])})" if cascade else "")
            )
        if self.kind == "empty":
            assert self.upstreamed is not None
            found = printable(self.upstreamed.describe())
            return head + f"merged onto {self.onto[:12]} it changes nothing: {found}"
        return head + "the 3-way merge was clean but adds lines upstream added meanwhile a second time"


class RefreshStopped(PatchError):
    """The refresh stopped at ``patch`` where a person is needed; its state is kept in
    ``workdir`` for --continue, --skip, --drop and --abort. ``stop``: the stop as a record
    (:class:`RefreshStop`, also the error's problem); its fields are the error's
    attributes too (``kind``, ``patch``, ``files``, ``commits``, ``cascade`` as file names,
    ``errors``, ``upstreamed``, ``tree``)."""

    def __init__(self, stop: RefreshStop, *, workdir: Path) -> None:
        super().__init__(stop.summary, problem=stop)
        self.stop = stop
        self.kind = stop.kind
        self.patch = stop.patch
        self.workdir = workdir
        self.tree = stop.tree
        self.files = stop.files
        self.commits = stop.commits
        self.cascade = tuple(c.file for c in stop.cascade)
        self.errors = stop.errors
        self.upstreamed = stop.upstreamed
