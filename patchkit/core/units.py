"""Sizes in recipes and on the command line.

``parse_size`` takes bytes (``268435456``, ``0x10000000``) or a binary unit
(``B``, ``KiB``, ``MiB``, ``GiB``, case-insensitive, optional space). ``KB``/``MB``/``GB``
and ``K``/``M``/``G`` are refused as ambiguous (decimal or binary?) rather than guessed.
"""

from __future__ import annotations

import re

from patchkit.core.errors import PEError

__all__ = ["PAGE_SIZE", "SIZE_LIMIT", "format_size", "parse_size"]

PAGE_SIZE = 4096
SIZE_LIMIT = 1 << 64  # no size patchkit handles needs more than 64 bits

_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_AMBIGUOUS = {
    "k": "KiB",
    "kb": "KiB",
    "m": "MiB",
    "mb": "MiB",
    "g": "GiB",
    "gb": "GiB",
    "t": "TiB",
    "tb": "TiB",
}
_SIZE = re.compile(r"^\s*(?:(0x[0-9a-f]+)|([0-9]+)\s*([a-z]*))\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """``"256MiB"`` -> 268435456. Bytes as an int, decimal or ``0x`` hex; binary units only."""
    if isinstance(text, bool):
        raise PEError(f"size {text!r} is not a number of bytes")
    if isinstance(text, int):
        if text < 0:
            raise PEError(f"size {text} is negative")
        return _bounded(text, str(text))
    if len(text) > 64:
        raise PEError(f"size {text[:32]!r}... is not a size: too long")
    m = _SIZE.match(text)
    if not m:
        raise PEError(
            f"size {text!r} is not a size: write bytes (268435456, 0x10000000) "
            "or a binary unit (256MiB, 1GiB)"
        )
    if m.group(1):
        return _bounded(int(m.group(1), 16), text)
    unit = m.group(3).lower()
    if unit in _AMBIGUOUS:
        raise PEError(
            f"size {text!r} is ambiguous (decimal or binary?): write {m.group(2)}{_AMBIGUOUS[unit]}"
        )
    if unit not in _UNITS:
        raise PEError(f"size {text!r} has an unknown unit {m.group(3)!r}: use B, KiB, MiB, GiB or TiB")
    return _bounded(int(m.group(2)) * _UNITS[unit], text)


def _bounded(n: int, text: str) -> int:
    if n > SIZE_LIMIT:
        raise PEError(f"size {text!r} is too large: at most 2^64 bytes (16 EiB)")
    return n


def format_size(n: int) -> str:
    """268435456 -> ``"256 MiB"``; sizes that are not whole units stay in bytes."""
    for unit, mult in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult} {unit}"
    return f"{n} B"
