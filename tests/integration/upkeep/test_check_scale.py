"""`check` at queue scale: 40 patches in 120 columns, cascades, and the Python matcher
giving git's verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import patchkit.upkeep.check_engine as check_mod
from patchkit.core.fs import sha256_file
from patchkit.spec.series import load_series
from patchkit.upkeep.check import check_range
from patchkit.upkeep.scratch import Status
from tests.fixtures.drift import DriftUpstream, make_project, patch_header, standard_patches
from tests.fixtures.project import run_cli
from tests.fixtures.upstream import commit_files, git

N = 40
_BLOCK = 6  # lines per patch's region


def _source(changed: set[int]) -> str:
    """N regions of lines; region i's third line reworded in the commits that change it."""
    out = []
    for i in range(N):
        out += [f"/* region {i} */", f"int v{i} = {i};", f"int w{i} = {i};"]
        out += [f"int moved{i} = 0; /* upstream reworded {i} */" if i in changed else f"int u{i} = {i};"]
        out += [f"int x{i} = {i};", ""]
    return "\n".join(out) + "\n"


def _patch(i: int, *, after: int | None = None) -> str:
    """Patch i adds a line after region i's `w` line; `after`: it also needs the line patch
    `after` adds (a patch on top of another)."""
    start = i * _BLOCK + 2
    if after is None:
        return (
            f"diff --git a/src/big.c b/src/big.c\n--- a/src/big.c\n+++ b/src/big.c\n"
            f"@@ -{start},3 +{start},4 @@ int v{i}\n int v{i} = {i};\n int w{i} = {i};\n"
            f"+int added{i} = 1;\n int u{i} = {i};\n"
        )
    return (
        f"diff --git a/src/big.c b/src/big.c\n--- a/src/big.c\n+++ b/src/big.c\n"
        f"@@ -{start + 1},3 +{start + 1},4 @@ int v{i}\n int w{i} = {i};\n int added{after} = 1;\n"
        f"+int again{i} = 2;\n int u{i} = {i};\n"
    )


