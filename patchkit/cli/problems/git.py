"""The words of the git problems (``patchkit/git/problems.py``): the message is each
problem's own line of facts, the advice names the option or command that helps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from patchkit.core.errors import Problem
from patchkit.git.problems import BadRange, NotARepository, UnknownRef, UpstreamMissing

__all__ = ["RENDERERS"]


def _bad_range(p: BadRange) -> tuple[str, str]:
    return str(p), "e.g. --range v1.0..origin/master"


def _not_a_repository(p: NotARepository) -> tuple[str, str]:
    if p.option == "repo":
        return str(p), "pass --repo PATH to a clone or mirror of upstream"
    return str(p), "point --upstream at a llama.cpp clone or mirror, or a git URL"


def _unknown_ref(p: UnknownRef) -> tuple[str, str]:
    return str(p), "`git -C REPO log --oneline` lists commits; fetch first if it is new"


def _upstream_missing(p: UpstreamMissing) -> tuple[str, str]:
    if p.stage == "clone":
        return str(p), "offline? pass --upstream PATH (a local llama.cpp clone or mirror)"
    return str(p), "check upstream.commit in the recipe, or --upstream"


RENDERERS: dict[type[Problem], Callable[[Any], tuple[str, str]]] = {
    BadRange: _bad_range,
    NotARepository: _not_a_repository,
    UnknownRef: _unknown_ref,
    UpstreamMissing: _upstream_missing,
}
