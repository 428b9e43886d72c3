"""A full disk under the output (``--out``, the export folder, the project, the cache): each
file-changing call a real CLI run makes there fails in turn with ENOSPC (strace's error
injection, tests/fixtures/faults.py; sampled like the kill points). Each time: one error
line, no traceback, a non-zero exit, the folder exactly as before (nothing half written, no
temp file left), and the next run, with room again, works. One case on a real, small tmpfs
(root only: mounting)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tests.fixtures.drift import BumpUpstream, bump_project, make_bump_upstream
from tests.fixtures.faults import Scenario, differ, sample, state, strace_missing
from tests.fixtures.project import write_recipe
from tests.fixtures.queue import QUEUE_DATA
from tests.fixtures.release import make_build
from tests.fixtures.upstream import GIT_ENV, with_git_env

pytestmark = pytest.mark.skipif(strace_missing() is not None, reason=str(strace_missing()))

State = dict[str, bytes | str]
# ENOSPC where a full file system gives it: creating a file or folder, writing, syncing, and
# a rename or link that needs a new directory entry
_NO_SPACE_CALLS = frozenset(
    {
        "openat",
        "open",
        "creat",
        "write",
        "pwrite64",
        "writev",
        "fsync",
        "fdatasync",
        "mkdir",
        "mkdirat",
        "rename",
        "renameat",
        "renameat2",
        "link",
        "linkat",
        "ftruncate",
    }
)


@pytest.fixture(scope="module")
def bup(tmp_path_factory: pytest.TempPathFactory) -> BumpUpstream:
    return with_git_env(make_bump_upstream, tmp_path_factory.mktemp("bump"))


def full_disk_loop(
    sc: Scenario,
    args: Sequence[str],
    *,
    folder: Path,
    watch: Callable[[], State],
    cap: int | None = None,
) -> None:
    """ENOSPC at each sampled file-changing call under ``folder`` (the full file system)."""
    old = watch()
    done, points = sc.points(args)
    assert done.returncode == 0, done.stderr
    new = watch()
    sc.reset()
    # (a call that failed anyway, mkdir of an existing folder, cannot fail otherwise)
    points = [
        p for p in points if p.syscall in _NO_SPACE_CALLS and str(folder) in p.line and " = -1 " not in p.line
    ]
    assert points
    failures: list[str] = []
    for point in sample(points, cap):
        sc.reset()
        r = sc.run(args, inject=f"{point.syscall}:error=ENOSPC:when={point.nth}")
        problems = []
        if r.returncode == 0:  # it did without that call (a hard link it copies instead)
            if differ(new, watch()):
                failures.append(f"ENOSPC at {point}: exit 0, and not the result: {differ(new, watch())[:6]}")
            continue
        if "Traceback" in r.stderr or len(r.errors) != 1:
            problems.append(f"not one error line: {r.stderr[-600:]!r}")
        if changed := differ(old, watch()):
            problems.append(f"changed: {changed[:6]}")
        elif leftovers := sorted(set(watch()) - set(old)):
            problems.append(f"left behind: {leftovers[:6]}")
        if not problems:
            nxt = sc.plain(args)
            if nxt.returncode != 0 or differ(new, watch()):
                problems.append(f"the next run: exit {nxt.returncode}: {nxt.stderr[-300:]!r}")
        if problems:
            failures.append(f"ENOSPC at {point}:\n  " + "\n  ".join(problems))
    assert not failures, f"{len(failures)} of {len(points)} points went wrong:\n" + "\n".join(failures)


def test_release_out_full(tmp_path: Path) -> None:
    root = tmp_path / "rel"
    build = make_build(root)
    dist = root / "dist"
    dist.mkdir()
    (dist / "NOTES.txt").write_text("the user's own file\n")  # a previous state to keep
    sc = Scenario(root, env={"PATCHKIT_CACHE": str(root / "cache")})
    sc.freeze()
    args = ["release", "--build-dir", str(build), "--out", str(dist)]
    full_disk_loop(sc, args, folder=dist, watch=lambda: state(dist))


def _queue_project(tmp_path: Path) -> tuple[Scenario, Path]:
    root = tmp_path / "q"
    project = root / "project"
    (project / "recipes").mkdir(parents=True)
    (project / "patches").mkdir()
    write_recipe(project, "fixture", url=str(tmp_path / "nowhere"), commit="a" * 40)
    older = root / "older"
    shutil.copytree(QUEUE_DATA, older)
    for m in older.iterdir():
        m.write_bytes(m.read_bytes().replace(b"\n---\n", b"\nv1\n---\n", 1))
    shutil.copytree(QUEUE_DATA, root / "mails")
    sc = Scenario(root, env={"PATCHKIT_CACHE": str(root / "cache")})
    assert sc.plain(["--project", str(project), "series", "import", str(older)]).returncode == 0
    return sc, project


def test_series_import_patches_full(tmp_path: Path) -> None:
    sc, project = _queue_project(tmp_path)
    sc.freeze()
    args = ["--project", str(project), "series", "import", str(sc.root / "mails"), "--replace"]
    full_disk_loop(sc, args, folder=project, watch=lambda: state(project))


def test_series_export_folder_full(tmp_path: Path) -> None:
    sc, project = _queue_project(tmp_path)
    out = sc.root / "export"
    assert sc.plain(["--project", str(project), "series", "export", str(out)]).returncode == 0
    assert (
        sc.plain(
            ["--project", str(project), "series", "import", str(sc.root / "mails"), "--replace"]
        ).returncode
        == 0
    )
    sc.freeze()
    args = ["--project", str(project), "series", "export", str(out), "--replace"]
    full_disk_loop(sc, args, folder=out, watch=lambda: state(out))


def test_bump_cache_full(tmp_path: Path, bup: BumpUpstream) -> None:
    """The cache (the bump's refresh folder, its records) on a full disk: the project is
    untouched, and nothing left there stops the next bump."""
    root = tmp_path / "b"
    root.mkdir()
    project = bump_project(root, bup, pin=bup.c["b1"])
    cache = root / "cache"
    sc = Scenario(root, env={"PATCHKIT_CACHE": str(cache), **GIT_ENV, "GIT_CONFIG_GLOBAL": os.devnull})
    sc.freeze()
    args = ["--project", str(project), "bump", "fixture", "--upstream", str(bup.path), "--to", bup.c["b4"]]
    full_disk_loop(sc, args, folder=cache, watch=lambda: state(project), cap=6)


# ------------------------------------------------------------------ a real small tmpfs


@contextlib.contextmanager
def _tmpfs(at: Path, size: str) -> Iterator[Path]:
    at.mkdir(parents=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(at)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode(errors='replace').strip()}")
    try:
        yield at
    finally:
        subprocess.run(["umount", "-l", str(at)], check=False)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_release_onto_a_small_tmpfs(tmp_path: Path) -> None:
    build = make_build(tmp_path)
    with _tmpfs(tmp_path / "small", "64k") as small:
        dist = small / "dist"
        dist.mkdir()
        (dist / "NOTES.txt").write_text("the user's own file\n")
        # fill it up to a few KiB: the archive (tens of KiB) cannot fit
        with (small / "filler").open("wb", buffering=0) as f, contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 4096)
        os.truncate(small / "filler", (small / "filler").stat().st_size - 8192)
        before = state(dist)
        sc = Scenario(tmp_path, env={"PATCHKIT_CACHE": str(tmp_path / "cache")})
        r = sc.plain(["release", "--build-dir", str(build), "--out", str(dist)])
        assert r.returncode != 0 and "Traceback" not in r.stderr
        assert len(r.errors) == 1 and "no space left" in r.errors[0].lower(), r.stderr
        assert state(dist) == before
        (small / "filler").unlink()
        r = sc.plain(["release", "--build-dir", str(build), "--out", str(dist)])
        assert r.returncode == 0, r.stderr
        assert sc.plain(["verify", str(dist)]).returncode == 0


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="preparing a root needs root")
def test_root_prepare_cache_full(tmp_path: Path) -> None:
    """The cache on a full disk while a build root is prepared: no root (nor half of one)
    is left to be taken for prepared, and the next prepare makes it."""
    from tests.fixtures.sysroot import fake_tools

    root = tmp_path / "root"
    tools = fake_tools(root / "tools")
    cache = root / "cache"
    cache.mkdir()
    sc = Scenario(root, env={"PATCHKIT_CACHE": str(cache), "PATH": f"{tools}:/usr/bin:/bin"})
    sc.freeze()
    roots = cache / "roots"

    def watch() -> State:
        # the root: its tree, and whether it has its record (whose time differs run to run);
        # a failed preparation keeps its prepare.log, which says why
        st = state(roots)
        got: State = {k: v for k, v in st.items() if k.startswith("debian11/tree")}
        if "debian11/root.json" in st:
            got["debian11/root.json"] = "present"
        return got

    full_disk_loop(sc, ["root", "prepare", "debian11"], folder=roots, watch=watch)
