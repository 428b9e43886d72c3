"""`patchkit check`: statuses, ranges, bisect, When ranges, JSON, exit codes, bad input,
on the drift fixture's real history."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from patchkit.core.errors import PatchError, SourceError
from patchkit.spec.series import load_series
from patchkit.upkeep.check import bisect, check_range, check_series
from patchkit.upkeep.scratch import Status
from tests.fixtures.drift import (
    GUARD_PATCH_BODY,
    README_PATCH_BODY,
    RPC,
    DriftUpstream,
    make_project,
    patch_header,
    standard_patches,
)
from tests.fixtures.project import run_cli
from tests.fixtures.upstream import GIT_ENV, git


def statuses(doc: dict) -> list[list[str]]:
    return [[r["status"] for r in ref["results"]] for ref in doc["refs"]]


# -- integration: the core API ------------------------------------------------------------------
def test_range_statuses_through_history(drift: DriftUpstream, tmp_path: Path) -> None:
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    series = load_series(proj / "patches")
    report = check_range(drift.path, series.patches, drift.c["d1"], drift.c["d8"])
    assert [r.commit.sha for r in report.refs] == drift.order[1:]
    got = [[p.status.value for p in r.results] for r in report.refs]
    assert got == [
        ["applies", "applies", "applies"],  # d2
        ["applies-with-offset", "applies-with-offset", "applies"],  # d3
        ["applies-with-offset", "applies-with-offset", "applies"],  # d4
        ["conflicts", "conflicts", "applies"],  # d5
        ["conflicts", "conflicts", "applies"],  # d6
        ["already-upstream", "applies-with-offset", "n/a"],  # d7
        ["already-upstream", "applies-with-offset", "n/a"],  # d8
    ]
    d5 = report.refs[3].results
    assert [(c.file, c.hunk, c.header) for c in d5[0].conflicts] == [("src/rpc.c", 1, "@@ -3,6 +3,9 @@")]
    # patch 2 needs patch 1: without it, it is checked (and fails) on its own, and says so;
    # its hunk needs a line only patch 1 adds: a cascade of it, not a conflict of its own
    assert d5[1].note == "checked without guard"
    assert d5[1].cascade_of == ("guard",) and d5[1].label == "cascade of guard"
    assert d5[0].cascade_of == ()  # the guard's own conflict
    assert d5[2].note == ""  # the cli patch shares no file with the guard
    assert d5[1].to_json()["cascade_of"] == ["guard"]
    # cumulative: at d7 patch 2 applies on top of the upstreamed guard
    assert report.refs[5].results[1].offsets[0].lines == 3
    # identical touched blobs share one verdict: d3 = d4, d5 = d6, d7 = d8 (README and
    # core.c are not touched by these patches)
    assert report.states == 4
    assert not report.ok


def test_bisect_names_the_breaking_commit(drift: DriftUpstream, tmp_path: Path) -> None:
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    series = load_series(proj / "patches")
    report = bisect(drift.path, series.patches, drift.c["d1"], "master")
    guard, _comment, cli = report.results
    assert guard.verdict == "broken"
    assert guard.first_bad is not None and guard.first_bad.sha == drift.c["d5"]
    assert guard.first_bad.subject == "rpc: reword the bounds comment"
    assert guard.first_bad.date.startswith("2026-02-05")
    assert guard.last_good is not None and guard.last_good.sha == drift.c["d4"]
    assert guard.files == ("src/rpc.c",)
    assert guard.result is not None and guard.result.status is Status.CONFLICTS
    assert cli.verdict == "applies-throughout"  # within its When range d2..d6
    assert report.range_size == 7
    assert not report.ok


def test_bisect_reports_merged_upstream(drift: DriftUpstream, tmp_path: Path) -> None:
    proj = make_project(
        tmp_path,
        drift,
        pin=drift.c["d4"],
        patches=[("0001-readme.patch", patch_header("docs"), README_PATCH_BODY)],
    )
    series = load_series(proj / "patches")
    report = bisect(drift.path, series.patches, drift.c["d4"], drift.c["d8"])
    (res,) = report.results
    assert res.verdict == "merged-upstream"
    assert res.first_bad is not None and res.first_bad.sha == drift.c["d8"]
    assert res.files == ("README.md",)
    assert report.ok  # merged upstream is not a failure


def _long_history(root: Path, n: int, break_at: int) -> tuple[Path, list[str]]:
    """n linear commits, each changing the file's last line; commit ``break_at`` (1-based)
    rewords the guard's context line for good."""
    repo = root / "long"
    git(root, "init", "-q", "-b", "master", str(repo))
    chunks: list[bytes] = []
    for i in range(1, n + 1):
        text = RPC if i < break_at else RPC.replace("outside [base, base + size)", "beyond")
        content = (text + f"/* build {i} */\n").encode()
        msg = f"commit {i}\n".encode()
        chunks.append(b"commit refs/heads/master\nmark :%d\n" % i)
        chunks.append(b"committer A <a@b.invalid> %d +0000\n" % (1700000000 + i * 60))
        chunks.append(b"data %d\n%s" % (len(msg), msg))
        if i > 1:
            chunks.append(b"from :%d\n" % (i - 1))
        chunks.append(b"M 100644 inline src/rpc.c\ndata %d\n%s\n" % (len(content), content))
    subprocess.run(
        ["git", "fast-import", "--quiet"],
        cwd=repo,
        input=b"".join(chunks),
        check=True,
        env={**os.environ, **GIT_ENV},
    )
    shas = git(repo, "rev-list", "--reverse", "master").split()
    return repo, shas


