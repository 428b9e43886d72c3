"""git.cache without git: which upstreams are paths on this machine, and the one-line
refusals for local paths that are no repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.core.errors import SourceError
from patchkit.git.cache import is_local, local_path, open_upstream
from patchkit.git.problems import NotARepository


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("https://github.com/ggml-org/llama.cpp", None),
        ("ssh://git@host/x.git", None),
        ("git@github.com:ggml-org/llama.cpp.git", None),
        ("file:///srv/mirror.git", Path("/srv/mirror.git")),
        ("/srv/mirror", Path("/srv/mirror")),
        ("relative/clone", Path("relative/clone")),
        ("~/llama.cpp", Path("~/llama.cpp").expanduser()),
    ],
)
def test_local_path(url: str, path: Path | None) -> None:
    assert local_path(url) == path
    assert is_local(url) is (path is not None)


def test_open_upstream_local_refusals_and_success(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with pytest.raises(SourceError, match=r"upstream path .*nope does not exist") as e:
        open_upstream(str(tmp_path / "nope"), cache)
    assert e.value.problem == NotARepository(shown=str(tmp_path / "nope"), option="upstream", found="missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(SourceError, match=r"plain is not a git repository"):
        open_upstream(str(tmp_path / "plain"), cache)
    bare = tmp_path / "mirror.git"
    bare.mkdir()
    (bare / "HEAD").write_text("ref: refs/heads/master\n")
    assert open_upstream(f"file://{bare}", cache) == bare.resolve()
    work = tmp_path / "clone"
    (work / ".git").mkdir(parents=True)
    assert open_upstream(str(work), cache) == work.resolve()
    assert not cache.exists()  # a local path is used as it is: no cache, no lock


def test_a_clone_folder_name_never_holds_credentials(tmp_path: Path) -> None:
    """The clone's folder is named after the URL's last path segment,
    never its userinfo or query (the folder shows up in messages and logs)."""
    from patchkit.git.cache import _clone_dir

    for url in (
        "https://TOKEN@github.com",
        "https://h/llama.cpp?token=TOKEN",
        "https://u:TOKEN@h/llama.cpp.git",
    ):
        d = _clone_dir(tmp_path, url)
        assert "TOKEN" not in str(d), d
    assert _clone_dir(tmp_path, "https://u:TOKEN@h/llama.cpp.git").name.startswith("llama.cpp-")
    # the same upstream with other credentials is another clone (the key is the whole URL)
    assert _clone_dir(tmp_path, "https://a@h/r") != _clone_dir(tmp_path, "https://b@h/r")


def _worktree(tmp_path: Path) -> tuple[Path, Path]:
    """A bare clone's record of a worktree and the worktree's .git link, as git makes them."""
    repo, wt = tmp_path / "repos/up.git", tmp_path / "work/src"
    (repo / "worktrees/src").mkdir(parents=True)
    wt.mkdir(parents=True)
    (wt / ".git").write_text(f"gitdir: {repo / 'worktrees/src'}\n")
    (repo / "worktrees/src/gitdir").write_text(f"{wt / '.git'}\n")
    return repo, wt


def test_own_worktree_is_the_link_git_made_and_nothing_else(tmp_path: Path) -> None:
    """git runs in a worktree only when its .git is the clone's own link: a replaced .git (a
    folder whose config names an fsmonitor, a file naming another repository) is not."""
    from patchkit.git.cache import own_worktree

    repo, wt = _worktree(tmp_path)
    assert own_worktree(repo, wt)
    assert not own_worktree(tmp_path / "other.git", wt)  # another clone's
    dotgit = wt / ".git"
    for planted in (
        f"gitdir: {tmp_path / 'evil/.git'}\n",  # another repository
        f"gitdir: {repo / 'worktrees/src'}\n\ngitdir: /x\n",  # more than the one line
        "gitdir: ../../repos/up.git/worktrees/src/../../../../evil\n",
        "",
    ):
        dotgit.write_text(planted)
        assert not own_worktree(repo, wt), planted
    dotgit.write_text("gitdir: ../../repos/up.git/worktrees/src\n")  # relative (worktree.useRelativePaths)
    assert own_worktree(repo, wt)
    (repo / "worktrees/src/gitdir").write_text(f"{tmp_path / 'elsewhere/.git'}\n")  # not named back
    assert not own_worktree(repo, wt)
    (repo / "worktrees/src/gitdir").write_text(f"{wt / '.git'}\n")
    dotgit.unlink()
    dotgit.mkdir()  # a repository of its own
    assert not own_worktree(repo, wt)
    dotgit.rmdir()
    (tmp_path / "real").write_text(f"gitdir: {repo / 'worktrees/src'}\n")
    dotgit.symlink_to(tmp_path / "real")  # a link to a good-looking file
    assert not own_worktree(repo, wt)
