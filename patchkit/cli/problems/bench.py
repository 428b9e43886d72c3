"""The words of the bench problems (``patchkit/bench/problems.py``): ``patchkit bench``'s
flags, named here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from patchkit.bench.problems import BuildForAnotherOs, LinkWithoutRpc, ModelMissing, SweepRefused
from patchkit.core.errors import Problem

__all__ = ["RENDERERS"]


def _another_os(p: BuildForAnotherOs) -> tuple[str, str]:
    return (
        f"{p.build_dir} is a Windows build: run patchkit bench on Windows",
        "or point --build at a build for this machine",
    )


def _model_missing(p: ModelMissing) -> tuple[str, str]:
    return f"model {p.model} does not exist", "give -m PATH.gguf"


def _link_without_rpc(p: LinkWithoutRpc) -> tuple[str, str]:
    return "--link shapes the connections to the RPC hosts: give --rpc HOST:PORT", "or try it with --demo"


def _sweep(p: SweepRefused) -> tuple[str, str]:
    if p.found == "syntax":
        return (
            f"--sweep {p.spec!r} is not KEY=VALUE[,VALUE...]",
            "e.g. --sweep sm=layer,tensor --sweep dev-order=auto,remote-first",
        )
    return (
        f"--sweep {p.key}: this llama-bench has no {p.flag} option",
        "use a newer patchkit build (patchkit build) or drop the sweep",
    )


RENDERERS: dict[type[Problem], Callable[[Any], tuple[str, str]]] = {
    BuildForAnotherOs: _another_os,
    ModelMissing: _model_missing,
    LinkWithoutRpc: _link_without_rpc,
    SweepRefused: _sweep,
}
