"""`patchkit series import` / `export` with real git: a synthetic queue (non-ASCII and
quoted authors, an empty e-mail, created, deleted and renamed files, a mode change, binary
files, no newline at the end) goes in from files and from a fork's range, comes back out
as mails `git am` takes and as a branch, and patchkit's `check` and `build` take it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from patchkit.core.fs import sha256_file
from patchkit.spec.patchdoc import split_mbox
from patchkit.spec.series import load_series
from tests.fixtures.project import assert_error, build, invoke
from tests.fixtures.queue import QUEUE_DATA, Queue, git_am, make_queue, tree_of, write_mails
from tests.fixtures.upstream import GIT_ENV, FixtureUpstream, commit_files, git

FIELDS = ("name", "subject", "why", "upstream_status", "when", "default", "experimental", "files")


@pytest.fixture
def queue(tmp_path: Path, upstream: FixtureUpstream) -> Queue:
    return make_queue(tmp_path, upstream)


def _log(repo: Path, rev_range: str) -> list[str]:
    """Author, author date and message of each commit, oldest first."""
    out = git(repo, "log", "--reverse", "--format=%an|%ae|%aI|%B%x00", rev_range)
    return [c.strip() for c in out.split("\0") if c.strip()]


def _same_series(a: Path, b: Path) -> None:
    sa, sb = load_series(a), load_series(b)
    assert len(sa.patches) == len(sb.patches)
    for p, q in zip(sa.patches, sb.patches):
        for attr in FIELDS:
            assert getattr(p, attr) == getattr(q, attr), (p.filename, attr)
        assert (p.author, p.date) == (q.author, q.date)
        pd, qd = p.read_verified(), q.read_verified()
        assert pd[pd.index(b"\ndiff --git ") :] == qd[qd.index(b"\ndiff --git ") :]  # the same diff


def test_the_unit_tests_mails_are_what_git_format_patch_writes(queue: Queue, tmp_path: Path) -> None:
    written = write_mails(queue, tmp_path / "mails")
    assert [m.name for m in written] == [m.name for m in sorted(QUEUE_DATA.glob("*.patch"))]
    for m in written:
        assert m.read_bytes() == (QUEUE_DATA / m.name).read_bytes(), m.name


def test_mbox_split_agrees_with_git_mailsplit(queue: Queue, tmp_path: Path) -> None:
    mbox = tmp_path / "queue.mbox"
    mbox.write_bytes(b"".join(m.read_bytes() for m in sorted(QUEUE_DATA.glob("*.patch"))))
    split = tmp_path / "split"
    split.mkdir()
    git(tmp_path, "mailsplit", f"-o{split}", str(mbox))
    assert [p.read_bytes() for p in sorted(split.iterdir())] == split_mbox(mbox.read_bytes())


def test_range_import_export_and_git_am_give_the_branchs_tree(
    project: Path, queue: Queue, tmp_path: Path
) -> None:
    r = invoke(
        project, "series", "import", "--from", str(queue.fork), "--range", f"{queue.base}..queue", "--replace"
    )
    assert r.exit_code == 0, r.output
    patches = project / "patches"
    files = [ln.split()[0] for ln in (patches / "series").read_text().splitlines()]
    # git's own file names, When stated from the base
    assert files == [m.name for m in sorted(QUEUE_DATA.glob("*.patch"))]
    series = load_series(patches)
    assert {p.when for p in series.patches} == {f"{queue.base}.."}
    assert [p.author for p in series.patches] == [
        "Jöhannes Gäßler <jg@example.invalid>",
        "Nakasaka, Masato <nakasaka@example.invalid>",
        "nobody <>",
        "Fixture Author <fixture@example.invalid>",
        "Fixture Author <fixture@example.invalid>",
    ]
    want_tree = tree_of(queue.fork, "queue")
    want_log = _log(queue.fork, f"{queue.base}..queue")
    # the imported files as they are: git am takes them, same tree, same authors, dates, titles
    assert git_am(queue.fork, queue.base, [patches / f for f in files], branch="am-imported") == want_tree
    am_log = _log(queue.fork, f"{queue.base}..am-imported")
    assert [c.split("|")[:3] for c in am_log] == [c.split("|")[:3] for c in want_log]
    assert [c.split("|", 3)[3].split("\n")[0] for c in am_log] == [
        c.split("|", 3)[3].split("\n")[0] for c in want_log
    ]
    # export, then git am: byte-identical trees
    out = tmp_path / "export"
    r = invoke(project, "series", "export", str(out))
    assert r.exit_code == 0, r.output
    exported = [out / ln for ln in (out / "series").read_text().split()]
    assert git_am(queue.fork, queue.base, exported, branch="am-exported") == want_tree
    assert _log(queue.fork, f"{queue.base}..am-exported") == am_log  # messages too (with the When trailer)
    # without a diffstat git am takes them just as well
    r = invoke(project, "series", "export", str(out), "--no-diffstat", "--replace")
    assert r.exit_code == 0, r.output
    assert git_am(queue.fork, queue.base, exported, branch="am-nostat") == want_tree
    # import -> export -> import: the same series
    again = tmp_path / "again"
    (again / "recipes").mkdir(parents=True)
    (again / "patches").mkdir()
    assert invoke(again, "series", "import", str(out)).exit_code == 0
    _same_series(patches, again / "patches")


def test_export_to_a_branch_is_the_queue_again(
    project: Path, queue: Queue, upstream: FixtureUpstream
) -> None:
    assert invoke(project, "series", "import", str(QUEUE_DATA), "--replace").exit_code == 0
    r = invoke(
        project,
        "series",
        "export",
        "--to-branch",
        "review",
        "--upstream",
        str(queue.fork),
        "--recipe",
        "fixture",
        "--json",
    )
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    br = data["branch"]
    assert data["outdir"] is None and br["name"] == "review" and br["base"] == upstream.head
    assert len(br["commits"]) == 5 and br["head"] == br["commits"][-1]["commit"]
    assert git(queue.fork, "rev-parse", "review") == br["head"]
    assert tree_of(queue.fork, "review") == tree_of(queue.fork, "queue")
    got = _log(queue.fork, f"{queue.base}..review")
    want = _log(queue.fork, f"{queue.base}..queue")
    assert got == want  # authors, dates and messages as the queue's commits have them
    committer = git(queue.fork, "log", "-1", "--format=%cn <%ce> %cI|%aI", "review").split("|")
    assert committer[0].startswith("patchkit <patchkit@localhost> ") and committer[0].endswith(committer[1])
    r = invoke(
        project,
        "series",
        "export",
        "--to-branch",
        "review",
        "--upstream",
        str(queue.fork),
        "--recipe",
        "fixture",
    )
    assert_error(r, 2, "branch review already exists", "--force")
    r = invoke(
        project,
        "series",
        "export",
        "--to-branch",
        "review",
        "--upstream",
        str(queue.fork),
        "--recipe",
        "fixture",
        "--force",
    )
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"branch review at {br['head']} in ")  # the same queue, the same commits
    r = invoke(
        project,
        "series",
        "export",
        "--to-branch",
        "bad..name",
        "--upstream",
        str(queue.fork),
        "--recipe",
        "fixture",
    )
    assert_error(r, 2, "is not a valid branch name")


def test_patchkits_own_patch_exported_has_an_author(
    project: Path, upstream: FixtureUpstream, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    r = invoke(project, "series", "export", str(out))  # the author: git's identity (the fixture's)
    assert r.exit_code == 0, r.output
    (mail,) = sorted(out.glob("*.patch"))
    assert mail.name == "0001-zero-nbytes-guard.patch"
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(upstream.path), str(clone))
    git_am(clone, upstream.head, [mail])
    assert git(clone, "log", "-1", "--format=%an <%ae>|%s") == (
        "Fixture Author <fixture@example.invalid>|rpc: let zero-byte tensors pass the bounds check"
    )
    r = invoke(
        project, "series", "export", str(out), "--replace", "--author", "Zoë Example <zoe@example.invalid>"
    )
    assert r.exit_code == 0, r.output
    git_am(clone, upstream.head, [mail], branch="am2")
    assert git(clone, "log", "-1", "--format=%an <%ae>") == "Zoë Example <zoe@example.invalid>"
    body = git(clone, "log", "-1", "--format=%b")
    assert body.startswith("zero-element views carry a data pointer past the slice end")


def test_check_and_build_take_an_imported_queue(
    project: Path, queue: Queue, upstream: FixtureUpstream, tmp_path: Path
) -> None:
    # the mails as they are (no field stated): build applies them
    r = invoke(project, "series", "import", str(QUEUE_DATA), "--replace")
    assert r.exit_code == 0, r.output
    for m in QUEUE_DATA.glob("*.patch"):
        assert (project / "patches" / m.name).read_bytes() == m.read_bytes()
    r = invoke(project, "check", "fixture", "--json")
    assert r.exit_code == 0, r.output
    out = tmp_path / "out"
    r = build(project, out, "--no-smoke")
    assert r.exit_code == 0, r.output
    info = json.loads((out / "build-info.json").read_text())
    assert [p["file"] for p in info["patches"]] == [m.name for m in sorted(QUEUE_DATA.glob("*.patch"))]
    assert {p["result"] for p in info["patches"]} == {"applied"}
    # and from the fork's range, with When stated: check says every one applies
    r = invoke(
        project,
        "series",
        "import",
        "--from",
        str(queue.fork),
        "--range",
        f"{upstream.head}..queue",
        "--replace",
    )
    assert r.exit_code == 0, r.output
    r = invoke(project, "check", "fixture", "--json")
    assert r.exit_code == 0, r.output
    (ref,) = json.loads(r.stdout)["refs"]
    assert [x["status"] for x in ref["results"]] == ["applies"] * 5


def test_a_title_found_upstream_after_the_base_is_a_backport(
    project: Path, queue: Queue, upstream: FixtureUpstream, tmp_path: Path
) -> None:
    later = tmp_path / "later"
    git(tmp_path, "clone", "-q", str(upstream.path), str(later))
    old = dict(os.environ)
    os.environ.update(GIT_ENV)
    try:
        same = commit_files(later, {"NOTES": "x\n"}, "docs: notes and a how-to, the test program goes")
        commit_files(later, {"NOTES": "y\n"}, "a fix for the table (#77)")
    finally:
        os.environ.clear()
        os.environ.update(old)
    src = tmp_path / "q"
    shutil.copytree(QUEUE_DATA, src)
    five = sorted(src.glob("*.patch"))[4]
    five.write_bytes(five.read_bytes().replace(b"folds for sure\n", b"folds (#77)\n", 1))
    r = invoke(
        project,
        "series",
        "import",
        str(src),
        "--replace",
        "--base",
        upstream.head[:12],
        "--upstream",
        str(later),
        "--json",
    )
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["patches"]
    assert rows[1]["added"] == {
        "When": f"{upstream.head}..",
        "Upstream-Status": f"backport {same[:12]} (same title upstream)",
    }
    assert rows[4]["added"]["Upstream-Status"].endswith("(same pull request #77 upstream)")
    assert "Upstream-Status" not in rows[0]["added"]
    assert "Upstream-Status" not in rows[3]["added"]  # its own trailer says Submitted
    statuses = [p.upstream_status.split()[0] for p in load_series(project / "patches").patches]
    assert statuses == ["pending", "backport", "pending", "Submitted", "backport"]


def test_bad_ranges(project: Path, queue: Queue, upstream: FixtureUpstream) -> None:
    r = invoke(
        project,
        "series",
        "import",
        "--from",
        str(queue.fork),
        "--range",
        f"queue..{upstream.head}",
        "--replace",
    )
    assert_error(r, 4, "is not an ancestor of")
    r = invoke(
        project, "series", "import", "--from", str(queue.fork), "--range", "nosuch..queue", "--replace"
    )
    assert_error(r, 4, "unknown ref 'nosuch'")
    env = {**os.environ, **GIT_ENV}
    subprocess.run(
        ["git", "checkout", "-q", "-b", "side", queue.commits[0]], cwd=queue.fork, env=env, check=True
    )
    (queue.fork / "side.txt").write_text("side\n")
    subprocess.run(["git", "add", "side.txt"], cwd=queue.fork, env=env, check=True)
    subprocess.run(["git", "commit", "-qm", "side"], cwd=queue.fork, env=env, check=True)
    subprocess.run(["git", "checkout", "-q", "queue"], cwd=queue.fork, env=env, check=True)
    subprocess.run(["git", "merge", "-q", "--no-edit", "side"], cwd=queue.fork, env=env, check=True)
    r = invoke(
        project,
        "series",
        "import",
        "--from",
        str(queue.fork),
        "--range",
        f"{upstream.head}..queue",
        "--replace",
    )
    assert_error(r, 5, "holds merge commit", "a patch queue is a line of commits")
    assert sha256_file(project / "patches" / "0001-zero-nbytes-guard.patch")  # untouched


@pytest.mark.parametrize("name", ["HEAD", "@", "-x", "@{-1}", "a\x1b]0;x\x07b"])
def test_export_to_a_branch_refuses_names_git_takes_for_something_else(
    project: Path, queue: Queue, name: str
) -> None:
    before = git(queue.fork, "for-each-ref", "--format=%(refname) %(objectname)")
    r = invoke(
        project, "series", "export", "--to-branch", name, "--upstream", str(queue.fork), "--recipe", "fixture"
    )
    assert_error(r, 2, "is not a valid branch name")
    assert "\x1b" not in r.output
    assert git(queue.fork, "for-each-ref", "--format=%(refname) %(objectname)") == before


def test_export_to_a_branch_never_moves_the_branch_checked_out(project: Path, queue: Queue) -> None:
    assert invoke(project, "series", "import", str(QUEUE_DATA), "--replace").exit_code == 0
    checked_out = git(queue.fork, "symbolic-ref", "--short", "HEAD")
    head = git(queue.fork, "rev-parse", "HEAD")
    status = git(queue.fork, "status", "--porcelain")
    r = invoke(
        project,
        "series",
        "export",
        "--to-branch",
        checked_out,
        "--upstream",
        str(queue.fork),
        "--recipe",
        "fixture",
        "--force",
    )
    assert_error(r, 2, f"branch {checked_out} is checked out in {queue.fork}", "even with --force")
    assert git(queue.fork, "rev-parse", "HEAD") == head
    assert git(queue.fork, "status", "--porcelain") == status
