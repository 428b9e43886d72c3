"""What ``check`` and ``bisect`` report (:mod:`patchkit.upkeep.check`): a verdict per
patch per ref, the range's and bisect's results, and their ``--json``."""

from __future__ import annotations

import dataclasses

from patchkit.core.enums import StrEnum
from patchkit.git.repo import CommitInfo
from patchkit.upkeep.scratch import PatchVerdict, Status
from patchkit.upkeep.upstreamed import Upstreamed

__all__ = ["BisectReport", "BisectResult", "CheckReport", "CheckVerdict", "RefResult", "Verdict"]

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
    # patches found upstream between the base (the pin, a range's start) and the last ref
    # by upkeep.upstreamed's rules, or because they reverse-apply there: proven or proposed
    upstream: tuple[Upstreamed, ...] = ()
    base: CommitInfo | None = None

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
            "base": _commit_json(self.base),
            "upstream": [{**u.to_json(), "proven": u.proven, "evidence": u.evidence} for u in self.upstream],
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