def test_bisect_takes_log2_probes(tmp_path: Path) -> None:
    repo, shas = _long_history(tmp_path, 300, 211)
    pdir = tmp_path / "patches"
    pdir.mkdir()
    (pdir / "0001-guard.patch").write_text(patch_header("guard") + GUARD_PATCH_BODY)
    from patchkit.core.fs import sha256_file

    (pdir / "series").write_text(f"0001-guard.patch sha256={sha256_file(pdir / '0001-guard.patch')}\n")
    series = load_series(pdir)
    report = bisect(repo, series.patches, shas[0], shas[-1])
    (res,) = report.results
    assert res.first_bad is not None and res.first_bad.sha == shas[210]
    assert res.first_bad.subject == "commit 211"
    assert report.range_size == 299
    assert report.probes <= math.ceil(math.log2(300)) + 2
    # every commit changed the file, so probes are real: still a handful, not 300
    assert report.states == report.probes


def test_check_series_bad_ref_is_a_source_error(drift: DriftUpstream, tmp_path: Path) -> None:
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    with pytest.raises(SourceError, match=r"unknown ref 'nope' in .*drift"):
        check_series(drift.path, load_series(proj / "patches").patches, ["nope"])


# -- integration: the CLI ----------------------------------------------------------------------
def test_cli_check_pin_applies_exit_0(drift: DriftUpstream, tmp_path: Path) -> None:
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    res = run_cli(proj, "check", "fixture", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["ok"] is True and doc["schema"] == 1 and doc["kind"] == "check"
    assert doc["patches"] == ["guard", "guard-comment", "cli"]
    assert doc["refs"][0]["ref"] == drift.c["d2"]
    assert doc["refs"][0]["commit"]["subject"] == "core: version 2"
    assert statuses(doc) == [["applies", "applies", "applies"]]
    assert "applies" in res.stderr  # with --json the table goes to stderr
    assert drift.c["d2"][:12] in res.stderr and "patch check against" not in res.stdout
    assert doc["refs"][0]["results"][1]["cascade_of"] == []


def test_cli_check_conflict_exit_11_and_json(drift: DriftUpstream, tmp_path: Path) -> None:
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    res = run_cli(proj, "check", "fixture", "--ref", drift.c["d5"], "--ref", "master", "--json")
    assert res.exit_code == 11
    doc = json.loads(res.stdout)
    assert doc["ok"] is False
    assert statuses(doc) == [
        ["conflicts", "conflicts", "applies"],
        ["already-upstream", "applies-with-offset", "n/a"],
    ]
    conflict = doc["refs"][0]["results"][0]["conflicts"][0]
    assert conflict == {
        "file": "src/rpc.c",
        "hunk": 1,
        "header": "@@ -3,6 +3,9 @@",
        "reason": "context does not match",
    }
    assert doc["refs"][1]["results"][1]["offsets"] == [{"file": "src/rpc.c", "hunk": 1, "lines": 3}]
    assert "guard does not apply to" in res.stderr and "src/rpc.c:1" in res.stderr
    assert "Traceback" not in res.output


def test_cli_table_on_stdout_steps_and_error_on_stderr(drift: DriftUpstream, tmp_path: Path) -> None:
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    res = run_cli(proj, "check", "fixture", "--ref", drift.c["d5"], "--ref", "master")
    assert res.exit_code == 11
    # the table is the result: on stdout, one row per patch on one line (`patchkit check | grep`),
    # a column per ref
    assert res.stdout.startswith(f"patch check against {drift.path}\n")
    (head,) = [ln for ln in res.stdout.splitlines() if ln.lstrip().startswith("#") and " patch " in ln]
    assert "patch" in head and drift.c["d5"][:12] in head and "master" in head
    (row,) = [ln for ln in res.stdout.splitlines() if ln.split()[:2] == ["1", "guard"]]
    assert "conflicts rpc.c:1" in row and "upstream" in row
    (row,) = [ln for ln in res.stdout.splitlines() if ln.split()[:2] == ["2", "guard-comment"]]
    assert "cascade of #1" in row and "offset +3" in row
    # below the table: the whole verdict of each patch that does not apply at the last ref
    # (here master, where all apply or are upstream); then what is upstream, proven
    assert "#1 guard: conflicts" not in res.stdout
    assert "#1 guard: proven (--drop-upstreamed drops it): already upstream (effect)" in res.stdout
    assert "\x1b[" not in res.stdout
    res = run_cli(proj, "check", "fixture", "--range", f"{drift.c['d1']}..master", "--bisect")
    assert res.exit_code == 11
    lines = res.stdout.splitlines()
    assert lines[0] == f"bisect {drift.c['d1'][:12]}..{drift.c['d8'][:12]}: 7 first-parent commits, 6 probed"
    assert lines[1].startswith(f"  guard          broken by {drift.c['d5'][:12]} ")
    assert "which touched src/rpc.c" in lines[2]
    assert "broken by" not in res.stderr and "first-parent" not in res.stderr
    assert [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")] == [
        f"error: guard stops applying at {drift.c['d5'][:12]}: conflicts (src/rpc.c:1)"
    ]


def test_cli_already_upstream_and_na_do_not_fail(drift: DriftUpstream, tmp_path: Path) -> None:
    proj = make_project(tmp_path, drift, pin=drift.c["d8"], patches=standard_patches(drift))
    res = run_cli(proj, "check", "fixture", "--json")
    assert res.exit_code == 0, res.output
    assert statuses(json.loads(res.stdout)) == [["already-upstream", "applies-with-offset", "n/a"]]


def test_cli_when_range_ends_are_inclusive(drift: DriftUpstream, tmp_path: Path) -> None:
    proj = make_project(
        tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift), recipe_patches='["cli"]'
    )
    refs = [drift.c[k] for k in ("d1", "d2", "d6", "d7")]
    res = run_cli(proj, "check", "fixture", *[a for r in refs for a in ("--ref", r)], "--json")
    assert res.exit_code == 0, res.output
    assert statuses(json.loads(res.stdout)) == [["n/a"], ["applies"], ["applies"], ["n/a"]]


