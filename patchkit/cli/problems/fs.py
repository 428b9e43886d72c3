"""The words of the file problems (``patchkit/core/fs_problems.py``): the message is the
problem's own statement of the facts, the advice (which flag, what to do) is written here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from patchkit.core.errors import Problem
from patchkit.core.fs_problems import CopyRefused, TooLarge, WriteFailed, WriteRefused

__all__ = ["RENDERERS"]

_WRITE_ADVICE = {
    "special": "name a regular file (a new one, or one to replace), or /dev/stdout to print it",
    "not-replaceable": "name a regular file (or a new one)",
    "dangling-link": "remove the link, or name the file itself",
    "no-folder": "name a file in an existing folder",
    "no-reader": "start its reader first, or name a regular file",
}


def _write_refused(p: WriteRefused) -> tuple[str, str]:
    return str(p), _WRITE_ADVICE[p.found]


def _copy_refused(p: CopyRefused) -> tuple[str, str]:
    if p.found == "not-plain":
        return str(p), "only plain files are copied out of a build"
    return str(p), "a symlink leaves the folder it belongs to; remove it (or rebuild with --clean)"


def _too_large(p: TooLarge) -> tuple[str, str]:
    return str(p), "is it the right file?"


def _write_failed(p: WriteFailed) -> tuple[str, str]:
    if p.found == "refused":
        return str(p), f"is {p.folder} writable? Pass another --out, or fix its permissions"
    return str(p), f"free space on {p.mount}, or pass another --out on another disk"


RENDERERS: dict[type[Problem], Callable[[Any], tuple[str, str]]] = {
    WriteRefused: _write_refused,
    CopyRefused: _copy_refused,
    TooLarge: _too_large,
    WriteFailed: _write_failed,
}
