"""``StrEnum``: an enum whose members are their string values, also in f-strings and JSON
(Python 3.10 has no enum.StrEnum, and 3.11 formats ``(str, Enum)`` members as
``Class.MEMBER``)."""

from __future__ import annotations

import enum

__all__ = ["StrEnum"]


class StrEnum(str, enum.Enum):
    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)
