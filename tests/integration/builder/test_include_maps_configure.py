"""The include dirs' prefix maps (builder.repro) come from a configure's File API reply. A
work folder's first configure runs without them and then once more with them; a later
configure of it (``--clean``, new defines) is given the last ones from the start and runs
once, and again only when its include dirs differ from them: the build dir always ends up
configured with exactly the maps of its own include dirs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from patchkit.core.paths import cache_dir
from tests.fixtures.project import build, write_recipe
from tests.fixtures.upstream import CMAKELISTS, FixtureUpstream, commit_files

# an include dir CMake passes with ".." in it, as llama.cpp's common/../vendor
DOTTED = "target_include_directories(fixture-core PUBLIC src/../include)\n"


def _pin(project: Path, upstream: FixtureUpstream, tmp_path: Path) -> None:
    repo = tmp_path / "upstream-dotted"
    shutil.copytree(upstream.path, repo)
    head = commit_files(repo, {"CMakeLists.txt": CMAKELISTS + DOTTED}, "build: a dotted include dir")
    write_recipe(project, "fixture", url=str(repo), commit=head)


def _work() -> Path:
    (work,) = (cache_dir() / "work").glob("fixture-*")
    return work


def _configures(work: Path) -> int:
    return (work / "build.log").read_text().count("-- Build files have been written to:")


def _flags(work: Path) -> str:
    cache = (work / "build" / "CMakeCache.txt").read_text()
    return next(ln for ln in cache.splitlines() if ln.startswith("CMAKE_C_FLAGS:"))


def _artifacts(out: Path) -> dict[str, str]:
    info = json.loads((out / "build-info.json").read_text())
    return {a["path"]: a["sha256"] for a in info["artifacts"]}


def test_a_later_configure_runs_once_with_the_same_maps(
    project: Path, upstream: FixtureUpstream, tmp_path: Path
) -> None:
    _pin(project, upstream, tmp_path)
    out = tmp_path / "out"
    r = build(project, out, "--no-smoke", "--launcher", "none")
    assert r.exit_code == 0, r.output
    work = _work()
    src = work / "src"
    wanted = f"-ffile-prefix-map={src}/src/../include/=../src/include/"
    assert wanted in _flags(work).split("=", 1)[1].split()
    assert _configures(work) == 2  # the first one finds the dotted dir
    first, first_bins = _flags(work), _artifacts(out)

    r = build(project, out, "--no-smoke", "--launcher", "none", "--clean")
    assert r.exit_code == 0, r.output
    assert _configures(work) == 1
    assert _flags(work) == first
    assert _artifacts(out) == first_bins

    # nothing changed: no configure at all
    r = build(project, out, "--no-smoke", "--launcher", "none")
    assert r.exit_code == 0, r.output
    assert _configures(work) == 0


def test_maps_that_do_not_match_the_include_dirs_are_configured_again(
    project: Path, upstream: FixtureUpstream, tmp_path: Path
) -> None:
    _pin(project, upstream, tmp_path)
    out = tmp_path / "out"
    assert build(project, out, "--no-smoke", "--launcher", "none").exit_code == 0
    work = _work()
    right = _flags(work)
    stale = f"-ffile-prefix-map={work}/src/gone/../x/=../src/x/"
    (work / "include-maps.json").write_text(json.dumps({"maps": [stale]}))
    r = build(project, out, "--no-smoke", "--launcher", "none", "--clean")
    assert r.exit_code == 0, r.output
    assert _configures(work) == 2
    assert _flags(work) == right  # exactly its own dirs' maps, the stale one gone
    assert stale not in _flags(work)
    # an unreadable record is no record
    (work / "include-maps.json").write_text("not json")
    r = build(project, out, "--no-smoke", "--launcher", "none", "--clean")
    assert r.exit_code == 0, r.output
    assert _configures(work) == 2 and _flags(work) == right
