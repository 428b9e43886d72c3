"""git.cache without git: which upstreams are paths on this machine, and the one-line
refusals for local paths that are no repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.core.errors import SourceError
from patchkit.git.cache import is_local, local_path, open_upstream


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
    assert "--upstream" in e.value.hint
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
    """Issue 25 item 9: the clone's folder is named after the URL's last path segment,
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