def test_cli_range_and_bisect(drift: DriftUpstream, tmp_path: Path) -> None:
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    res = run_cli(proj, "check", "fixture", "--range", f"{drift.c['d1']}..master", "--json")
    assert res.exit_code == 11
    doc = json.loads(res.stdout)
    assert len(doc["refs"]) == 7 and doc["refs"][-1]["commit"]["sha"] == drift.c["d8"]
    # one row per patch: its verdict at the range's first and last commit, and since when
    (row,) = [ln for ln in res.stderr.splitlines() if ln.split()[:2] == ["1", "guard"]]
    assert "applies" in row and "upstream" in row and drift.c["d7"][:10] in row

    res = run_cli(proj, "check", "fixture", "--range", f"{drift.c['d1']}..master", "--bisect", "--json")
    assert res.exit_code == 11
    doc = json.loads(res.stdout)
    assert doc["kind"] == "bisect" and doc["range_size"] == 7
    guard = doc["results"][0]
    assert guard["verdict"] == "broken"
    assert guard["first_bad"]["sha"] == drift.c["d5"]
    assert guard["files"] == ["src/rpc.c"]
    assert drift.c["d5"][:12] in res.stderr


def test_cli_all_checks_non_default_patches(drift: DriftUpstream, tmp_path: Path) -> None:
    patches = standard_patches(drift)
    patches.append(("0004-readme.patch", patch_header("docs", default="no"), README_PATCH_BODY))
    proj = make_project(tmp_path, drift, pin=drift.c["d4"], patches=patches)
    res = run_cli(proj, "check", "fixture", "--json")
    assert json.loads(res.stdout)["patches"] == ["guard", "guard-comment", "cli"]
    res = run_cli(proj, "check", "--all", "--json", "--repo", str(drift.path), "--ref", "master")
    doc = json.loads(res.stdout)
    assert doc["patches"][-1] == "readme"
    assert statuses(doc)[0][-1] == "already-upstream"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--ref", "nope"], 4, "unknown ref 'nope' in "),
        (["--range", "nope..master"], 4, "unknown ref 'nope' in "),
        (["--range", "master"], 2, "must be OLD..NEW"),
        (["--range", "master..HEAD~2"], 2, "is not an ancestor of"),
        (["--range", "master..master"], 2, "is empty"),
        (["--bisect"], 2, "--bisect needs --range"),
        (["--ref", "master", "--range", "HEAD~1..master"], 2, "not both"),
        (["--repo", "/nonexistent/repo"], 2, "does not exist"),
    ],
)
def test_cli_bad_refs_and_ranges(
    drift: DriftUpstream, tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    res = run_cli(proj, "check", "fixture", *args)
    assert res.exit_code == code, res.output
    assert message in res.stderr
    assert "Traceback" not in res.output
    assert len([ln for ln in res.stderr.splitlines() if ln.startswith("error:")]) == 1


def test_cli_unreachable_remote_url_says_what_to_do(drift: DriftUpstream, tmp_path: Path) -> None:
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    rpath = proj / "recipes" / "fixture.toml"
    rpath.write_text(rpath.read_text().replace(str(drift.path), "https://127.0.0.1:9/x.git"))
    res = run_cli(proj, "check", "fixture")
    assert res.exit_code == 4, res.output
    assert "cloning https://127.0.0.1:9/x.git failed" in res.stderr
    assert "pass --upstream PATH" in res.stderr
    from patchkit.core.paths import cache_dir

    assert not list((cache_dir() / "repos").glob("*"))  # nothing half-cloned left
    res = run_cli(proj, "check", "fixture", "--repo", str(drift.path), "--json")
    assert res.exit_code == 0, res.output


def test_check_works_on_a_blobless_partial_clone(drift: DriftUpstream, tmp_path: Path) -> None:
    clone = tmp_path / "partial"
    git(
        tmp_path, "clone", "-q", "--bare", "--filter=blob:none", f"file://{drift.path.as_posix()}", str(clone)
    )
    missing = git(clone, "rev-list", "--objects", "--all", "--missing=print")
    assert any(ln.startswith("?") for ln in missing.splitlines())  # really partial
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    res = run_cli(
        proj, "check", "fixture", "--repo", str(clone), "--range", f"{drift.c['d1']}..master", "--json"
    )
    assert res.exit_code == 11
    direct = check_range(drift.path, load_series(proj / "patches").patches, drift.c["d1"], drift.c["d8"])
    assert statuses(json.loads(res.stdout)) == [[p.status.value for p in r.results] for r in direct.refs]
    # the mirror path works the same through --upstream
    res = run_cli(proj, "check", "fixture", "--upstream", str(clone), "--ref", "master")
    assert res.exit_code == 0, res.output


def test_cli_edited_patch_fails_its_hash(drift: DriftUpstream, tmp_path: Path) -> None:
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=standard_patches(drift))
    p = proj / "patches" / "0001-guard.patch"
    p.write_text(p.read_text() + "\n")
    res = run_cli(proj, "check", "fixture")
    assert res.exit_code == 5 and "sha256 is" in res.stderr


