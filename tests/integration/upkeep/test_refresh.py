"""`patchkit refresh`: 3-way rebase of the series, conflicts, --continue/--abort, pin moves."""

from __future__ import annotations

import json
import os
from pathlib import Path

from patchkit.spec.series import load_series
from tests.fixtures.drift import (
    RPC_D5,
    DriftUpstream,
    make_project,
    standard_patches,
)
from tests.fixtures.project import run_cli
from tests.fixtures.upstream import git


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def check_json(proj: Path, ref: str) -> tuple[int, list[str]]:
    res = run_cli(proj, "check", "fixture", "--ref", ref, "--json")
    return res.exit_code, [r["status"] for r in json.loads(res.stdout)["refs"][0]["results"]]


# -- integration ----------------------------------------------------------------------------
def test_refresh_clean_rewrites_patch_and_hash(drift: DriftUpstream, tmp_path: Path) -> None:
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    assert check_json(proj, drift.c["d3"]) == (0, ["applies-with-offset", "applies-with-offset", "applies"])
    recipe_before = (proj / "recipes" / "fixture.toml").read_bytes()
    old_guard = (proj / "patches" / "0001-guard.patch").read_text()
    res = run_cli(proj, "refresh", "fixture", "--onto", drift.c["d3"])
    assert res.exit_code == 0, res.output
    assert "updated   0001-guard.patch" in res.stderr
    new_guard = (proj / "patches" / "0001-guard.patch").read_text()
    # the header is kept byte for byte, the diff moved by the 3 lines of d3
    head = old_guard[: old_guard.index("diff --git")]
    assert new_guard.startswith(head + "diff --git a/src/rpc.c b/src/rpc.c\nindex ")
    assert "@@ -6,6 +6,9 @@" in new_guard
    series = load_series(proj / "patches")  # hashes match again
    assert [p.read_verified() is not None for p in series.patches] == [True, True, True]
    assert check_json(proj, drift.c["d3"]) == (0, ["applies", "applies", "applies"])
    # no --move-pin: the recipe is untouched; the scratch folder is gone
    assert (proj / "recipes" / "fixture.toml").read_bytes() == recipe_before
    assert not any((Path(os.environ["PATCHKIT_CACHE"]) / "refresh").iterdir())


def test_refresh_move_pin(drift: DriftUpstream, tmp_path: Path) -> None:
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    rpath = proj / "recipes" / "fixture.toml"
    before = rpath.read_text()
    res = run_cli(proj, "refresh", "fixture", "--onto", drift.c["d4"], "--move-pin")
    assert res.exit_code == 0, res.output
    assert rpath.read_text() == before.replace(drift.c["d2"], drift.c["d4"])
    assert "recipe pin moved" in res.stderr
    assert check_json(proj, drift.c["d4"]) == (0, ["applies", "applies", "applies"])


def test_refresh_conflict_then_continue(drift: DriftUpstream, tmp_path: Path) -> None:
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    before = snapshot(proj / "patches")
    workdir = tmp_path / "work"
    res = run_cli(proj, "refresh", "fixture", "--onto", drift.c["d5"], "--workdir", str(workdir))
    assert res.exit_code == 5
    assert "refresh stopped at 0001-guard.patch: conflicts in src/rpc.c" in res.stderr
    assert f"`patchkit refresh fixture --continue --workdir {workdir}`" in res.stderr
    assert snapshot(proj / "patches") == before  # nothing written yet
    tree = workdir / "tree"
    conflicted = (tree / "src" / "rpc.c").read_text()
    assert "<<<<<<<" in conflicted and ">>>>>>>" in conflicted

    # --continue refuses while the file is unmerged
    res = run_cli(proj, "refresh", "fixture", "--continue", "--workdir", str(workdir))
    assert res.exit_code == 5 and "still unmerged: src/rpc.c" in res.stderr

    # the user resolves: d5's wording plus the guard, and stages it
    resolved = RPC_D5.replace(
        "size_t size) {\n",
        "size_t size) {\n    if (nbytes == 0) {\n"
        "        return 1; /* zero-byte views carry no data */\n    }\n",
        1,
    )
    (tree / "src" / "rpc.c").write_text(resolved)
    git(tree, "add", "src/rpc.c")
    res = run_cli(proj, "refresh", "fixture", "--continue", "--workdir", str(workdir))
    # patch 2 (on top of the guard) is cherry-picked with a real 3-way merge: clean now
    assert res.exit_code == 0, res.output
    assert not workdir.exists()
    assert check_json(proj, drift.c["d5"]) == (0, ["applies", "applies", "applies"])
    guard = (proj / "patches" / "0001-guard.patch").read_text()
    assert "+    if (nbytes == 0) {" in guard and "not inside the buffer" in guard
    comment = (proj / "patches" / "0002-guard-comment.patch").read_text()
    assert "+        return 1; /* zero-byte views: nothing to check */" in comment


def test_refresh_abort_leaves_patches_alone(drift: DriftUpstream, tmp_path: Path) -> None:
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    before = snapshot(proj / "patches")
    res = run_cli(proj, "refresh", "fixture", "--onto", drift.c["d6"])
    assert res.exit_code == 5
    res = run_cli(proj, "refresh", "fixture", "--onto", drift.c["d6"])
    assert res.exit_code == 5 and "already in progress" in res.stderr
    res = run_cli(proj, "refresh", "fixture", "--abort")
    assert res.exit_code == 0, res.output
    assert snapshot(proj / "patches") == before
    res = run_cli(proj, "refresh", "fixture", "--continue")
    assert res.exit_code == 5 and "no refresh in progress" in res.stderr


