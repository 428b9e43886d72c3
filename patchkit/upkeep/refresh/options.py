"""What a refresh is given (:class:`RefreshOptions`) and what it gives back: the result
of a finished one (:class:`RefreshResult`) or the stop where a person is needed
(:class:`RefreshStopped`, a PatchError carrying the facts as fields)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from patchkit.core.errors import PatchError
from patchkit.git.repo import CommitInfo
from patchkit.spec.series import Patch
from patchkit.upkeep.refresh.review import Finding
from patchkit.upkeep.upstreamed import Upstreamed

__all__ = ["Dropped", "RefreshOptions", "RefreshResult", "RefreshStopped", "Review"]


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class Dropped:
    """A patch that left the series."""

    file: str
    reason: str  # "already upstream (subject): abc123 ...", "--drop", "skipped at a stop", ...
    commit: CommitInfo | None = None  # the upstream commit that has it, when known

    def to_json(self) -> dict[str, object]:
        return {
            "patch": self.file,
            "reason": self.reason,
            "commit": None if self.commit is None else self.commit.sha,
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class Review:
    """A patch that merged cleanly but is to be reviewed (:mod:`~patchkit.upkeep.refresh.review`):
    what of it upstream's change may have made wrong."""

    file: str
    findings: tuple[Finding, ...]

    @property
    def names(self) -> tuple[str, ...]:
        """The functions it calls whose declaration upstream changed."""
        return tuple(dict.fromkeys(f.name for f in self.findings if f.name))

    def to_json(self) -> dict[str, object]:
        return {
            "patch": self.file,
            "names": list(self.names),
            "findings": [{"kind": f.kind, "path": f.path, "text": f.text} for f in self.findings],
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class RefreshResult:
    onto: str
    updated: tuple[str, ...]  # patch files whose bytes changed
    unchanged: tuple[str, ...]
    outside_when: tuple[str, ...]  # outside their When range at onto: left as they were
    pin_moved: bool
    dropped: tuple[Dropped, ...] = ()  # left the series (upstream, --skip, --drop, empty)
    upstream: tuple[Upstreamed, ...] = ()  # found upstream but kept: proposed for dropping
    reused: int = 0  # conflict blocks resolved from recorded resolutions
    review: tuple[Review, ...] = ()  # merged cleanly, to review (series order)

    @property
    def skipped(self) -> tuple[str, ...]:
        """:attr:`outside_when` under its former name (bump's summary reads it)."""
        return self.outside_when

    def to_json(self) -> dict[str, object]:
        return {
            "onto": self.onto,
            "updated": list(self.updated),
            "unchanged": list(self.unchanged),
            "outside_when": list(self.outside_when),
            "pin_moved": self.pin_moved,
            "dropped": [d.to_json() for d in self.dropped],
            "proposed_for_dropping": [
                {"patch": u.file, "why": u.describe(), "commit": u.commit.sha if u.commit else None}
                for u in self.upstream
            ],
            "reused": self.reused,
            "review": [r.to_json() for r in self.review],
        }


class RefreshStopped(PatchError):
    """The refresh stopped at ``patch`` where a person is needed; its state is kept in
    ``workdir`` for --continue, --skip, --drop and --abort.

    ``kind``: ``conflict`` (``files`` hold conflict markers in ``tree``), ``apply`` (it does
    not apply and cannot be 3-way merged; ``errors``: git's), ``empty`` (merged, it changes
    nothing), ``duplicate`` (a clean merge adds lines upstream added meanwhile a second
    time). ``commits``: the upstream commits (short) that last touched the conflicting
    lines; ``cascade``: the left-out patches it was written on top of; ``upstreamed``:
    what was found upstream of it."""

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        patch: str,
        workdir: Path,
        detail: str = "",
        hint: str = "",
        files: tuple[str, ...] = (),
        commits: tuple[str, ...] = (),
        cascade: tuple[str, ...] = (),
        errors: tuple[str, ...] = (),
        upstreamed: Upstreamed | None = None,
    ) -> None:
        super().__init__(message, detail=detail, hint=hint)
        self.kind = kind
        self.patch = patch
        self.workdir = workdir
        self.tree = workdir / "tree"
        self.files = files
        self.commits = commits
        self.cascade = cascade
        self.errors = errors
        self.upstreamed = upstreamed
