"""Words for messages."""

from __future__ import annotations

import difflib
import unicodedata
from collections.abc import Iterable
from typing import Any

__all__ = ["did_you_mean", "diff_keys", "printable"]

# control (Cc: ESC, BEL, CR, C1's CSI...), format (Cf: bidi overrides, zero-width) and line
# / paragraph separators: what can move a terminal's cursor, recolour it, set its title or
# reorder what is shown
_HIDDEN = frozenset(("Cc", "Cf", "Zl", "Zp", "Cs"))


def printable(text: str) -> str:
    """``text`` safe to show on a terminal, on one line: every control or format character
    (ESC, BEL, newline, C1 controls, bidi overrides, zero-width characters...) written as
    its escape (``\\x1b``, ``\\u202e``); everything else, non-ASCII letters included, as is.
    For strings that come from input patchkit does not trust (archive member names,
    manifest and statement fields) before they are printed, as text or in messages."""
    if text.isprintable():
        return text  # the common case: nothing to escape (isprintable is False for all above)
    out = []
    for c in text:
        if unicodedata.category(c) in _HIDDEN:
            n = ord(c)
            out.append(f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}")
        else:
            out.append(c)
    return "".join(out)


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
