"""Golden words of the rebuild problems (patchkit/rebuild/problems.py)."""

from __future__ import annotations

from pathlib import Path

from patchkit.core.errors import ConfigError, FatalError, ReleaseError
from patchkit.rebuild.problems import (
    CacheNotAFolder,
    NoCarriedSources,
    NotAReleaseArchive,
    ReleaseNotVerified,
    SandboxRefuses,
)

__all__ = ["GOLDEN"]

NOT_OURS = "it is not an archive `patchkit release` wrote; do not unpack it"
A = "llama-82bb485-pk5f3c2a1b-linux-x86_64-cpu-rpc.tar.gz"

GOLDEN: list[tuple[FatalError, str, str]] = [
    (
        ReleaseError(problem=ReleaseNotVerified(target=Path("/d/dist"), differences=1)),
        "/d/dist does not verify (1 difference): not rebuilding it",
        "run `patchkit verify /d/dist` for the list",
    ),
    (
        ReleaseError(problem=ReleaseNotVerified(target=Path("/d/dist"), differences=4)),
        "/d/dist does not verify (4 differences): not rebuilding it",
        "run `patchkit verify /d/dist` for the list",
    ),
    (
        ReleaseError(problem=NotAReleaseArchive(found=f"{A}: manifest.json is not a JSON object")),
        f"{A}: manifest.json is not a JSON object",
        NOT_OURS,
    ),
    (
        ReleaseError(
            problem=NotAReleaseArchive(
                found=f"{A}: source/recipe.toml does not match the manifest's files list", against="files"
            )
        ),
        f"{A}: source/recipe.toml does not match the manifest's files list",
        "run `patchkit verify` on its folder",
    ),
    (
        ReleaseError(
            problem=NotAReleaseArchive(
                found=f"{A}: its members are not the files its manifest lists (1 difference): not rebuilding it",
                against="members",
            )
        ),
        f"{A}: its members are not the files its manifest lists (1 difference): not rebuilding it",
        f"run `patchkit verify` on its folder; {NOT_OURS}",
    ),
    (
        ReleaseError(problem=NoCarriedSources(archive=A)),
        f"{A} carries no sources (released without its recipe, or from a stale build): it cannot be "
        "rebuilt from the archive alone",
        "release it again with `patchkit release RECIPE`",
    ),
    (
        ConfigError(problem=SandboxRefuses(asked="sccache", launcher_from="--launcher")),
        "--launcher asks for sccache, which cannot work in the rebuild's sandbox (its server is outside, "
        "and there is no network)",
        "--launcher ccache or none, or --no-sandbox if you trust this release",
    ),
    (
        ConfigError(problem=SandboxRefuses(asked="smoke")),
        "--smoke runs the rebuilt binaries (the release's code) on this host, outside the sandbox",
        "add --no-sandbox only if you trust this release (comparing bytes needs no smoke)",
    ),
    (
        ConfigError(problem=CacheNotAFolder(given=Path("/tmp/c"))),
        "--cache /tmp/c is not a folder",
        "name a folder (it is made if missing)",
    ),
]
