"""bump's pull-request summary from a synthetic plan: what it says, and that text from
upstream (commit subjects) cannot break the markdown."""

from __future__ import annotations

from pathlib import Path

from patchkit.git.repo import CommitInfo
from patchkit.spec.patchfile import Offset
from patchkit.spec.rpcproto import ProtoVersion
from patchkit.upkeep.bump import BumpPlan, BumpResult, Touching, render_summary
from patchkit.upkeep.refresh import RefreshResult
from patchkit.upkeep.scratch import PatchVerdict, Status

OLD = CommitInfo(sha="8" * 40, date="2026-08-07T10:00:00+00:00", subject="old")
NEW = CommitInfo(sha="b" * 40, date="2026-08-21T10:00:00+00:00", subject="llama.cpp : bump | version <b>")


def plan(**kw: object) -> BumpPlan:
    base: dict[str, object] = dict(
        upstream="https://github.com/ggml-org/llama.cpp",
        target="master",
        old=OLD,
        new=NEW,
        old_build=10309,
        new_build=10566,
        first_parent=257,
        commits=257,
        touching=(
            Touching(
                commit=CommitInfo(
                    sha="a" * 40, date="2026-08-18T00:00:00+00:00", subject="RPC: use_count | `fusion`"
                ),
                files=("ggml/src/ggml-rpc/ggml-rpc.cpp",),
            ),
        ),
        touching_total=1,
        files=("ggml/src/ggml-rpc/ggml-rpc.cpp",),
        verdicts=(
            PatchVerdict(
                patch="guard",
                status=Status.OFFSET,
                offsets=(
                    Offset(file="ggml/src/ggml-rpc/ggml-rpc.cpp", hunk=1, lines=5),
                    Offset(file="ggml/src/ggml-rpc/ggml-rpc.cpp", hunk=2, lines=5),
                ),
            ),
        ),
        rpc_old=ProtoVersion(major=5, minor=0, patch=0),
        rpc_new=ProtoVersion(major=5, minor=1, patch=0),
        recipes=("cpu-rpc", "cpu-rpc-experimental"),
        recipe_paths=(Path("/p/recipes/cpu-rpc.toml"),),
        patch_files=(("guard", "0001-guard.patch"),),
    )
    base.update(kw)
    return BumpPlan(**base)  # type: ignore[arg-type]


def test_summary_says_what_moved_and_why() -> None:
    r = BumpResult(
        plan=plan(),
        dry_run=False,
        refresh=RefreshResult(
            onto=NEW.sha, updated=("0001-guard.patch",), unchanged=(), skipped=(), pin_moved=True
        ),
        moved=("cpu-rpc", "cpu-rpc-experimental"),
    )
    md = render_summary(r, build_lines=["`patchkit build cpu-rpc`: ok"])
    assert md.startswith("## Bump llama.cpp 888888888888 (build 10309) → bbbbbbbbbbbb (build 10566)\n")
    assert f"| old | `{OLD.sha}` | 2026-08-07 | 10309 | 5.0.0 |" in md
    assert "| guard | applies-with-offset | ggml/src/ggml-rpc/ggml-rpc.cpp: #1 +5, #2 +5 | rewritten |" in md
    assert "old clients with new servers: refused" in md
    assert "### Recipes (moved together)\n\n- cpu-rpc\n- cpu-rpc-experimental\n" in md
    assert md.endswith("### Build\n\n`patchkit build cpu-rpc`: ok\n")
    # upstream's text is escaped: no broken table, no HTML, no code span
    assert "bump \\| version &lt;b>" in md
    assert "RPC: use_count \\| 'fusion'" in md


def test_same_protocol_and_nothing_to_do() -> None:
    same = plan(rpc_new=ProtoVersion(major=5, minor=0, patch=0))
    md = render_summary(BumpResult(plan=same, dry_run=True))
    assert "**RPC protocol" not in md and "would move" in md
    done = render_summary(BumpResult(plan=plan(new=OLD, new_build=10309), dry_run=False))
    assert "Already at the newest commit of master: nothing to do." in done
