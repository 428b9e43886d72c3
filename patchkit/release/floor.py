"""The C library floor of a release: the newest GLIBC_/GLIBCXX_/CXXABI_/GCC_ symbol version
each ELF file needs (binary.elf's ``.gnu.version_r`` reader) and the system libraries it
imports, per file and over the archive (spec.manifest.FloorSummary).

A recipe states its floor (``[release] glibc = "2.31"``, ``glibcxx``, ``cxxabi``):
`release` refuses a build with a file above it (:func:`refuse_above`), and `verify`
recomputes the floor from the archive's own bytes and compares it with the manifest's
(:func:`verify_floor`), and with the floor the manifest states.
"""

from __future__ import annotations

from collections.abc import Mapping

from patchkit.binary.elf import ElfDynamic, above_floor, newest_versions
from patchkit.core.errors import ReleaseError
from patchkit.core.text import printable
from patchkit.spec.manifest import FileFloor, FloorSummary, ReleaseManifest

__all__ = ["compute_floor", "describe", "floor_line", "problems", "refuse_above", "verify_floor"]

_FLOOR_KEYS = {"GLIBC": "glibc", "GLIBCXX": "glibcxx", "CXXABI": "cxxabi"}


def compute_floor(elves: Mapping[str, ElfDynamic], stated: Mapping[str, str]) -> FloorSummary | None:
    """The floor of the ELF files ``elves`` ({path in the archive: its dynamic section});
    None when there is none (a Windows release)."""
    if not elves:
        return None
    shipped = {p.rsplit("/", 1)[-1] for p in elves}
    files: list[FileFloor] = []
    system: set[str] = set()
    for path in sorted(elves):
        dyn = elves[path]
        own_system = tuple(n for n in dyn.needed if n not in shipped)
        system.update(own_system)
        files.append(FileFloor(path=path, versions=newest_versions(dyn.version_needs), system=own_system))
    return FloorSummary(
        # the newest of each family over every file's needs: the same fold as one file's
        newest=newest_versions(n for path in sorted(elves) for n in elves[path].version_needs),
        stated=dict(stated),
        system=tuple(sorted(system)),
        files=tuple(files),
    )


def describe(summary: FloorSummary) -> str:
    """ "GLIBC_2.30 GLIBCXX_3.4.26 CXXABI_1.3.11" (the newest of each family)."""
    return " ".join(f"{k}_{v}" for k, v in summary.newest.items() if k != "GCC") or "no versioned symbols"


def _above(summary: FloorSummary) -> list[tuple[str, str, str, str]]:
    """(path, family, needed, floor) per file and family above the stated floor."""
    return [
        (f.path, prefix, needed, limit)
        for f in summary.files
        for prefix, needed, limit in above_floor(f.versions, summary.stated)
    ]


def problems(summary: FloorSummary) -> list[str]:
    """One line per file and family above the stated floor, in file order."""
    return [f"{p} needs {x}_{n}, above the floor {x}_{lim}" for p, x, n, lim in _above(summary)]


def refuse_above(summary: FloorSummary | None, recipe_name: str) -> None:
    """ReleaseError naming the first file and symbol version above the recipe's floor."""
    if summary is None:
        return
    found = _above(summary)
    if not found:
        return
    path, prefix, needed, limit = found[0]
    key = _FLOOR_KEYS.get(prefix, prefix.lower())
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    raise ReleaseError(
        f"{path} needs {prefix}_{needed}, above the floor {prefix}_{limit} that recipe {recipe_name} "
        f"states{more}: it would not start on the systems the recipe promises",
        hint='build it in an older root ([build] root = "debian11", `patchkit root prepare debian11`), '
        f"or raise [release] {key} in the recipe if the newer floor is meant",
    )


def verify_floor(
    label: str,
    manifest: ReleaseManifest,
    elves: Mapping[str, ElfDynamic],
    skip: frozenset[str] = frozenset(),
) -> list[str]:
    """What differs between the manifest's floor and the one recomputed from the archive's
    ELF files, and each file above the stated floor. An older manifest without a floor is
    not checked (it claimed none). The files in ``skip`` (other bytes than the manifest
    says, or a malformed ELF file: reported by the member and RUNPATH checks already) are
    not compared again, and the overall floor only when no file is skipped; a file above
    the stated floor is named whatever else is wrong with it."""
    recorded = manifest.floor
    if recorded is None:
        return []
    again = compute_floor(elves, recorded.stated)
    if again is None:
        if skip:
            return []
        return [f"{label}: the manifest records a C library floor but the archive has no ELF files"]
    diffs: list[str] = []
    if not skip and dict(again.newest) != dict(recorded.newest):
        diffs.append(
            f"{label}: the files need {describe(again)}, the manifest's floor says {describe(recorded)}"
        )
    mine = {f.path: f for f in recorded.files}
    for f in again.files:
        if f.path in skip:
            continue
        was = mine.get(f.path)
        if was is None:
            diffs.append(f"{label}: {f.path}: not in the manifest's floor")
        elif dict(was.versions) != dict(f.versions) or tuple(was.system) != tuple(f.system):
            diffs.append(f"{label}: {f.path}: needs {_line(f)}, the manifest's floor says {_line(was)}")
    for path in sorted(set(mine) - {f.path for f in again.files} - skip):
        diffs.append(f"{label}: {path}: in the manifest's floor but not an ELF file of the archive")
    if not skip and tuple(again.system) != tuple(recorded.system):
        diffs.append(
            f"{label}: the files import {', '.join(again.system) or 'nothing'} from the system, "
            f"the manifest's floor says {', '.join(recorded.system) or 'nothing'}"
        )
    diffs += [f"{label}: {p}" for p in problems(again)]
    return diffs


def _line(f: FileFloor) -> str:
    versions = " ".join(f"{k}_{v}" for k, v in f.versions.items()) or "no versioned symbols"
    return f"{versions}; system {', '.join(f.system) or 'nothing'}"


def floor_line(name: str, manifest: ReleaseManifest) -> str:
    """One line for a verified archive: what its files need (the manifest's floor), the floor its
    recipe states, and what it takes from the system; the libraries of the CUDA runtime archive
    beside it and NVIDIA's driver are named as such, not as the system's (a user would not find
    libcublas.so.11 with apt)."""
    summary = manifest.floor
    if summary is None:  # a Windows release, or one made before floors
        return printable(f"{name}: no C library floor recorded")
    stated = " ".join(f"{k}_{v}" for k, v in summary.stated.items())
    runtime = {f.rsplit("/", 1)[-1] for f in manifest.runtime.files} if manifest.runtime else set()
    driver = set(manifest.imports.driver) if manifest.imports else set()
    system = ", ".join(n for n in summary.system if n not in runtime | driver) or "nothing"
    parts = [f"from the system: {system}"]
    if found := [n for n in summary.system if n in runtime]:
        parts.append(f"from the CUDA runtime archive: {', '.join(found)}")
    if found := [n for n in summary.system if n in driver - runtime]:
        parts.append(f"from NVIDIA's driver: {', '.join(found)}")
    return printable(
        f"{name}: C library floor {describe(summary)}"
        + (f" (within the stated {stated})" if stated else " (no floor stated)")
        + "; "
        + "; ".join(parts)
    )
