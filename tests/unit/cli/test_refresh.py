"""`patchkit refresh --continue/--abort` on damaged, partial and non-UTF-8 state files:
always one line (exit 5), and --abort always clears a refresh's own folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkit.upkeep.refresh import STATE_FILE
from tests.fixtures.project import assert_error, invoke

GOOD = {
    "version": 2,
    "repo": "/r",
    "onto": "a" * 40,
    "base": "b" * 40,
    "patches_dir": "/p",
    "recipe": None,
    "move_pin": False,
    "patches": [{"name": "x", "file": "0001-x.patch", "sha256": "c" * 64, "skip": False}],
    "next": 0,
    "commits": [],
    "old_commits": [None],
}

DAMAGED: dict[str, bytes] = {
    "empty": b"",
    "truncated": json.dumps(GOOD).encode()[:57],
    "not-utf8": b'{"version": 1, "repo": "\xff\xfe"}',
    "binary": bytes(range(256)),
    "a-list": b"[1, 2, 3]",
    "other-version": json.dumps({**GOOD, "version": 99}).encode(),
    "missing-key": json.dumps({k: v for k, v in GOOD.items() if k != "base"}).encode(),
    "wrong-type": json.dumps({**GOOD, "next": "0"}).encode(),
    "bool-as-int": json.dumps({**GOOD, "next": True}).encode(),
    "counters": json.dumps({**GOOD, "next": 5}).encode(),
    "patch-not-object": json.dumps({**GOOD, "patches": ["x"]}).encode(),
    "deep": b"[" * 100_000,
    "nul": b"\0" * 64,
    "patch-file-with-path": json.dumps(
        {**GOOD, "patches": [{"name": "x", "file": "../../etc/passwd", "sha256": "0" * 64, "skip": False}]}
    ).encode(),
    "patches-dir-elsewhere": json.dumps({**GOOD, "patches_dir": "/etc"}).encode(),
    "recipe-not-toml": json.dumps({**GOOD, "recipe": "/etc/passwd"}).encode(),
    "drops-a-file-elsewhere": json.dumps(
        {**GOOD, "dropped": [{"file": "../../etc/passwd", "reason": "x"}]}
    ).encode(),
    "conflict-file-elsewhere": json.dumps({**GOOD, "conflicts": ["../x.txt"]}).encode(),
}


def workdir(tmp_path: Path, data: bytes) -> Path:
    wd = tmp_path / "refresh-work"
    (wd / "tree").mkdir(parents=True)
    (wd / "patches").mkdir()
    (wd / "tree" / "file.c").write_text("scratch\n")
    (wd / STATE_FILE).write_bytes(data)
    return wd


_CASES = sorted(DAMAGED)


@pytest.mark.parametrize("case", _CASES)
def test_continue_on_a_damaged_state_is_one_line_and_abort_clears_it(
    project: Path, tmp_path: Path, case: str
) -> None:
    wd = workdir(tmp_path, DAMAGED[case])
    r = invoke(project, "refresh", "--continue", "--workdir", str(wd))
    assert_error(r, 5, str(wd / STATE_FILE), "refresh --abort")
    assert (wd / STATE_FILE).read_bytes() == DAMAGED[case]  # --continue changes nothing
    r = invoke(project, "refresh", "--abort", "--workdir", str(wd))
    assert r.exit_code == 0, r.output
    assert f"refresh aborted; removed {wd}" in r.output
    assert not wd.exists()
    assert (tmp_path / "project").is_dir()  # nothing else went


def test_abort_never_removes_a_folder_holding_foreign_files(project: Path, tmp_path: Path) -> None:
    wd = workdir(tmp_path, b"garbage")
    (wd / "my-notes.txt").write_text("keep")
    r = invoke(project, "refresh", "--abort", "--workdir", str(wd))
    assert_error(r, 5, "holds my-notes.txt, which a refresh did not write")
    assert (wd / "my-notes.txt").read_text() == "keep" and (wd / STATE_FILE).exists()


def test_continue_or_abort_without_a_refresh(project: Path, tmp_path: Path) -> None:
    for flag in ("--continue", "--abort"):
        assert_error(
            invoke(project, "refresh", flag, "--workdir", str(tmp_path / "none")), 5, "no refresh in progress"
        )
    assert not (tmp_path / "none").exists()


def test_exactly_one_action(project: Path, tmp_path: Path) -> None:
    r = invoke(project, "refresh", "--continue", "--abort", "--workdir", str(tmp_path))
    assert_error(r, 2, "give exactly one of --onto COMMIT, --continue, --skip, --drop PATCH, --abort")


def test_a_state_that_would_remove_a_file_outside_the_series_is_damaged(tmp_path: Path) -> None:
    from patchkit.core.errors import PatchError
    from patchkit.upkeep.refresh import RefreshState

    pdir = tmp_path / "patches"
    pdir.mkdir()
    (pdir / "series").write_text("0001-x.patch\n")
    good = {**GOOD, "patches_dir": str(pdir)}
    wd = workdir(tmp_path, json.dumps(good).encode())
    assert RefreshState.load(wd).patches[0].file == "0001-x.patch"  # the control: it loads
    for bad in (
        {"dropped": [{"file": "../../etc/passwd", "reason": "x"}]},
        {"to_drop": ["/etc/passwd"]},
        {"conflicts": ["../x.txt"]},
    ):
        (wd / STATE_FILE).write_text(json.dumps({**good, **bad}))
        with pytest.raises(PatchError, match="damaged"):
            RefreshState.load(wd)


def test_upstream_subjects_in_the_report_are_printed_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    """ "dropped … already upstream" and "proposed for dropping" quote upstream commit
    subjects: an escape in one reaches the terminal escaped."""
    import dataclasses

    from patchkit.cli.refresh import report
    from patchkit.git.repo import CommitInfo
    from patchkit.upkeep.refresh import Dropped, RefreshResult
    from patchkit.upkeep.upstreamed import Upstreamed

    evil = CommitInfo(sha="a" * 40, date="2025-01-01", subject="fix \x1b]0;pwned\x07 (#42)\u202e")
    left = (
        "outside_when" if "outside_when" in {f.name for f in dataclasses.fields(RefreshResult)} else "skipped"
    )
    result = RefreshResult(
        onto="b" * 40,
        updated=(),
        unchanged=(),
        pin_moved=False,
        dropped=(
            Dropped(file="0001-x.patch", reason=f"already upstream (subject): {evil.subject}", commit=evil),
        ),
        upstream=(Upstreamed(file="0002-y.patch", rule="pull-request #42", commit=evil),),
        **{left: ()},
    )
    report(result)
    err = capsys.readouterr().err
    assert "dropped   0001-x.patch" in err and "proposed for dropping" in err
    assert "\x1b" not in err and "\x07" not in err and "\u202e" not in err
    assert "\\x1b]0;pwned\\x07" in err
