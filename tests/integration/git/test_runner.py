"""git.runner running git: one-line errors with git's own reason, git's stderr as detail,
the scratch identity, and ToolMissing when git cannot start."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.core.errors import PatchError, SourceError, ToolMissing
from patchkit.git import runner
from patchkit.git.runner import git_out, run_git, scratch_env


def test_a_failure_is_one_line_with_gits_reason(tmp_path: Path) -> None:
    with pytest.raises(SourceError) as e:
        run_git(tmp_path, "rev-parse", "HEAD", env=scratch_env(tmp_path))
    msg = e.value.message
    assert msg.startswith(f"git rev-parse HEAD in {tmp_path} failed: not a git repository")
    assert "\n" not in msg and e.value.exit_code == 4
    assert "fatal: not a git repository" in e.value.detail  # git's whole stderr


def test_error_class_label_and_unchecked_calls(tmp_path: Path) -> None:
    with pytest.raises(PatchError, match=r"^applying x failed: "):
        run_git(
            tmp_path,
            "apply",
            "--check",
            "nope.patch",
            error=PatchError,
            what="applying x",
            env=scratch_env(tmp_path),
        )
    r = run_git(tmp_path, "rev-parse", "HEAD", check=False, env=scratch_env(tmp_path))
    assert r.returncode == 128 and not r.ok
    assert run_git(None, "--version").stdout.startswith("git version ")


IDENTITY_VARS = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")


def _commit_one(tmp_path: Path, env: dict[str, str]) -> Path:
    repo = tmp_path / "r"
    git_out(None, "init", "-q", "-b", "main", str(repo), env=env)
    (repo / "f").write_text("x\n")
    git_out(repo, "add", "f", env=env)
    git_out(repo, "commit", "-qm", "first", identity=True, env=env)
    return repo


def test_git_out_and_the_scratch_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in IDENTITY_VARS:  # the tests' own identity (conftest) would win over -c user.*
        monkeypatch.delenv(var, raising=False)
    env = scratch_env(tmp_path)
    repo = _commit_one(tmp_path, env)
    assert (
        git_out(repo, "log", "-1", "--format=%an <%ae>|%s", env=env) == "patchkit <patchkit@localhost>|first"
    )  # no trailing newline
    assert git_out(repo, "show", "HEAD:f", env=env, binary=False) == "x"
    raw = run_git(repo, "show", "HEAD:f", env=env, binary=True)
    assert raw.data == b"x\n"
    assert git_out(repo, "hash-object", "--stdin", input=b"x\n", env=env) == git_out(
        repo, "rev-parse", "HEAD:f", env=env
    )


def test_the_scratch_identity_wins_over_the_users_environment(tmp_path: Path) -> None:
    env = scratch_env(tmp_path)  # the conftest's GIT_AUTHOR_NAME=Fixture Author & co. are set
    assert env["GIT_AUTHOR_NAME"] == "Fixture Author"
    repo = _commit_one(tmp_path, env)
    assert (
        git_out(repo, "log", "-1", "--format=%an <%ae> %cn", env=env)
        == "patchkit <patchkit@localhost> patchkit"
    )


def test_git_that_cannot_start_is_tool_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "git_exe", lambda: str(tmp_path / "git"))  # on PATH, then gone
    with pytest.raises(ToolMissing) as e:
        run_git(tmp_path, "status")
    assert e.value.message == "cannot run git: No such file or directory"
    assert e.value.hint == "install git" and e.value.exit_code == 8


def test_messages_stay_english(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANG", "de_DE.UTF-8")
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    with pytest.raises(SourceError, match="not a git repository"):
        run_git(tmp_path, "status")  # parsed text is never translated