def test_refresh_onto_upstreamed_patch_writes_nothing(drift: DriftUpstream, tmp_path: Path) -> None:
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift)[:1])
    before = snapshot(proj / "patches")
    res = run_cli(proj, "refresh", "fixture", "--onto", drift.c["d7"])
    assert res.exit_code == 5
    # found before merging (its change is there), merged to nothing: a stop, no restart
    assert f"0001-guard.patch: already upstream (effect): {drift.c['d7'][:12]}" in res.stderr
    assert "refresh stopped at 0001-guard.patch: merged onto" in res.stderr
    assert snapshot(proj / "patches") == before
    res = run_cli(proj, "refresh", "fixture", "--abort")
    assert res.exit_code == 0, res.output
    # --drop-upstreamed: dropped on the way, out of the series
    res = run_cli(proj, "refresh", "fixture", "--onto", drift.c["d7"], "--drop-upstreamed")
    assert res.exit_code == 0, res.output
    assert "dropped   0001-guard.patch: already upstream (effect)" in res.stderr
    assert not (proj / "patches" / "0001-guard.patch").exists()
    assert "0001-guard.patch" not in (proj / "patches" / "series").read_text()


def test_refresh_skips_patches_outside_their_when_range(drift: DriftUpstream, tmp_path: Path) -> None:
    patches = standard_patches(drift)
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=[patches[2]])
    before = snapshot(proj / "patches")
    res = run_cli(proj, "refresh", "fixture", "--onto", drift.c["d8"])
    assert res.exit_code == 0, res.output
    assert "skipped   0003-cli.patch" in res.stderr
    assert snapshot(proj / "patches") == before


def test_refresh_bad_input(drift: DriftUpstream, tmp_path: Path) -> None:
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    res = run_cli(proj, "refresh", "fixture")
    assert res.exit_code == 2 and "exactly one of" in res.stderr
    res = run_cli(proj, "refresh", "fixture", "--onto", "nope")
    assert res.exit_code == 4 and "unknown ref 'nope'" in res.stderr


def test_refresh_from_a_partial_clone(drift: DriftUpstream, tmp_path: Path) -> None:
    clone = tmp_path / "partial"
    git(
        tmp_path, "clone", "-q", "--bare", "--filter=blob:none", f"file://{drift.path.as_posix()}", str(clone)
    )
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    res = run_cli(proj, "refresh", "fixture", "--onto", drift.c["d4"], "--repo", str(clone))
    assert res.exit_code == 0, res.output
    assert check_json(proj, drift.c["d4"]) == (0, ["applies", "applies", "applies"])


def test_refresh_without_a_base_falls_back_to_git_apply_3way(drift: DriftUpstream, tmp_path: Path) -> None:
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    (proj / "recipes" / "fixture.toml").unlink()  # no recipe: no pin to replay the series on
    res = run_cli(proj, "refresh", "--all", "--repo", str(drift.path), "--onto", drift.c["d3"])
    assert res.exit_code == 0, res.output
    assert "@@ -6,6 +6,9 @@" in (proj / "patches" / "0001-guard.patch").read_text()
    assert all(p.read_verified() for p in load_series(proj / "patches").patches)


def test_refresh_writes_gits_own_diffstat_for_a_binary_file(tmp_path: Path) -> None:
    """A mail that makes a binary file executable (no content change): its diffstat says
    `Bin`, as git format-patch wrote it; a diffstat computed from the diff alone says `0`.
    Refreshed onto a later commit, the patch keeps git's block (so it is unchanged)."""
    up = tmp_path / "up"
    up.mkdir()
    git(up, "init", "-q", "-b", "main")
    (up / "blob.bin").write_bytes(bytes(range(256)) * 4)
    (up / "a.c").write_text("int a;\n")
    git(up, "add", ".")
    git(up, "commit", "-q", "-m", "one")
    one = git(up, "rev-parse", "HEAD")
    git(up, "checkout", "-q", "-b", "queue")
    (up / "blob.bin").chmod(0o755)
    git(up, "add", ".")
    git(up, "commit", "-q", "-m", "make the blob executable")
    git(up, "format-patch", "-q", "-1", "HEAD", "-o", str(tmp_path / "mail"))
    (mail,) = (tmp_path / "mail").iterdir()
    assert " blob.bin | Bin\n" in mail.read_text()
    git(up, "checkout", "-q", "main")
    (up / "a.c").write_text("int a;\nint b;\n")
    git(up, "commit", "-q", "-am", "two")
    two = git(up, "rev-parse", "HEAD")
    proj = tmp_path / "project"
    (proj / "recipes").mkdir(parents=True)
    (proj / "patches").mkdir()
    (proj / "recipes" / "fixture.toml").write_text(
        f'name = "fixture"\n\n[upstream]\nurl = "{up}"\ncommit = "{one}"\n\n[build]\ntargets = ["x"]\n'
    )
    assert run_cli(proj, "series", "import", str(mail), "--base", one).exit_code == 0
    before = (proj / "patches" / mail.name).read_bytes()
    res = run_cli(proj, "refresh", "fixture", "--onto", two)
    assert res.exit_code == 0, res.output
    assert f"unchanged {mail.name}" in res.stderr
    # git apply -R --check only warns about a mode: the change is not taken as upstream's
    assert "(effect)" not in res.stderr and "proposed for dropping" not in res.stderr
    after = (proj / "patches" / mail.name).read_bytes()
    assert after == before and b" blob.bin | Bin\n" in after