@pytest.fixture
def queue(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """An upstream with one big file and three commits after the base; a 40-patch queue with
    long names, #1 changing region 39 ... #40 region 0... except #40, which sits on the line #37
    adds in region 3; the second commit rewords regions 3 (#37 conflicts, #40 is its cascade)
    and 7 (#33's own conflict)."""
    repo = tmp_path / "up"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    shas = [commit_files(repo, {"src/big.c": _source(set())}, "base")]
    shas.append(commit_files(repo, {"README": "one\n"}, "docs: unrelated"))
    shas.append(commit_files(repo, {"src/big.c": _source({3, 7})}, "big: reword regions 3 and 7"))
    shas.append(commit_files(repo, {"README": "two\n"}, "docs: unrelated again"))
    proj = tmp_path / "project"
    (proj / "recipes").mkdir(parents=True)
    (proj / "patches").mkdir()
    names = []
    lines = []
    for i in range(N):
        name = f"{i + 1:04d}-a-rather-long-patch-name-as-format-patch-writes-them-{i}"
        # patch i changes region 39 - i; the last one sits on #37's line in region 3
        body = _patch(39 - i) if i < N - 1 else _patch(39, after=3)
        f = proj / "patches" / f"{name}.patch"
        f.write_text(patch_header(f"patch {i}") + body)
        lines.append(f"{f.name} sha256={sha256_file(f)}\n")
        names.append(name)
    (proj / "patches" / "series").write_text("".join(lines))
    (proj / "recipes" / "fixture.toml").write_text(
        f'name = "fixture"\n[upstream]\nurl = "{repo}"\ncommit = "{shas[0]}"\n[build]\ntargets = ["x"]\n'
    )
    return proj, repo, shas


def test_forty_patches_fit_120_columns_one_row_each(queue: tuple[Path, Path, list[str]]) -> None:
    proj, _repo, shas = queue
    res = run_cli(proj, "check", "fixture", "--range", f"{shas[0]}..master")
    assert res.exit_code == 11, res.output
    lines = res.stdout.splitlines()
    assert max(len(ln) for ln in lines[2:]) <= 120, "\n".join(ln for ln in lines if len(ln) > 120)
    rows = [ln for ln in lines if ln[:4].strip().isdigit()]
    assert [int(ln.split()[0]) for ln in rows] == list(range(1, N + 1))  # one row per patch, in order
    # patches are applied in series order: the first touches region 39, ... patch 37 region 2
    bad = {int(ln.split()[0]): ln for ln in rows if "conflicts" in ln or "cascade" in ln}
    assert set(bad) == {33, 37, 40}  # regions 7 and 3 own conflicts; 40 on top of 37 (region 3)
    assert "conflicts big.c:1" in bad[33] and "conflicts big.c:1" in bad[37]
    assert "cascade of #37" in bad[40]
    assert shas[2][:10] in bad[33] and "big: re" in bad[33]  # since that commit
    ok = next(ln for ln in rows if ln.split()[0] == "1")
    assert ok.count("applies") == 2 and "…" in ok  # long names cut, the row still one line
    # below the table, the whole verdicts, each on one line, at most 120 columns
    (c40,) = [ln for ln in lines if ln.startswith("#40 ")]
    assert "cascade of #37 (needs what it adds), fails at src/big.c:1" in c40
    (c33,) = [ln for ln in lines if ln.startswith("#33 ")]
    assert "conflicts src/big.c:1" in c33 and "cascade" not in c33
    res = run_cli(proj, "check", "fixture", "--range", f"{shas[0]}..master", "--json")
    doc = json.loads(res.stdout)
    last = doc["refs"][-1]["results"]
    assert last[39]["status"] == "conflicts" and last[39]["cascade_of"] == [doc["patches"][36]]
    assert last[32]["cascade_of"] == [] and last[36]["cascade_of"] == []
    # three commits, two states of the patched file: the second state re-checks only the
    # patches whose input changed... and every patch's input changed (one file): 40 runs
    # for the first state, at most 40 for the second, the unrelated commits reuse them
    assert doc["states"] == 2
    assert doc["runs"]["python"] <= 2 * N and doc["runs"]["git"] == 0


def test_own_conflict_next_to_a_failed_patch_is_not_a_cascade(queue: tuple[Path, Path, list[str]]) -> None:
    """Patch 33 (region 7) shares the file with failed patch 37 (region 3), but its hunk needs
    none of 37's lines: its own conflict, said so."""
    proj, repo, shas = queue
    report = check_range(repo, load_series(proj / "patches").patches, shas[0], shas[-1])
    last = report.refs[-1].results
    assert last[32].status is Status.CONFLICTS and last[32].cascade_of == ()
    assert last[39].cascade_of == (last[36].patch,)


def test_python_matcher_gives_git_apply_verdicts(
    drift: DriftUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same range checked with upkeep.textapply and with `git apply` (every patch sent
    to the scratch folder): the same statuses, offsets, conflicts, notes and cascades."""
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    patches = load_series(proj / "patches").patches
    fast = check_range(drift.path, patches, drift.c["d1"], drift.c["d8"])
    assert fast.runs["python"] > 0 and fast.runs["git"] == 0
    monkeypatch.setattr(check_mod, "prepare", lambda data, parsed: None)
    slow = check_range(drift.path, patches, drift.c["d1"], drift.c["d8"])
    assert slow.runs["git"] > 0 and slow.runs["python"] == 0
    assert [[v.to_json() for v in r.results] for r in fast.refs] == [
        [v.to_json() for v in r.results] for r in slow.refs
    ]


def test_upstream_subjects_reach_the_terminal_escaped(tmp_path: Path) -> None:
    """A hostile commit subject (ESC, BEL, a bidi override) is printed as visible escapes in
    the table's since column and in --bisect's lines."""
    repo = tmp_path / "up"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    base = commit_files(repo, {"a.c": "one\ntwo\nthree\n"}, "base")
    commit_files(repo, {"b.c": "b\n"}, "unrelated")
    commit_files(repo, {"a.c": "one\nTWO\nthree\n"}, "\x1b[2J\x07 \u202etxt.exe")
    proj = tmp_path / "project"
    (proj / "recipes").mkdir(parents=True)
    (proj / "patches").mkdir()
    f = proj / "patches" / "0001-p.patch"
    f.write_text(
        patch_header("p")
        + "diff --git a/a.c b/a.c\n--- a/a.c\n+++ b/a.c\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"
    )
    (proj / "patches" / "series").write_text(f"{f.name} sha256={sha256_file(f)}\n")
    (proj / "recipes" / "r.toml").write_text(
        f'name = "r"\n[upstream]\nurl = "{repo}"\ncommit = "{base}"\n[build]\ntargets = ["x"]\n'
    )
    for extra in ([], ["--bisect"]):
        res = run_cli(proj, "check", "r", "--range", f"{base}..master", *extra)
        assert res.exit_code == 11, res.output
        assert "\x1b" not in res.output and "\x07" not in res.output and "\u202e" not in res.output
        assert ("\\x1b[2J\\x07 \\u202etxt.exe" if extra else "\\x1b[2J") in res.stdout
