"""Golden words of the git problems (patchkit/git/problems.py)."""

from __future__ import annotations

from patchkit.core.errors import ConfigError, FatalError, SourceError
from patchkit.git.problems import BadRange, NotARepository, UnknownRef, UpstreamMissing

__all__ = ["GOLDEN"]

UPSTREAM = "point --upstream at a llama.cpp clone or mirror, or a git URL"

GOLDEN: list[tuple[FatalError, str, str]] = [
    (
        ConfigError(problem=BadRange(text="v1.0")),
        "range 'v1.0' must be OLD..NEW (two commits or refs)",
        "e.g. --range v1.0..origin/master",
    ),
    (
        SourceError(problem=NotARepository(shown="/src/x", option="repo", found="not-git")),
        "/src/x is not a git repository",
        "pass --repo PATH to a clone or mirror of upstream",
    ),
    (
        SourceError(problem=NotARepository(shown="/src/nope", option="upstream", found="missing")),
        "upstream path /src/nope does not exist",
        UPSTREAM,
    ),
    (
        SourceError(problem=NotARepository(shown="https://***@h/x", option="upstream", found="not-git")),
        "https://***@h/x is not a git repository",
        UPSTREAM,
    ),
    (
        SourceError(problem=UnknownRef(ref="v9", repo="/src/llama.cpp")),
        "unknown ref 'v9' in /src/llama.cpp: no such commit, branch or tag",
        "`git -C REPO log --oneline` lists commits; fetch first if it is new",
    ),
    (
        SourceError(
            problem=UpstreamMissing(stage="clone", said="cloning https://h/x failed: could not resolve host")
        ),
        "cloning https://h/x failed: could not resolve host",
        "offline? pass --upstream PATH (a local llama.cpp clone or mirror)",
    ),
    (
        SourceError(
            problem=UpstreamMissing(stage="commit", said="commit abc is not in https://h/x (fatal: no)")
        ),
        "commit abc is not in https://h/x (fatal: no)",
        "check upstream.commit in the recipe, or --upstream",
    ),
]
