"""A refresh against hostile input: a staged resolution that would not pass the series
loader, a recorded resolution that is still a conflict, a tampered refresh-state.json (its
recorded-resolution folder, its `onto`), a planted link in the cache's `rerere` folder,
two refreshes on one work folder, `series export --to-branch` names and the branch
checked out in the user's clone."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from patchkit.core.lock import cache_lock
from patchkit.upkeep.conflict import Block, parse_conflicts
from patchkit.upkeep.rerere import block_key
from tests.fixtures.drift import RPC_D5, DriftUpstream, make_project, standard_patches
from tests.fixtures.project import run_cli
from tests.fixtures.upstream import git

STATE = "refresh-state.json"
GUARD = "    if (nbytes == 0) {\n        return 1; /* zero-byte views carry no data */\n    }\n"


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _stopped(drift: DriftUpstream, tmp_path: Path, *args: str) -> tuple[Path, Path]:
    """A project whose refresh onto d5 stopped at the guard's conflict (in ``work``)."""
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    workdir = tmp_path / "work"
    res = run_cli(proj, "refresh", "fixture", "--onto", drift.c["d5"], "--workdir", str(workdir), *args)
    assert res.exit_code == 5, res.output
    assert "refresh stopped at 0001-guard.patch: conflicts in src/rpc.c" in res.stderr
    return proj, workdir


def _resolve(workdir: Path) -> None:
    tree = workdir / "tree"
    (tree / "src" / "rpc.c").write_text(RPC_D5.replace("size_t size) {\n", "size_t size) {\n" + GUARD, 1))
    git(tree, "add", "src/rpc.c")


def _rerere() -> Path:
    return Path(os.environ["PATCHKIT_CACHE"]) / "rerere"


def test_continue_refuses_a_staged_symlink_leading_out_of_the_tree(
    drift: DriftUpstream, tmp_path: Path
) -> None:
    proj, workdir = _stopped(drift, tmp_path)
    before = snapshot(proj / "patches")
    _resolve(workdir)
    tree = workdir / "tree"
    (tree / "src" / "passwd").symlink_to("/etc/passwd")
    git(tree, "add", "src/passwd")
    res = run_cli(proj, "refresh", "fixture", "--continue", "--workdir", str(workdir))
    assert res.exit_code == 5, res.output
    assert "0001-guard.patch: the staged resolution would be refused as a patch" in res.stderr
    assert "/etc/passwd" in res.stderr and "Traceback" not in res.output
    assert snapshot(proj / "patches") == before  # nothing written; the stop stays
    assert json.loads((workdir / STATE).read_text())["next"] == 0
    # unstaged, it goes on and the series loads
    git(tree, "rm", "-q", "--cached", "src/passwd")
    (tree / "src" / "passwd").unlink()
    res = run_cli(proj, "refresh", "fixture", "--continue", "--workdir", str(workdir))
    assert res.exit_code == 0, res.output
    assert run_cli(proj, "series").exit_code == 0


def test_a_recorded_resolution_still_holding_markers_is_not_committed(
    drift: DriftUpstream, tmp_path: Path
) -> None:
    proj, workdir = _stopped(drift, tmp_path)
    conflicted = (workdir / "tree" / "src" / "rpc.c").read_text()
    blocks = [b for b in parse_conflicts(conflicted) if isinstance(b, Block)]
    assert blocks
    assert run_cli(proj, "refresh", "fixture", "--abort", "--workdir", str(workdir)).exit_code == 0
    store = _rerere()
    store.mkdir(parents=True, exist_ok=True)
    for b in blocks:  # a record whose resolution is the conflict itself
        key = block_key(b, "src/rpc.c", "0001-guard.patch")
        sides = sorted("\n".join(ln.rstrip() for ln in side) for side in (b.ours, b.theirs))
        lines = conflicted.splitlines(keepends=True)[b.start - 1 : b.end]
        record = {"key": key, "path": "src/rpc.c", "patch": "0001-guard.patch", "sides": sides}
        (store / f"{key}.json").write_text(json.dumps({"version": 2, **record, "resolution": lines}))
    before = snapshot(proj / "patches")
    res = run_cli(proj, "refresh", "fixture", "--onto", drift.c["d5"], "--workdir", str(workdir))
    assert res.exit_code == 5, res.output
    assert "refresh stopped at 0001-guard.patch: conflicts in src/rpc.c" in res.stderr
    assert snapshot(proj / "patches") == before
    assert "<<<<<<<" not in "".join(snapshot(proj / "patches")[f].decode() for f in before)


