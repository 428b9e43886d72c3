"""A build after a file of the worktree was touched reuses the configure. llama.cpp's
CMake lists the worktree's git index among the files that re-run the configure; the
check that the worktree is still as patchkit left it rewrote that index (``git
update-index --refresh``) whenever a file's timestamps changed, so every such build ran
CMake again. The check now writes nothing, and still refuses a worktree whose files
differ from the applied series."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from patchkit.core.paths import cache_dir
from tests.fixtures.project import assert_error, build, write_recipe
from tests.fixtures.upstream import CMAKELISTS, FixtureUpstream, commit_files, git

# what llama.cpp's common/CMakeLists.txt does for its build-info: the worktree's
# .git is a file naming the git dir, whose index re-runs the configure when it changes
GIT_INDEX_DEPENDS = """\
if(EXISTS "${PROJECT_SOURCE_DIR}/.git")
  set(GIT_DIR "${PROJECT_SOURCE_DIR}/.git")
  if(NOT IS_DIRECTORY "${GIT_DIR}")
    file(READ ${GIT_DIR} REAL_GIT_DIR_LINK)
    string(REGEX REPLACE "gitdir: (.*)\\n$" "\\\\1" REAL_GIT_DIR ${REAL_GIT_DIR_LINK})
    string(FIND "${REAL_GIT_DIR}" "/" SLASH_POS)
    if (SLASH_POS EQUAL 0)
      set(GIT_DIR "${REAL_GIT_DIR}")
    else()
      set(GIT_DIR "${PROJECT_SOURCE_DIR}/${REAL_GIT_DIR}")
    endif()
  endif()
  if(EXISTS "${GIT_DIR}/index")
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${GIT_DIR}/index")
    message(STATUS "fixture: configure depends on ${GIT_DIR}/index")
  endif()
endif()
"""


def _project_on_index_upstream(project: Path, upstream: FixtureUpstream, tmp_path: Path) -> Path:
    """The fixture upstream plus a commit making its configure depend on the git index;
    the project's recipe pinned there. Returns the recipe's git index once built."""
    repo = tmp_path / "upstream-index"
    shutil.copytree(upstream.path, repo)
    head = commit_files(repo, {"CMakeLists.txt": CMAKELISTS + GIT_INDEX_DEPENDS}, "build: build-info")
    write_recipe(project, "fixture", url=str(repo), commit=head)
    return repo


def _work() -> Path:
    (work,) = (cache_dir() / "work").glob("fixture-*")
    return work


def _index(src: Path) -> Path:
    return Path(git(src, "rev-parse", "--path-format=absolute", "--git-path", "index"))


def test_a_touched_file_neither_rewrites_the_index_nor_reconfigures(
    project: Path, upstream: FixtureUpstream, tmp_path: Path
) -> None:
    _project_on_index_upstream(project, upstream, tmp_path)
    out = tmp_path / "out"
    r = build(project, out, "--no-smoke")
    assert r.exit_code == 0, r.output
    work = _work()
    log = (work / "build.log").read_text()
    assert "configure depends on" in log and "/index" in log  # the fixture does what llama.cpp does
    index = _index(work / "src")
    assert index.is_file()
    before = (index.stat().st_mtime_ns, index.read_bytes())

    # a touched patched file (same bytes, new timestamps): what an editor's save or a
    # checkout does; a second later so the index's stat data is surely stale
    time.sleep(1.1)
    patched = work / "src" / "src" / "rpc.c"
    now = time.time_ns()
    os.utime(patched, ns=(now, now))

    r = build(project, out, "--no-smoke")
    assert r.exit_code == 0, r.output
    assert "is up to date" in r.output, r.output  # the worktree was reused
    assert (index.stat().st_mtime_ns, index.read_bytes()) == before
    log = (work / "build.log").read_text()
    assert "Re-running CMake" not in log, log
    assert "rpc.c" in log, log  # ninja did rebuild what was touched


def test_an_edit_after_a_touch_is_still_refused(
    project: Path, upstream: FixtureUpstream, tmp_path: Path
) -> None:
    _project_on_index_upstream(project, upstream, tmp_path)
    out = tmp_path / "out"
    assert build(project, out, "--no-smoke").exit_code == 0
    src = _work() / "src"
    index = _index(src)
    before = (index.stat().st_mtime_ns, index.read_bytes())
    time.sleep(1.1)
    patched = src / "src" / "rpc.c"
    patched.write_text(patched.read_text() + "/* the user's edit */\n")
    r = build(project, out, "--no-smoke")
    assert_error(r, 4, "has changes patchkit did not make", "src/rpc.c")
    assert (index.stat().st_mtime_ns, index.read_bytes()) == before
    assert "the user's edit" in patched.read_text()  # never reset


def test_a_staged_edit_is_refused(project: Path, upstream: FixtureUpstream, tmp_path: Path) -> None:
    """The same bytes in the files and the index, but not the series' tree."""
    _project_on_index_upstream(project, upstream, tmp_path)
    out = tmp_path / "out"
    assert build(project, out, "--no-smoke").exit_code == 0
    src = _work() / "src"
    (src / "src" / "core.c").write_text("/* staged */\n")
    git(src, "add", "src/core.c")
    r = build(project, out, "--no-smoke")
    assert_error(r, 4, "has changes patchkit did not make")
