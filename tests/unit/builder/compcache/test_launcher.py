"""builder.compcache.launcher: which launcher, its defines and environment (one base dir,
credentials apart), and the variables that hand the remote to ccache or sccache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkit.builder.compcache import launcher
from patchkit.builder.compcache.launcher import plan, remote_env
from patchkit.builder.compcache.remote import parse_remote
from patchkit.builder.compcache.settings import CacheSettings
from patchkit.builder.problems import LauncherMissing
from patchkit.core.errors import ToolMissing

PW = "hunter2-Secret"


def test_ccache_plan_base_dir_and_remote_env(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    remote = parse_remote(f"redis://:{PW}@h:1", where="x")
    p = plan(
        CacheSettings(remote=remote),
        ccache=Path("/usr/bin/ccache"),
        cache_root=root,
        env={"CCACHE_BASEDIR": "/somewhere/else"},
    )
    assert p.launcher == "ccache" and p.defines == {
        "CMAKE_C_COMPILER_LAUNCHER": "ccache",
        "CMAKE_CXX_COMPILER_LAUNCHER": "ccache",
    }
    # a base dir that does not cover the cache would make every key absolute: the cache root wins
    assert p.env["CCACHE_BASEDIR"] == str(root) and p.env["CCACHE_NOHASHDIR"] == "true"
    assert p.env["CCACHE_COMPILERCHECK"] == "content"
    assert PW not in json.dumps(dict(p.env))  # the remote goes in only for the session
    env = remote_env("ccache", p.remote)
    assert env["CCACHE_REMOTE_STORAGE"].startswith(f"redis://{PW}@h:1|")
    # a base dir above the cache root is the user's choice and kept
    p = plan(
        CacheSettings(),
        ccache=Path("/usr/bin/ccache"),
        cache_root=root,
        env={"CCACHE_BASEDIR": str(tmp_path)},
    )
    assert "CCACHE_BASEDIR" not in p.env and "CCACHE_COMPILERCHECK" not in p.env


def test_no_launcher_and_missing_launchers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = plan(CacheSettings(), ccache=None, cache_root=tmp_path)
    assert p.launcher is None and p.defines == {} and not p.env
    p = plan(CacheSettings(launcher="none"), ccache=Path("/usr/bin/ccache"), cache_root=tmp_path)
    assert p.launcher is None
    with pytest.raises(ToolMissing) as missing:
        plan(CacheSettings(launcher="ccache", launcher_from="launcher"), ccache=None, cache_root=tmp_path)
    assert missing.value.problem == LauncherMissing(launcher="ccache", asked_by="launcher")
    monkeypatch.setattr(launcher, "find_sccache", lambda env=None: None)
    with pytest.raises(ToolMissing) as e:
        plan(CacheSettings(launcher="sccache"), ccache=None, cache_root=tmp_path)
    assert e.value.exit_code == 8 and e.value.problem == LauncherMissing(
        launcher="sccache", asked_by="default"
    )


def test_sccache_plan_puts_its_folder_on_path_and_credentials_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = tmp_path / "venv" / "bin" / "sccache"
    exe.parent.mkdir(parents=True)
    exe.write_text("")
    monkeypatch.setattr(launcher, "find_sccache", lambda env=None: exe)
    remote = parse_remote(f"redis://ci:{PW}@h:6379/3", where="x")
    p = plan(
        CacheSettings(launcher="sccache", remote=remote),
        ccache=None,
        cache_root=tmp_path / "c",
        env={"PATH": "/usr/bin"},
    )
    assert p.defines["CMAKE_CXX_COMPILER_LAUNCHER"] == "sccache"  # by name: no host path
    assert p.env["PATH"] == f"{exe.parent}:/usr/bin" and p.env["SCCACHE_BASEDIRS"] == str(tmp_path / "c")
    env = remote_env("sccache", p.remote)
    assert env["SCCACHE_MULTILEVEL_CHAIN"] == "disk,redis"
    assert env["SCCACHE_REDIS_ENDPOINT"] == "redis://h:6379"  # sccache prints this one
    assert env["SCCACHE_REDIS_DB"] == "3"
    assert env["SCCACHE_REDIS_USERNAME"] == "ci" and env["SCCACHE_REDIS_PASSWORD"] == PW
    for url, want in (
        ("s3://b/pre", {"SCCACHE_BUCKET": "b", "SCCACHE_S3_KEY_PREFIX": "pre"}),
        ("gcs://g", {"SCCACHE_GCS_BUCKET": "g"}),
        ("gha", {"SCCACHE_GHA_ENABLED": "true"}),
        ("https://u:p@dav/x", {"SCCACHE_WEBDAV_ENDPOINT": "https://dav/x", "SCCACHE_WEBDAV_PASSWORD": "p"}),
    ):
        e = remote_env("sccache", parse_remote(url, where="x"))
        assert want.items() <= e.items(), (url, e)


def test_a_remote_without_ccache_takes_sccache_or_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = parse_remote("redis://h", where="x")
    settings = CacheSettings(remote=remote, remote_from="--cache-remote")
    monkeypatch.setattr(launcher, "find_sccache", lambda env=None: tmp_path / "sccache")
    assert plan(settings, ccache=None, cache_root=tmp_path, env={}).launcher == "sccache"
    monkeypatch.setattr(launcher, "find_sccache", lambda env=None: None)
    with pytest.raises(ToolMissing) as e:
        plan(settings, ccache=None, cache_root=tmp_path, env={})
    assert e.value.problem == LauncherMissing(launcher="any", asked_by=settings.remote_from)
