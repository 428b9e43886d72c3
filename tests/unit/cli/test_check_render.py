"""What `check` and `bump` print of names that come from patches and upstream (file names,
patch names, refs, commit subjects, build messages): escaped by core.text.printable at the
printer, so a name cannot move the cursor, set the title or reorder the line."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from patchkit.cli import bump as bump_cli
from patchkit.cli.check import render_bisect, render_check
from patchkit.git.repo import CommitInfo
from patchkit.spec.patchfile import Conflict
from patchkit.upkeep.check import BisectReport, BisectResult, CheckReport, CheckVerdict, RefResult, Verdict
from patchkit.upkeep.scratch import Status

HOSTILE = "a\x1b]0;pwned\x07\u202egnp.\u200bc"  # title escape, bidi override, zero width
RAW = ("\x1b", "\x07", "\u202e", "\u200b", "\x9b")


def _commit(subject: str = "core: x") -> CommitInfo:
    return CommitInfo(sha="a" * 40, date="2025-01-01T00:00:00+00:00", subject=subject)


def _verdict(name: str) -> CheckVerdict:
    conflict = Conflict(file=f"src/{HOSTILE}", hunk=2, header="@@ -1 +1 @@", reason="context does not match")
    return CheckVerdict(patch=name, status=Status.CONFLICTS, conflicts=(conflict,))


def _shown(title: list[str], table: object, lines: list[str]) -> str:
    console = Console(width=200, record=True, force_terminal=False)
    console.print(table)
    return "\n".join([*title, console.export_text(), *lines])


def test_check_table_and_lines_escape_patch_file_and_ref_names() -> None:
    name = f"evil{HOSTILE}"
    report = CheckReport(
        repo=f"/srv/{HOSTILE}",
        patches=(name,),
        refs=(RefResult(name="v1\x9b31m", commit=_commit(), results=(_verdict(name),)),),
        states=1,
    )
    text = _shown(*render_check(report, group=False))
    assert not any(c in text for c in RAW), repr(text)
    assert "\\x1b]0;pwned\\x07\\u202egnp.\\u200bc" in text


def test_check_range_since_and_bisect_lines_escape_subjects_and_files() -> None:
    name = f"p{HOSTILE}"
    good = CheckVerdict(patch=name, status=Status.APPLIES)
    refs = (
        RefResult(name="c1", commit=_commit(), results=(good,)),
        RefResult(name="c2", commit=_commit(f"upstream {HOSTILE}"), results=(_verdict(name),)),
    )
    report = CheckReport(repo="/r", patches=(name,), refs=refs, states=2)
    assert not any(c in _shown(*render_check(report, group=True)) for c in RAW)
    bisect = BisectReport(
        repo="/r",
        old=_commit(),
        new=_commit(),
        range_size=2,
        probes=1,
        states=1,
        results=(
            BisectResult(
                patch=name,
                verdict=Verdict.BROKEN,
                last_good=_commit(),
                first_bad=_commit(f"subject {HOSTILE}"),
                result=_verdict(name),
                files=(f"src/{HOSTILE}",),
            ),
        ),
    )
    lines = render_bisect(bisect)
    assert len(lines) == 4 and not any(c in "".join(lines) for c in RAW), lines
    assert "which touched src/a\\x1b]0;pwned" in lines[2]


def test_bump_summary_is_escaped_on_stdout_and_in_its_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = tmp_path / "summary.md"
    bump_cli._emit(f"## Bump\n| a | `{HOSTILE}` |\n", summary)
    out = capsys.readouterr().out
    assert out == summary.read_text() == "## Bump\n| a | `a\\x1b]0;pwned\\x07\\u202egnp.\\u200bc` |\n"
