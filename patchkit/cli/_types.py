"""Click parameter types the commands share.

:class:`FiniteFloatRange` is what every float option uses: click's ``FloatRange`` lets NaN
through any bound (every comparison with NaN is false) and ``inf`` through an open one, and
a timeout of NaN or infinity then fails deep inside (``socket.settimeout``, ``int()``) with
a traceback. Here they are a usage error like any other bad value: one line, exit 2.
"""

from __future__ import annotations

import math
from typing import Any

import click

__all__ = ["FiniteFloatRange"]


class FiniteFloatRange(click.FloatRange):
    """A ``click.FloatRange`` that refuses NaN and ±infinity (``nan``, ``inf``, ``1e999``)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)
