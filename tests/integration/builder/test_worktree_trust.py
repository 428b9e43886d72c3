"""git run by patchkit starts no program a repository's config names. A rebuild's sandboxed
configure step could write the work folder: it replaced ``src/.git`` with a repository of
its own (``core.fsmonitor`` a shell command, hooks, a filter), and the user's next
``patchkit build`` ran ``git update-index --refresh`` there, unsandboxed. Now git runs only
in the worktree git made of the cache's clone, and every git run has fsmonitor and hooks
off, whatever a config file says."""

from __future__ import annotations

import subprocess
from pathlib import Path

from patchkit.builder.state import read_state, worktree_matches
from patchkit.core.paths import cache_dir
from tests.fixtures.project import assert_error, build
from tests.fixtures.upstream import FixtureUpstream


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True)


def _plant(repo_git: Path, marks: Path) -> None:
    """Config in ``repo_git`` (a .git folder or a bare clone) that runs programs: an
    fsmonitor hook, a hooks folder, a clean/smudge filter, an external diff."""
    hooks = marks.parent / f"hooks-{repo_git.name}"
    hooks.mkdir(exist_ok=True)
    for hook in ("post-checkout", "pre-commit", "post-index-change", "reference-transaction"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {marks}/hook-{hook}\n")
        (hooks / hook).chmod(0o755)
    for key, value in (
        ("core.fsmonitor", f"touch {marks}/fsmonitor; false"),
        ("core.hooksPath", str(hooks)),
        ("filter.evil.clean", f"touch {marks}/clean; cat"),
        ("filter.evil.smudge", f"touch {marks}/smudge; cat"),
        ("filter.evil.process", f"touch {marks}/process"),
        ("diff.external", f"touch {marks}/diff"),
    ):
        _git(repo_git, "config", "--file", str(repo_git / "config"), key, value)
    own = repo_git / "hooks"
    if own.is_dir():  # a bare clone's own hooks folder too
        (own / "post-checkout").write_text(f"#!/bin/sh\ntouch {marks}/hook-own-post-checkout\n")
        (own / "post-checkout").chmod(0o755)


def _work(recipe: str = "fixture") -> Path:
    (work,) = (cache_dir() / "work").glob(f"{recipe}-*")
    return work


def test_a_replaced_dot_git_is_never_run_in(project: Path, upstream: FixtureUpstream, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    out = tmp_path / "out"
    assert build(project, out, "--no-smoke").exit_code == 0
    work = _work()
    src = work / "src"
    state = read_state(work / "state.json")
    (clone,) = (cache_dir() / "repos").iterdir()
    # what the sandboxed step did: a repository of its own in place of the worktree's link
    evil = tmp_path / "evil"
    subprocess.run(["git", "init", "-q", str(evil)], check=True)
    _plant(evil / ".git", marks)
    (src / ".git").unlink()
    (evil / ".git").rename(src / ".git")
    (src / ".gitattributes").write_text("* filter=evil diff=evil\n")

    r = build(project, out, "--no-smoke")
    assert list(marks.iterdir()) == []
    assert_error(r, 4, "is not the one patchkit made", "--clean")
    assert not worktree_matches(src, state.tree, upstream.head, repo=clone)
    assert list(marks.iterdir()) == []
    # --clean deletes it without running git in it, and makes the worktree again
    r = build(project, out, "--no-smoke", "--clean")
    assert r.exit_code == 0, r.output
    assert list(marks.iterdir()) == []
    assert (src / ".git").is_file()


def test_config_that_runs_programs_is_ignored_in_the_clone_too(
    project: Path, upstream: FixtureUpstream, tmp_path: Path
) -> None:
    """Belt and braces: the clone's own config (or the user's) naming an fsmonitor or hooks
    runs nothing either (``-c`` overrides beat every config file)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    out = tmp_path / "out"
    assert build(project, out, "--no-smoke").exit_code == 0
    (clone,) = (cache_dir() / "repos").iterdir()
    _plant(clone, marks)
    for extra in ((), ("--clean",)):  # reuse (update-index --refresh), then worktree add
        r = build(project, out, "--no-smoke", *extra)
        assert r.exit_code == 0, r.output
        assert sorted(p.name for p in marks.iterdir()) == []
