"""git.runner without running git: the environment git gets, the reason picked from its
stderr, and ToolMissing when there is no git (tests/integration/git runs it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.core.errors import ToolMissing
from patchkit.git import runner
from patchkit.git.runner import IDENTITY, git_env, git_exe, git_out, run_git, scratch_env


def test_git_env_is_untranslated_without_pager_or_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    monkeypatch.setenv("GIT_PAGER", "less")
    env = git_env({"GIT_TRACE": "1"})
    assert (env["LC_ALL"], env["LANGUAGE"], env["GIT_PAGER"], env["GIT_TERMINAL_PROMPT"]) == (
        "C",
        "C",
        "cat",
        "0",
    )
    assert env["GIT_TRACE"] == "1" and env["PATH"]  # the rest of the environment is kept


def test_scratch_env_never_looks_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY"):
        monkeypatch.setenv(var, "/somewhere/else")
    env = scratch_env(tmp_path)
    assert env["GIT_CEILING_DIRECTORIES"] == str(tmp_path)
    assert not {"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY"} & set(env)
    assert env["LC_ALL"] == "C"


def test_identity_is_patchkit_and_unsigned() -> None:
    pairs = dict(v.split("=", 1) for v in IDENTITY if v != "-c")
    assert pairs == {
        "user.name": "patchkit",
        "user.email": "patchkit@localhost",
        "commit.gpgsign": "false",
        "core.autocrlf": "false",
    }


@pytest.mark.parametrize(
    ("stderr", "want"),
    [
        (
            "warning: x\nfatal: not a git repository (or any of the parent directories): .git\n",
            "not a git repository (or any of the parent directories): .git",
        ),
        (
            "error: pathspec 'nope' did not match any file(s) known to git\n",
            "pathspec 'nope' did not match any file(s) known to git",
        ),
        ("\n  something odd happened\nsecond line\n", "something odd happened"),
        ("", ""),
    ],
)
def test_the_reason_is_gits_own_line(stderr: str, want: str) -> None:
    assert runner._reason(stderr) == want


def test_no_git_on_path_is_tool_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no git anywhere
    with pytest.raises(ToolMissing) as e:
        git_exe()
    assert e.value.message == "git is not installed or not on PATH" and e.value.exit_code == 8
    assert "git-scm.com" in e.value.hint
    for call in (lambda: run_git(tmp_path, "status"), lambda: git_out(None, "--version")):
        with pytest.raises(ToolMissing, match="git is not installed"):
            call()  # refused before anything is started
