"""Which compile cache the user asked for: flags, environment and recipe, first one set wins
(docs/cache.md)::

    remote:   --cache-remote URL  >  PATCHKIT_CACHE_REMOTE  >  recipe [build] cache_remote
    launcher: --launcher NAME     >  PATCHKIT_LAUNCHER      >  recipe [build] launcher
              >  sccache when the remote needs it (s3://, gcs://, gha, ...)  >  ccache on PATH
    dist:     --dist URL          >  PATCHKIT_DIST  (implies sccache)

:func:`resolve` checks them (one line, before anything runs); nothing is looked up or run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from patchkit.builder.compcache.remote import OFF, RemoteUrl, parse_dist, parse_remote
from patchkit.builder.problems import CacheSettingsClash
from patchkit.core.environ import process_env
from patchkit.core.errors import ConfigError, RecipeError
from patchkit.spec.recipe import LAUNCHERS as RECIPE_LAUNCHERS

__all__ = ["ENV_DIST", "ENV_LAUNCHER", "ENV_REMOTE", "LAUNCHERS", "CacheSettings", "resolve"]

ENV_REMOTE = "PATCHKIT_CACHE_REMOTE"
ENV_LAUNCHER = "PATCHKIT_LAUNCHER"
ENV_DIST = "PATCHKIT_DIST"  # an sccache-dist scheduler: http://TOKEN@HOST:PORT
LAUNCHERS = RECIPE_LAUNCHERS


@dataclasses.dataclass(frozen=True, kw_only=True)
class CacheSettings:
    """What the user asked for, checked. ``launcher`` "" = ccache when it is on PATH."""

    launcher: str = ""
    remote: RemoteUrl | None = None
    launcher_from: str = "default"
    remote_from: str = ""
    dist: RemoteUrl | None = None  # an sccache-dist scheduler (its token in ``password``)


def resolve(
    *,
    remote_flag: str | None = None,
    launcher_flag: str | None = None,
    env: Mapping[str, str] | None = None,
    recipe_remote: str | None = None,
    recipe_launcher: str | None = None,
    recipe_label: str = "recipe",
    dist_flag: str | None = None,
) -> CacheSettings:
    """The settings in force (order in the module doc); one-line errors, nothing run:
    ConfigError (exit 2) for the flag and the environment, RecipeError (exit 3) for a recipe."""
    env = process_env(env)
    remote: RemoteUrl | None = None
    remote_from = ""
    for value, where, err in (
        (remote_flag, "--cache-remote", ConfigError),
        (env.get(ENV_REMOTE), ENV_REMOTE, ConfigError),
        (recipe_remote, f"{recipe_label}: build.cache_remote", RecipeError),
    ):
        if value is None or (where == ENV_REMOTE and value == ""):
            continue
        if value.strip().lower() == OFF:
            remote_from = where
            break
        remote = parse_remote(value.strip(), where=where, error=err)
        if err is RecipeError and remote.has_credentials:
            raise RecipeError(
                f"{where}: {remote.redacted!r} has credentials, and recipes are committed",
                hint=f"set {ENV_REMOTE} (a CI secret) instead",
            )
        remote_from = where
        break
    launcher, launcher_from = "", "default"
    for value, where, err in (
        (launcher_flag, "--launcher", ConfigError),
        (env.get(ENV_LAUNCHER) or None, ENV_LAUNCHER, ConfigError),
        (recipe_launcher, f"{recipe_label}: build.launcher", RecipeError),
    ):
        if value is None:
            continue
        if value not in LAUNCHERS:
            raise err(f"{where}: {value!r} is not one of {', '.join(LAUNCHERS)}")
        launcher, launcher_from = value, where
        break
    dist = None
    for value, where in ((dist_flag, "--dist"), (env.get(ENV_DIST) or None, ENV_DIST)):
        if value is not None:
            dist = None if value.strip().lower() == OFF else parse_dist(value.strip(), where=where)
            if dist is not None and launcher in ("ccache", "none"):
                clash = CacheSettingsClash(
                    clash="dist-needs-sccache", where=where, launcher=launcher, launcher_from=launcher_from
                )
                raise ConfigError(problem=clash)
            if dist is not None and not launcher:
                launcher, launcher_from = "sccache", where
            break
    if remote is not None:
        if not launcher and not remote.ccache_can_store:
            launcher, launcher_from = "sccache", f"{remote.scheme} (from {remote_from})"
        if launcher == "none":
            clash = CacheSettingsClash(
                clash="remote-without-launcher", remote_from=remote_from, launcher_from=launcher_from
            )
            raise ConfigError(problem=clash)
        if launcher == "ccache" and not remote.ccache_can_store:
            clash = CacheSettingsClash(
                clash="ccache-cannot-store",
                remote_from=remote_from,
                remote=remote.redacted,
                scheme=remote.scheme,
            )
            raise ConfigError(problem=clash)
    return CacheSettings(
        launcher=launcher, remote=remote, launcher_from=launcher_from, remote_from=remote_from, dist=dist
    )
