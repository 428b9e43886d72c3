"""builder.state: the work folder's state.json round-trips; a damaged one reads as empty
(everything is redone) and never raises."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from patchkit.builder.state import BuildState, digest, read_state, worktree_matches, write_state

STATE = BuildState(
    source_id="s" * 64,
    tree="t" * 40,
    results=("applied", "already-present"),
    commit_date="2026-01-03T00:00:00+00:00",
    subject="docs: readme",
    config_id="c" * 64,
)


def test_write_then_read(tmp_path: Path) -> None:
    path = tmp_path / "work" / "fixture-abc" / "state.json"
    write_state(path, STATE)
    assert read_state(path) == STATE
    assert os.listdir(path.parent) == ["state.json"]  # written atomically, nothing else left
    write_state(path, BuildState(source_id="other"))
    assert read_state(path) == BuildState(source_id="other")  # config_id None survives too


def test_missing_file_is_an_empty_state(tmp_path: Path) -> None:
    assert read_state(tmp_path / "nope.json") == BuildState()
    assert BuildState().config_id is None and BuildState().results == ()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "null",
        "[1, 2]",
        '"a string"',
        "42",
        '{"results": 5}',
        '{"results": {"a": 1}}',
        '{"source_id": {"x": 1}}',
    ],
)
def test_a_damaged_file_is_an_empty_or_partial_state_never_an_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "state.json"
    path.write_text(text)
    state = read_state(path)
    assert isinstance(state, BuildState)
    assert state.config_id is None and state.tree == ""


def test_undecodable_bytes_and_a_folder_in_its_place(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert read_state(path) == BuildState()
    path.unlink()
    path.mkdir()
    assert read_state(path) == BuildState()


def test_wrong_types_are_dropped_field_by_field(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text('{"source_id": "s", "tree": null, "config_id": 7, "subject": "x"}')
    assert read_state(path) == BuildState(source_id="s", subject="x")


def test_digest_is_canonical() -> None:
    assert digest({"b": 1, "a": [1, 2]}) == digest({"a": [1, 2], "b": 1})
    assert digest({"a": [1, 2]}) != digest({"a": [2, 1]})
    assert len(digest(None)) == 64


def test_a_folder_without_git_never_matches(tmp_path: Path) -> None:
    assert not worktree_matches(tmp_path, "t" * 40, "c" * 40, repo=tmp_path)  # no .git: decided without git
    assert not worktree_matches(tmp_path, "", "c" * 40, repo=tmp_path)


def test_unknown_patch_results_make_the_whole_state_empty(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text('{"source_id": "s", "tree": "t", "results": [1, null]}')
    assert read_state(path) == BuildState()  # a reuse would trust results it cannot read
