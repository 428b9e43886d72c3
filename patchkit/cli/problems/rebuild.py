"""The words of the rebuild problems (``patchkit/rebuild/problems.py``): ``patchkit rebuild``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from patchkit.cli.problems.build import NO_SANDBOX
from patchkit.core.errors import Problem
from patchkit.rebuild.problems import (
    CacheNotAFolder,
    NoCarriedSources,
    NotAReleaseArchive,
    ReleaseNotVerified,
    SandboxRefuses,
)

__all__ = ["RENDERERS"]

_NOT_OURS = "it is not an archive `patchkit release` wrote; do not unpack it"
_VERIFY = "run `patchkit verify` on its folder"


def _not_verified(p: ReleaseNotVerified) -> tuple[str, str]:
    n = p.differences
    return (
        f"{p.target} does not verify ({n} difference{'s' if n != 1 else ''}): not rebuilding it",
        f"run `patchkit verify {p.target}` for the list",
    )


def _not_ours(p: NotAReleaseArchive) -> tuple[str, str]:
    hint = {"format": _NOT_OURS, "files": _VERIFY, "members": f"{_VERIFY}; {_NOT_OURS}"}[p.against]
    return p.found, hint


def _no_sources(p: NoCarriedSources) -> tuple[str, str]:
    return (
        f"{p.archive} carries no sources (released without its recipe, or from a "
        "stale build): it cannot be rebuilt from the archive alone",
        "release it again with `patchkit release RECIPE`",
    )


def _sandbox_refuses(p: SandboxRefuses) -> tuple[str, str]:
    if p.asked == "sccache":
        return (
            f"{p.launcher_from} asks for sccache, which cannot work in the rebuild's sandbox "
            "(its server is outside, and there is no network)",
            f"--launcher ccache or none, or {NO_SANDBOX} if you trust this release",
        )
    return (
        "--smoke runs the rebuilt binaries (the release's code) on this host, outside the sandbox",
        f"add {NO_SANDBOX} only if you trust this release (comparing bytes needs no smoke)",
    )


def _cache_not_a_folder(p: CacheNotAFolder) -> tuple[str, str]:
    return f"--cache {p.given} is not a folder", "name a folder (it is made if missing)"


RENDERERS: dict[type[Problem], Callable[[Any], tuple[str, str]]] = {
    ReleaseNotVerified: _not_verified,
    NotAReleaseArchive: _not_ours,
    NoCarriedSources: _no_sources,
    SandboxRefuses: _sandbox_refuses,
    CacheNotAFolder: _cache_not_a_folder,
}