def test_a_tampered_state_cannot_send_records_elsewhere(drift: DriftUpstream, tmp_path: Path) -> None:
    proj, workdir = _stopped(drift, tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "notes.json").write_text("{}")
    state = json.loads((workdir / STATE).read_text())
    assert state["rerere"]  # this refresh keeps records
    state["rerere"] = str(victim)
    (workdir / STATE).write_text(json.dumps(state))
    _resolve(workdir)
    res = run_cli(proj, "refresh", "fixture", "--continue", "--workdir", str(workdir))
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in victim.iterdir()) == ["notes.json"]
    assert any(p.suffix == ".json" for p in _rerere().iterdir())  # recorded where the cache keeps them


@pytest.mark.parametrize(
    "onto",
    [
        '{sha}"\n[build.defines]\nCMAKE_C_COMPILER_LAUNCHER = "/bin/sh;-c;touch /tmp/x"\n#',
        "{sha}x",
        "HEAD",
    ],
)
def test_a_tampered_onto_is_refused_and_never_reaches_the_recipe(
    drift: DriftUpstream, tmp_path: Path, onto: str
) -> None:
    proj, workdir = _stopped(drift, tmp_path, "--move-pin")
    recipe = (proj / "recipes" / "fixture.toml").read_bytes()
    state = json.loads((workdir / STATE).read_text())
    state["onto"] = onto.format(sha=state["onto"])
    (workdir / STATE).write_text(json.dumps(state))
    _resolve(workdir)
    res = run_cli(proj, "refresh", "fixture", "--continue", "--workdir", str(workdir))
    assert res.exit_code == 5, res.output
    assert f"{workdir / STATE} is damaged (onto:" in res.stderr
    assert sum(ln.startswith("error:") for ln in res.stderr.splitlines()) == 1
    assert "Traceback" not in res.output
    assert (proj / "recipes" / "fixture.toml").read_bytes() == recipe
    assert run_cli(proj, "refresh", "fixture", "--abort", "--workdir", str(workdir)).exit_code == 0


def test_a_planted_rerere_link_does_not_redirect_records(drift: DriftUpstream, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    store = _rerere()
    store.parent.mkdir(parents=True, exist_ok=True)
    if store.exists():
        for p in store.iterdir():
            p.unlink()
        store.rmdir()
    store.symlink_to(victim, target_is_directory=True)
    try:
        proj, workdir = _stopped(drift, tmp_path)
        _resolve(workdir)
        res = run_cli(proj, "refresh", "fixture", "--continue", "--workdir", str(workdir))
        assert res.exit_code == 0, res.output
        assert list(victim.iterdir()) == []
    finally:
        store.unlink()


def test_a_second_refresh_on_a_busy_work_folder_gets_one_line(drift: DriftUpstream, tmp_path: Path) -> None:
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    workdir = tmp_path / "work"
    with cache_lock(workdir, "another refresh"):  # what a refresh running there holds
        res = run_cli(proj, "refresh", "fixture", "--onto", drift.c["d3"], "--workdir", str(workdir))
        assert res.exit_code == 9, res.output
        assert f"another patchkit refresh is working in {workdir}" in res.stderr
        assert "Traceback" not in res.output and not (workdir / "tree").exists()
    res = run_cli(proj, "refresh", "fixture", "--onto", drift.c["d3"], "--workdir", str(workdir))
    assert res.exit_code == 0, res.output
    assert not workdir.exists()
