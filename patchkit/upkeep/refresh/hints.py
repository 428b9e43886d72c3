"""The command lines a refresh's hints name (the recipe as the user gave it, ``--workdir``
when one was given): the one place the refresh spells them."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

__all__ = ["abort_hint", "command_of"]


class _Named(Protocol):
    @property
    def command(self) -> str: ...
    @property
    def hint_workdir(self) -> bool: ...


def command_of(of: _Named, workdir: Path) -> Callable[[str], str]:
    """The command line that does ``action`` to this refresh, as the user can type it: the
    prefix the CLI gave (``patchkit refresh NAME``), ``--workdir`` when one was given."""
    prefix = of.command or "patchkit refresh"
    where = f" --workdir {shlex.quote(str(workdir))}" if of.hint_workdir or not of.command else ""

    def cmd(action: str) -> str:
        return f"{prefix} {action}{where}"

    return cmd


def abort_hint(workdir: Path, of: _Named | None = None) -> str:
    action = (
        command_of(of, workdir)("--abort")
        if of
        else f"patchkit refresh --abort --workdir {shlex.quote(str(workdir))}"
    )
    return f"run `{action}` and start again"
