"""The build's own inputs, carried in the archive so anyone can rebuild it from the archive alone.

An archive holds, under ``source/``, the project files the build read, at the paths they
have in the project::

    source/recipes/<recipe>.toml      the recipe file (sha256 = manifest recipe.sha256)
    source/patches/series             a series listing exactly the patches below
    source/patches/<file>.patch       each patch the build applied (sha256 = manifest patches[])
    source/toolchains/<file>.cmake    the CMake toolchain file, if the recipe names one
    source/toolchains/<other files>   the files beside it (a toolchain file reads its helpers
                                      from ``${CMAKE_CURRENT_LIST_DIR}``: mingw's compat header)

They are taken only when they are the bytes the build used (every sha256 equal to
build-info's); otherwise (a release without its recipe, a stale build) the manifest's
``source`` is null and `patchkit rebuild` refuses the archive, saying why.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from patchkit.core.errors import ReleaseError
from patchkit.core.fs import contained, read_capped, sha256_bytes
from patchkit.release.archive import Member
from patchkit.spec.buildinfo import BuildInfo
from patchkit.spec.manifest import FileEntry, SourceRecord
from patchkit.spec.recipe import Recipe

__all__ = ["PREFIX", "SOURCE_MAX", "Sources", "collect", "series_text"]

PREFIX = "source/"
SOURCE_MAX = 1 << 20  # one recipe, patch or toolchain file (kept in memory by rebuild)
TOOLCHAIN_FILES_MAX = 16  # files beside the toolchain file (more: not a toolchain folder)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sources:
    members: tuple[Member, ...]
    files: tuple[FileEntry, ...]  # manifest ``files`` rows (type SOURCE)
    record: SourceRecord | None  # the manifest's ``source``; None: not carried
    why_not: str = ""


def series_text(patches: list[tuple[str, str]]) -> str:
    """A series file for (file name, sha256) pairs, in order."""
    head = "# the patches this release's build applied, in order\n"
    return head + "".join(f"{name} sha256={sha}\n" for name, sha in patches)


def _rel(path: Path, project: Path) -> str | None:
    try:
        rel = path.resolve().relative_to(project.resolve()).as_posix()
    except ValueError:
        return None
    return rel if rel and ".." not in rel.split("/") else None


def _none(why: str) -> Sources:
    return Sources(members=(), files=(), record=None, why_not=why)


def collect(info: BuildInfo, recipe: Recipe | None, project: Path | None) -> Sources:
    """The source members of a release of ``info``'s build (or why there are none)."""
    if recipe is None or project is None:
        return _none("released without its recipe")
    if recipe.sha256 != info.recipe.sha256:
        return _none(f"{recipe.path.name} changed since the build")
    recipe_rel = _rel(recipe.path, project)
    if recipe_rel is None:
        return _none(f"the recipe {recipe.path} is outside the project folder")
    data: dict[str, bytes] = {}
    what = "recipe file"

    def take(rel: str, path: Path, sha: str | None) -> None:
        p = contained(path, project, error=ReleaseError, what=rel)
        raw = read_capped(p, limit=SOURCE_MAX, error=ReleaseError, what=what)
        if sha is not None and sha256_bytes(raw) != sha:
            raise _Changed(rel)
        data[rel] = raw

    by_name = {p.name: p for p in recipe.patches}
    series: list[tuple[str, str]] = []
    extra: list[str] = []  # the toolchain's helper files
    try:
        take(recipe_rel, recipe.path, recipe.sha256)
        for rec in info.patches:
            patch = by_name.get(rec.name)
            if patch is None:
                return _none(f"patch {rec.name} is no longer in the recipe")
            what = f"patch {patch.filename}"
            take(f"patches/{patch.filename}", patch.path, rec.sha256)
            series.append((patch.filename, rec.sha256))
        if recipe.build.toolchain is not None:
            rel = _rel(recipe.build.toolchain, project)
            if rel is None:
                return _none("the toolchain file is outside the project folder")
            what = "toolchain file"
            take(rel, recipe.build.toolchain, None)
            beside = sorted(
                p
                for p in recipe.build.toolchain.parent.iterdir()
                if p.is_file()
                and not p.is_symlink()
                and not p.name.startswith(".")
                and p != recipe.build.toolchain
            )
            if len(beside) > TOOLCHAIN_FILES_MAX:
                return _none(
                    f"the toolchain's folder holds {len(beside)} other files (at most "
                    f"{TOOLCHAIN_FILES_MAX} are carried): keep the toolchain file and "
                    "its helpers in a folder of their own"
                )
            for p in beside:
                helper = _rel(p, project)
                if helper is None:
                    return _none(f"{p.name} beside the toolchain file is outside the project")
                what = f"toolchain helper {p.name}"
                take(helper, p, None)
                extra.append(helper)
    except _Changed as e:
        return _none(f"{e} changed since the build")
    data["patches/series"] = series_text(series).encode()
    members = tuple(Member(name=PREFIX + rel, mode=0o644, data=raw) for rel, raw in sorted(data.items()))
    files = tuple(
        FileEntry(path=m.name, sha256=sha256_bytes(m.data or b""), size=m.size, mode="644", type="SOURCE")
        for m in members
    )
    toolchain = _rel(recipe.build.toolchain, project) if recipe.build.toolchain else None
    record = SourceRecord(
        recipe=PREFIX + recipe_rel,
        series=PREFIX + "patches/series",
        patches=tuple(PREFIX + "patches/" + name for name, _ in series),
        toolchain=PREFIX + toolchain if toolchain else None,
        toolchain_files=tuple(PREFIX + rel for rel in extra),
    )
    return Sources(members=members, files=files, record=record)


class _Changed(Exception):
    pass