def test_cli_check_refuses_a_binary_bomb_before_any_git_apply(drift: DriftUpstream, tmp_path: Path) -> None:
    import base64
    import zlib

    data = zlib.compress(b"\0" * 64)
    lines = "".join(
        chr(
            ord("A") + len(data[i : i + 52]) - 1
            if len(data[i : i + 52]) <= 26
            else ord("a") + len(data[i : i + 52]) - 27
        )
        + base64.b85encode(data[i : i + 52], pad=True).decode()
        + "\n"
        for i in range(0, len(data), 52)
    )
    bomb = (
        "diff --git a/t.bin b/t.bin\nnew file mode 100644\nindex 0000000..2222222\nGIT binary patch\n"
        f"literal 1073741824\n{lines}\nliteral 0\nHcmV?d00001\n\n"
    )
    patches = [*standard_patches(drift), ("0004-bomb.patch", patch_header("data: a table"), bomb)]
    proj = make_project(tmp_path, drift, pin=drift.c["d2"], patches=patches)
    # refused where the series is read, before check (or build) runs any git apply
    res = run_cli(proj, "check", "fixture", "--all")
    assert res.exit_code == 5, res.output
    assert (
        "0004-bomb.patch: refused: t.bin: a binary literal that inflates to 1,073,741,824 bytes" in res.stderr
    )
    with pytest.raises(PatchError, match="inflates to 1,073,741,824 bytes"):
        load_series(proj / "patches")
