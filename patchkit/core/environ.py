"""The process environment, for a function whose ``env=None`` means "this process's".

Below the CLI nothing reads ``os.environ`` itself (ruff's banned-api rule, TID251, in
pyproject.toml): the CLI takes a snapshot and passes it down (``BuildOptions.env``,
``run_smoke(env=...)``). A function that also takes ``env=None`` for callers without one
(tests, scripts) gets the process's environment here; ``core.paths`` (the cache and project
folders), ``core.log`` (CI detection) and ``git.runner`` read it where they are.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["process_env"]


def process_env(env: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """``env`` when given, else the process's environment (read, never copied)."""
    return os.environ if env is None else env
