"""Finding the project (recipes/ + patches/) and the cache."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from patchkit.core.errors import ConfigError
from patchkit.core.paths import cache_dir, find_project_dir


def make_project(root: Path) -> Path:
    (root / "recipes").mkdir(parents=True)
    (root / "patches").mkdir()
    return root


def test_explicit_env_cwd_and_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proj = make_project(tmp_path / "p")
    assert find_project_dir(proj) == proj.resolve()
    monkeypatch.setenv("PATCHKIT_PROJECT", str(proj))
    assert find_project_dir() == proj.resolve()
    monkeypatch.delenv("PATCHKIT_PROJECT")
    (proj / "sub" / "dir").mkdir(parents=True)
    monkeypatch.chdir(proj / "sub" / "dir")
    assert find_project_dir() == proj.resolve()


def test_not_a_project_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a patchkit project: it needs recipes/ and patches/"):
        find_project_dir(tmp_path)


def test_falls_back_to_the_shipped_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    found = find_project_dir()
    assert (found / "recipes" / "cpu-rpc.toml").is_file()


def test_cache_dir_env_and_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "c"))
    assert cache_dir() == (tmp_path / "c").resolve()
    if sys.platform in ("win32", "darwin"):
        return  # LOCALAPPDATA / ~/Library/Caches there
    monkeypatch.delenv("PATCHKIT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == (tmp_path / "xdg" / "patchkit").resolve()


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="XDG and HOME are Linux's")
@pytest.mark.parametrize("home", ["", "relative/home", "."])
def test_an_empty_or_relative_home_is_refused_not_turned_into_root(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, home: str
) -> None:
    monkeypatch.delenv("PATCHKIT_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", home)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        cache_dir()
    assert e.value.message == f"HOME={home!r} is not an absolute folder: it cannot hold the cache"
    assert e.value.hint == "set PATCHKIT_CACHE or HOME"
    assert not (tmp_path / ".cache").exists() and not Path("/.cache/patchkit").exists()
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "c"))  # the way out it names
    assert cache_dir() == (tmp_path / "c").resolve()


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="XDG is Linux's")
def test_a_relative_xdg_cache_home_is_ignored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PATCHKIT_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    for xdg in ("cache", "./cache", "~/cache", ""):
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
        assert cache_dir() == tmp_path / "home" / ".cache" / "patchkit"


@pytest.mark.skipif(sys.platform == "win32", reason="the password database")
def test_an_unset_home_falls_back_to_the_password_database(monkeypatch: pytest.MonkeyPatch) -> None:
    import pwd

    monkeypatch.delenv("PATCHKIT_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("HOME")
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    if home == Path("/"):
        with pytest.raises(ConfigError, match="set PATCHKIT_CACHE or HOME"):
            cache_dir()
    else:
        assert cache_dir().name == "patchkit"
