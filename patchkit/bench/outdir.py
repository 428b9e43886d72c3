"""A results folder of ``patchkit bench``: owned only by the marker it wrote.

An existing folder is written into only when bench wrote it: it holds bench's marker (or
a bench.json a previous bench wrote, readable as one) and nothing but bench's own files
and folders (:func:`patchkit.core.fs.first_foreign`), none of them a link. Anything else
stops the run (exit 2) before anything is written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from patchkit.core.errors import ConfigError
from patchkit.core.fs import ForeignEntry, atomic_write_json, first_foreign, folder_entries

__all__ = ["BENCH_JSON", "BENCH_MARKER", "check_out_dir", "claim_out_dir", "clear_raw"]

BENCH_JSON = "bench.json"
BENCH_MARKER = ".patchkit-bench"  # written first into a results folder: bench owns it
_BENCH_FILES = frozenset({BENCH_JSON, "bench.md", "bench.png", BENCH_MARKER})  # all a results folder holds
_BENCH_DIRS: Mapping[str, None] = {"raw": None, "logs": None, "demo": None}
_MARKER_MAX = 64 << 10
_BENCH_JSON_MAX = 64 << 20
RAW_NAME = re.compile(r"\d{2,}(?:-[a-z]+)?(?:-r1)?\.(?:out|err)")  # bench.point's names for raw outputs


def check_out_dir(out_dir: Path) -> None:
    """ConfigError (exit 2) unless ``out_dir`` is absent, empty, or provably a results folder
    patchkit bench wrote: it holds bench's marker (or a bench.json a previous bench wrote,
    readable as one), and nothing but bench's own files and folders, none of them a link.
    A name alone proves nothing: a user's ``raw/`` of camera files is not bench's ``raw/``,
    so bench's names count only beside its marker."""
    try:
        entries = folder_entries(out_dir)
    except NotADirectoryError:
        raise ConfigError(f"{out_dir} is not a folder for the results", hint=_PICK_OUT) from None
    except OSError as e:
        raise ConfigError(f"cannot list {out_dir}: {e.strerror or e}", hint=_PICK_OUT) from None
    if not entries:
        return
    if not _owned(out_dir):
        raise ConfigError(
            f"{out_dir} holds {entries[0]}, and patchkit bench did not write that folder "
            f"(no {BENCH_MARKER}, no {BENCH_JSON} of a previous bench): not writing into it",
            hint=_PICK_OUT,
        )
    found = first_foreign(out_dir, entries, files=_BENCH_FILES.__contains__, dirs=_BENCH_DIRS)
    if found is not None:
        raise ConfigError(problem=ForeignEntry(folder=out_dir, entry=found, owner="bench"))


_PICK_OUT = "give an empty or new folder, or one a previous bench wrote"


def _owned(out_dir: Path) -> bool:
    """Whether ``out_dir`` holds bench's marker, or a bench.json that reads as bench's own
    (a folder a bench wrote before the marker existed)."""
    marker = out_dir / BENCH_MARKER
    if not marker.is_symlink() and marker.is_file():
        data = _read_small(marker, _MARKER_MAX)
        return isinstance(data, dict) and data.get("written_by") == "patchkit bench"
    report = out_dir / BENCH_JSON
    if not report.is_symlink() and report.is_file():
        data = _read_small(report, _BENCH_JSON_MAX)
        return (
            isinstance(data, dict)
            and data.get("schema") == 1
            and isinstance(data.get("points"), list)
            and isinstance(data.get("settings"), dict)
        )
    return False


def _read_small(path: Path, limit: int) -> object:
    try:
        with path.open("rb") as f:
            raw = f.read(limit + 1)
        if len(raw) > limit:
            return None
        return json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None


def claim_out_dir(out_dir: Path) -> None:
    """Create ``out_dir`` (checked by :func:`check_out_dir`) and mark it bench's, before
    anything else is written into it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if not (out_dir / BENCH_MARKER).is_file():
        atomic_write_json(
            out_dir / BENCH_MARKER,
            {"written_by": "patchkit bench", "note": "this folder holds patchkit bench's results"},
        )


def clear_raw(raw: Path) -> None:
    """A previous bench's raw llama-bench outputs, by their names (anything else stays)."""
    if raw.is_symlink() or not raw.is_dir():
        return
    for p in raw.iterdir():
        if RAW_NAME.fullmatch(p.name) and not p.is_symlink() and p.is_file():
            p.unlink(missing_ok=True)
