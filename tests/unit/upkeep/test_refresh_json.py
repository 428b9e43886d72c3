"""`patchkit refresh --json`: the finished refresh's result, as records write it (the exact
document, key for key)."""

from __future__ import annotations

from patchkit.git.repo import CommitInfo
from patchkit.upkeep.refresh.options import Dropped, RefreshResult, Review
from patchkit.upkeep.refresh.review import Finding
from patchkit.upkeep.upstreamed import Upstreamed

C = CommitInfo(sha="a" * 40, date="2026-01-01T00:00:00Z", subject="core: a helper (#7)")


def test_the_result_document_key_for_key() -> None:
    result = RefreshResult(
        onto="b" * 40,
        updated=("0001-a.patch",),
        unchanged=("0002-b.patch",),
        outside_when=("0003-c.patch",),
        pin_moved=True,
        dropped=(
            Dropped(file="0004-d.patch", reason="--drop"),
            Dropped(file="0005-e.patch", reason="already upstream", commit=C),
        ),
        upstream=(
            Upstreamed(file="0006-f.patch", rule="subject", commit=C),
            Upstreamed(file="0007-g.patch", rule="pull-request", commit=None, detail="#9"),
        ),
        reused=2,
        review=(
            Review(
                file="0001-a.patch",
                findings=(
                    Finding(kind="api", path="src/a.c", text="calls f(), which changed", name="f"),
                    Finding(kind="nearby", path="src/a.c", text="beside upstream's change"),
                ),
            ),
        ),
    )
    assert result.to_json() == {
        "onto": "b" * 40,
        "updated": ["0001-a.patch"],
        "unchanged": ["0002-b.patch"],
        "outside_when": ["0003-c.patch"],
        "pin_moved": True,
        "dropped": [
            {"patch": "0004-d.patch", "reason": "--drop", "commit": None},
            {"patch": "0005-e.patch", "reason": "already upstream", "commit": "a" * 40},
        ],
        "proposed_for_dropping": [
            {"patch": "0006-f.patch", "why": result.upstream[0].describe(), "commit": "a" * 40},
            {"patch": "0007-g.patch", "why": result.upstream[1].describe(), "commit": None},
        ],
        "reused": 2,
        "review": [
            {
                "patch": "0001-a.patch",
                "names": ["f"],
                "findings": [
                    {"kind": "api", "path": "src/a.c", "text": "calls f(), which changed"},
                    {"kind": "nearby", "path": "src/a.c", "text": "beside upstream's change"},
                ],
            }
        ],
    }
