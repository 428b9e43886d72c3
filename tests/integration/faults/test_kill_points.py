"""kill -9 at any moment of `series import`, `refresh --continue`, `bump`, `release` and
`root prepare` (tests/fixtures/faults.py: strace kills the real CLI at its Nth file-changing
system call, a sample of every such call it makes): afterwards every file is the old bytes
or the new bytes (never half written, never a mix the loader refuses), nothing left behind
blocks the next run, and the next run finishes the job.

The points are sampled (``PATCHKIT_FAULT_POINTS``, default 8 per command, evenly spread;
``all`` for every one) to keep this file within a few minutes."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tests.fixtures.drift import RPC_B5, BumpUpstream, bump_project, make_bump_upstream
from tests.fixtures.faults import Run, Scenario, differ, mixed, sample, state, strace_missing, temp_leftovers
from tests.fixtures.project import write_recipe
from tests.fixtures.queue import QUEUE_DATA
from tests.fixtures.release import make_build
from tests.fixtures.sysroot import fake_tools
from tests.fixtures.upstream import GIT_ENV, git, with_git_env

pytestmark = pytest.mark.skipif(strace_missing() is not None, reason=str(strace_missing()))

State = dict[str, bytes | str]


@pytest.fixture(scope="module")
def bup(tmp_path_factory: pytest.TempPathFactory) -> BumpUpstream:
    return with_git_env(make_bump_upstream, tmp_path_factory.mktemp("bump"))


def _no_traceback(r: Run) -> None:
    assert "Traceback" not in r.stdout + r.stderr, r.stderr


def kill_loop(
    sc: Scenario,
    args: Sequence[str],
    *,
    watch: Callable[[], State],
    after_kill: Callable[[State, State, State], None],
    next_run: Callable[[State], None],
    min_points: int = 3,
) -> int:
    """Kill ``args`` at each sampled point; after each: ``after_kill(old, new, mid)`` on
    what it left, then ``next_run(new)`` (which runs the next command and checks its end
    state). Returns how many kills landed."""
    old = watch()
    done, points = sc.points(args)
    assert done.returncode == 0, done.stderr
    new = watch()
    assert new != old
    assert len(points) >= min_points, points
    landed = 0
    failures: list[str] = []
    for point in sample(points):
        sc.reset()
        r = sc.run(args, inject=f"{point.syscall}:signal=SIGKILL:when={point.nth}")
        where = f"killed at {point}"
        if not r.killed:  # the run made other calls this time; it must then have finished
            assert r.returncode == 0, f"{where}: not killed, exit {r.returncode}: {r.stderr}"
        landed += r.killed
        mid = watch()
        try:
            after_kill(old, new, mid)
            next_run(new)
        except AssertionError as e:
            lines = str(e).splitlines()
            failures.append(
                f"{where}:\n  " + "\n  ".join([lines[0], *[ln for ln in lines[1:] if "error:" in ln]])
            )
    assert not failures, f"{len(failures)} kill points of {len(points)} went wrong:\n" + "\n".join(failures)
    assert landed >= min(len(points), 2)
    return landed


# ----------------------------------------------------------------------- series import


def _series_ok(sc: Scenario, project: Path) -> None:
    r = sc.plain(["--project", str(project), "series"])
    _no_traceback(r)
    assert r.returncode == 0, f"`patchkit series` after the kill: exit {r.returncode}: {r.stderr}"


def test_series_import_killed_anywhere(tmp_path: Path) -> None:
    root = tmp_path / "s"
    project = root / "project"
    (project / "recipes").mkdir(parents=True)
    (project / "patches").mkdir()
    write_recipe(project, "fixture", url=str(tmp_path / "nowhere"), commit="a" * 40)
    mails = root / "mails"
    shutil.copytree(QUEUE_DATA, mails)
    # the series already holds an older version of the same queue (same file names)
    older = root / "older"
    shutil.copytree(QUEUE_DATA, older)
    for m in older.iterdir():
        m.write_bytes(
            m.read_bytes().replace(b"Signed-off-by", b"Reviewed-by", 1).replace(b"\n---\n", b"\nv1\n---\n", 1)
        )
    sc = Scenario(root, env={"PATCHKIT_CACHE": str(root / "cache")})
    assert sc.plain(["--project", str(project), "series", "import", str(older)]).returncode == 0
    sc.freeze()
    args = ["--project", str(project), "series", "import", str(mails), "--replace"]

    def after_kill(old: State, new: State, mid: State) -> None:
        assert mixed(old, new, mid) == []
        _series_ok(sc, project)

    def next_run(new: State) -> None:
        r = sc.plain(args)
        _no_traceback(r)
        assert r.returncode == 0, r.stderr
        assert differ(new, state(project)) == [], r.stderr

    kill_loop(sc, args, watch=lambda: state(project), after_kill=after_kill, next_run=next_run)


# ------------------------------------------------------------------ refresh --continue / bump


def _pins(project: Path) -> dict[str, str]:
    out = {}
    for p in sorted((project / "recipes").glob("*.toml")):
        line = next(ln for ln in p.read_text().splitlines() if ln.startswith("commit = "))
        out[p.stem] = line.split('"')[1]
    return out


def _project_ok(sc: Scenario, project: Path, pins: Sequence[dict[str, str]]) -> None:
    _series_ok(sc, project)
    r = sc.plain(["--project", str(project), "list"])
    _no_traceback(r)
    assert r.returncode == 0, f"`patchkit list` after the kill: {r.stderr}"
    assert _pins(project) in pins, "the pins moved apart"


def test_refresh_continue_killed_anywhere(tmp_path: Path, bup: BumpUpstream) -> None:
    root = tmp_path / "r"
    root.mkdir()
    project = bump_project(root, bup, pin=bup.c["b1"])
    workdir = root / "work"
    sc = Scenario(
        root, env={"PATCHKIT_CACHE": str(root / "cache"), **GIT_ENV, "GIT_CONFIG_GLOBAL": os.devnull}
    )
    r = sc.plain(
        [
            "--project",
            str(project),
            "bump",
            "fixture",
            "--upstream",
            str(bup.path),
            "--to",
            "next",
            "--workdir",
            str(workdir),
        ]
    )
    assert r.returncode == 5, r.stderr
    resolved = RPC_B5.replace(
        "size_t size) {\n",
        "size_t size) {\n    if (nbytes == 0) {\n        return 1; /* zero-byte views carry no data */\n    }\n",
        1,
    )
    (workdir / "tree" / "src" / "rpc.c").write_text(resolved)
    git(workdir / "tree", "add", "src/rpc.c")
    sc.freeze()
    old_pins, new_pins = _pins(project), {**_pins(project), "fixture": bup.c["b5"], "fixture-b": bup.c["b5"]}
    args = ["--project", str(project), "refresh", "fixture", "--continue", "--workdir", str(workdir)]

    def after_kill(old: State, new: State, mid: State) -> None:
        assert mixed(old, new, mid) == []
        _project_ok(sc, project, [old_pins, new_pins])

    def next_run(new: State) -> None:
        r = sc.plain(args)
        _no_traceback(r)
        end = state(project)
        if r.returncode != 0:  # the killed run had finished its job: the next one says so
            assert differ(new, end) == [], f"exit {r.returncode}, not refreshed: {r.stderr}"
            assert len(r.errors) == 1, r.stderr
        else:
            assert differ(new, end) == [], r.stderr
        assert not workdir.exists(), "the refresh's folder is left"
        assert _pins(project) == new_pins

    kill_loop(sc, args, watch=lambda: state(project), after_kill=after_kill, next_run=next_run)


def test_bump_killed_anywhere(tmp_path: Path, bup: BumpUpstream) -> None:
    root = tmp_path / "b"
    root.mkdir()
    project = bump_project(root, bup, pin=bup.c["b1"])
    summary = root / "pr.md"
    sc = Scenario(
        root, env={"PATCHKIT_CACHE": str(root / "cache"), **GIT_ENV, "GIT_CONFIG_GLOBAL": os.devnull}
    )
    sc.freeze()
    old_pins, new_pins = _pins(project), {**_pins(project), "fixture": bup.c["b4"], "fixture-b": bup.c["b4"]}
    args = ["--project", str(project), "bump", "fixture", "--upstream", str(bup.path), "--to", bup.c["b4"]]
    args += ["--summary", str(summary)]

    def watch() -> State:
        return {**state(project), **({"pr.md": summary.read_bytes()} if summary.exists() else {})}

    def after_kill(old: State, new: State, mid: State) -> None:
        assert mixed(old, new, mid) == []
        _project_ok(sc, project, [old_pins, new_pins])

    def next_run(new: State) -> None:
        r = sc.plain(args)
        _no_traceback(r)
        assert r.returncode == 0 or len(r.errors) == 1, r.stderr
        assert _pins(project) == new_pins, f"exit {r.returncode}: {r.stderr}"
        assert differ({k: v for k, v in new.items() if k != "pr.md"}, state(project)) == [], r.stderr

    kill_loop(sc, args, watch=watch, after_kill=after_kill, next_run=next_run)


# ----------------------------------------------------------------------------- release


def test_release_killed_anywhere(tmp_path: Path) -> None:
    root = tmp_path / "rel"
    build = make_build(root)
    dist = root / "dist"
    sc = Scenario(root, env={"PATCHKIT_CACHE": str(root / "cache")})
    sc.freeze()
    args = ["release", "--build-dir", str(build), "--out", str(dist)]

    def after_kill(old: State, new: State, mid: State) -> None:
        # a file in dist is whole (the bytes a finished run writes) or absent
        assert mixed(old, new, mid) == []

    def next_run(new: State) -> None:
        r = sc.plain(args)
        _no_traceback(r)
        assert r.returncode == 0, r.stderr
        assert differ(new, state(dist)) == [], r.stderr
        v = sc.plain(["verify", str(dist)])
        assert v.returncode == 0, v.stdout + v.stderr

    kill_loop(sc, args, watch=lambda: state(dist), after_kill=after_kill, next_run=next_run)


# ------------------------------------------------------------------------- root prepare


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="preparing a root needs root")
def test_root_prepare_killed_anywhere(tmp_path: Path) -> None:
    root = tmp_path / "root"
    tools = fake_tools(root / "tools")
    cache = root / "cache"
    cache.mkdir()
    sc = Scenario(root, env={"PATCHKIT_CACHE": str(cache), "PATH": f"{tools}:/usr/bin:/bin"})
    sc.freeze()
    args = ["root", "prepare", "debian11", "--json"]

    def after_kill(old: State, new: State, mid: State) -> None:
        r = sc.plain(["root", "list", "--json"])
        _no_traceback(r)
        assert r.returncode == 0, r.stderr
        listed = {x["name"]: x for x in json.loads(r.stdout)["roots"]}
        complete = (cache / "roots/debian11/tree/var/lib/dpkg/status").is_file()
        if listed["debian11"].get("prepared"):
            assert complete, "a root listed as prepared is not whole"

    def next_run(new: State) -> None:
        r = sc.plain(args)
        _no_traceback(r)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["glibc"] == "2.31"
        base = cache / "roots/debian11"
        names = {k.split("/")[2] for k in new if k.count("/") == 2 and k.startswith("roots/debian11/")}
        assert set(os.listdir(base)) - set(temp_leftovers({n: "" for n in os.listdir(base)})) == names

    kill_loop(
        sc,
        args,
        watch=lambda: {k: v for k, v in state(cache).items() if k.startswith("roots")},
        after_kill=after_kill,
        next_run=next_run,
    )
