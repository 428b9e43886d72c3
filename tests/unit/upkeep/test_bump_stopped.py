"""A bump that stops keeps the refresh error's fields, so the CLI words it as refresh would."""

from __future__ import annotations

from pathlib import Path

from patchkit.cli.problems import render
from patchkit.core.errors import PatchError
from patchkit.core.fs_problems import WriteFailed
from patchkit.upkeep.bump import BumpResult, BumpStopped
from tests.unit.upkeep.test_bump_summary import plan


def test_a_stop_keeps_the_problem_and_the_advice_the_cli_writes_for_it() -> None:
    problem = WriteFailed(
        dest=Path("/q/patches/0001.patch"),
        folder=Path("/q/patches"),
        found="full",
        reason="No space left on device",
        mount=Path("/q"),
        free=0,
    )
    error = PatchError(str(problem), problem=problem)
    stopped = BumpStopped(error, BumpResult(plan=plan(), dry_run=False, stopped=error.message))
    assert stopped.problem is problem
    assert render(stopped) == render(error)
    assert render(stopped)[1].startswith("free space on /q")
