"""Words for messages."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

__all__ = ["did_you_mean", "diff_keys"]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return ' (did you mean "x"?)' or '' when nothing is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ""


def diff_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    """The dotted paths (``a.b[2].c``) where two JSON values differ; ``(whole)`` for the top."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b)):
            out += diff_keys(a.get(k), b.get(k), f"{prefix}.{k}" if prefix else k)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += diff_keys(x, y, f"{prefix}[{i}]")
        return out
    return [] if a == b else [prefix or "(whole)"]
