"""builder.compcache.settings: the order of the settings (flag > environment > recipe),
`off`, the launcher a remote or a scheduler implies, one-line errors naming where."""

from __future__ import annotations

import pytest

from patchkit.builder.compcache.settings import (
    ENV_DIST,
    ENV_LAUNCHER,
    ENV_REMOTE,
    CacheSettings,
    resolve,
)
from patchkit.builder.problems import CacheSettingsClash
from patchkit.core.errors import ConfigError, RecipeError

PW = "hunter2-Secret"


def test_flag_beats_env_beats_recipe() -> None:
    env = {ENV_REMOTE: "redis://from-env", ENV_LAUNCHER: "sccache"}
    s = resolve(
        remote_flag="redis://from-flag",
        env=env,
        recipe_remote="redis://from-recipe",
        recipe_launcher="ccache",
    )
    assert s.remote is not None and s.remote.host == "from-flag" and s.remote_from == "--cache-remote"
    assert s.launcher == "sccache" and s.launcher_from == ENV_LAUNCHER
    s = resolve(env=env, recipe_remote="redis://from-recipe")
    assert s.remote is not None and s.remote.host == "from-env" and s.remote_from == ENV_REMOTE
    s = resolve(
        env={}, recipe_remote="redis://from-recipe", recipe_launcher="ccache", recipe_label="recipes/x.toml"
    )
    assert s.remote is not None and s.remote.host == "from-recipe"
    assert s.remote_from == "recipes/x.toml: build.cache_remote" and s.launcher == "ccache"
    assert resolve(env={}) == CacheSettings()


def test_off_switches_a_remote_off_and_empty_env_is_unset() -> None:
    s = resolve(remote_flag="off", env={ENV_REMOTE: "redis://x"}, recipe_remote="redis://y")
    assert s.remote is None and s.remote_from == "--cache-remote"
    s = resolve(env={ENV_REMOTE: ""}, recipe_remote="redis://y")
    assert s.remote is not None and s.remote.host == "y"


def test_a_cloud_remote_picks_sccache_unless_told_otherwise() -> None:
    s = resolve(remote_flag="gha", env={})
    assert s.launcher == "sccache"
    with pytest.raises(ConfigError) as e:
        resolve(remote_flag="s3://b", launcher_flag="ccache", env={})
    assert isinstance(e.value.problem, CacheSettingsClash)
    assert (e.value.problem.clash, e.value.problem.scheme) == ("ccache-cannot-store", "s3")
    with pytest.raises(ConfigError) as e:
        resolve(remote_flag="redis://h", launcher_flag="none", env={})
    assert isinstance(e.value.problem, CacheSettingsClash)
    assert e.value.problem.clash == "remote-without-launcher"


def test_bad_env_and_recipe_values() -> None:
    with pytest.raises(ConfigError, match=f"{ENV_LAUNCHER}: 'distcc' is not one of"):
        resolve(env={ENV_LAUNCHER: "distcc"})
    with pytest.raises(ConfigError) as e:
        resolve(env={ENV_REMOTE: f"redis://:{PW}@h:x"})
    assert e.value.message.startswith(ENV_REMOTE) and PW not in e.value.message
    with pytest.raises(RecipeError) as r:
        resolve(env={}, recipe_remote="redis//h", recipe_label="recipes/a.toml")
    assert r.value.exit_code == 3 and "recipes/a.toml: build.cache_remote" in r.value.message


def test_a_recipe_may_not_hold_credentials() -> None:
    with pytest.raises(RecipeError) as e:
        resolve(env={}, recipe_remote=f"redis://:{PW}@h", recipe_label="recipes/a.toml")
    assert "committed" in e.value.message and PW not in e.value.message
    assert ENV_REMOTE in e.value.hint


def test_a_scheduler_implies_sccache_and_off_switches_it_off() -> None:
    s = resolve(env={ENV_DIST: "http://t@h:1"})
    assert s.launcher == "sccache" and s.dist is not None
    with pytest.raises(ConfigError) as e:
        resolve(dist_flag="http://t@h:1", launcher_flag="ccache", env={})
    assert isinstance(e.value.problem, CacheSettingsClash)
    assert (e.value.problem.clash, e.value.problem.launcher) == ("dist-needs-sccache", "ccache")
    assert resolve(dist_flag="off", env={ENV_DIST: "http://t@h:1"}).dist is None
