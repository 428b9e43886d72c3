"""What stops a model download, as fields; the CLI (``patchkit/cli/problems/weights.py``)
adds the commands that get it another way."""

from __future__ import annotations

import dataclasses

from patchkit.core.errors import Problem

__all__ = ["DownloadFailed"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DownloadFailed(Problem):
    """The sdist ``spec`` (``package==version``) could not be downloaded (``reason``:
    pip's last line)."""

    spec: str
    reason: str

    def __str__(self) -> str:
        return f"cannot download {self.spec} from the package index: {self.reason}"
