"""How a refresh's messages name what the person does next (``--continue``, ``--skip``,
``--abort``, ...) without spelling a command line: :func:`action` puts a placeholder
for "the refresh command with this action" in the text, and the CLI, which knows how the
user names the refresh (the recipe as given, ``--workdir`` when one was given), writes
the command line in its place (:func:`render`), in the message, its detail and its hint.
The placeholder is delimited by NUL characters, which no file name, commit subject or
other text a message quotes can hold."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path

__all__ = ["action", "outside_actions", "render"]

_MARK = "\0"
_PLACEHOLDER = re.compile(_MARK + "refresh ([^" + _MARK + "]*)" + _MARK)


def action(what: str) -> str:
    """A placeholder for the refresh command that does ``what`` (e.g. ``--continue``)."""
    return f"{_MARK}refresh {what.replace(_MARK, '')}{_MARK}"


def outside_actions(text: str, f: Callable[[str], str]) -> str:
    """``text`` with ``f`` applied to what is not a placeholder (escaping quoted text for a
    terminal leaves the placeholders for :func:`render`)."""
    out: list[str] = []
    at = 0
    for m in _PLACEHOLDER.finditer(text):
        out += [f(text[at : m.start()]), m.group(0)]
        at = m.end()
    return "".join([*out, f(text[at:])])


def render(text: str, *, prefix: str = "patchkit refresh", workdir: Path | None = None) -> str:
    """``text`` with every placeholder written as the command line ``PREFIX ACTION``,
    ``--workdir WORKDIR`` after it when one is given (the user gave it)."""
    where = f" --workdir {shlex.quote(str(workdir))}" if workdir is not None else ""
    return _PLACEHOLDER.sub(lambda m: f"{prefix} {m.group(1)}{where}", text)
