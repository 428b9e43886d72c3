"""Words for messages."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any

__all__ = ["did_you_mean", "diff_keys", "printable"]

# C0 controls (ESC, BEL, CR, backspace...), DEL, C1 controls (a lone 0x9b is a CSI on many
# terminals), and the Unicode marks that reorder or hide text (bidi overrides and isolates,
# zero-width characters, the line and paragraph separators)
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


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


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """Text from outside (commit subjects, names in archives) safe to print on a terminal or
    in a document: every control or invisible reordering character becomes a visible escape
    (``\\x1b``, ``\\u202e``), so no escape sequence, bell or hidden text reaches the reader.
    ``keep_newlines``: ``\\n`` stays a line break."""

    def esc(m: re.Match[str]) -> str:
        c = m.group(0)
        if keep_newlines and c == "\n":
            return c
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"

    return _UNPRINTABLE.sub(esc, text)
