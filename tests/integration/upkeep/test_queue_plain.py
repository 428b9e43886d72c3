"""`series import` takes plain `git diff` files and a quilt folder (free text before each
diff, a quilt `series` file): every field derived, the title from the text or the file's
name, no author invented; `check` reads them like any patch, and a queue of independent
patches (each applies to the base alone) as such."""

from __future__ import annotations

import json
import os
from pathlib import Path

from patchkit.spec.series import load_series
from tests.fixtures.project import invoke
from tests.fixtures.upstream import GIT_ENV, commit_files, git

F = "".join(f"line {i}\n" for i in range(1, 21))


def test_plain_diffs_and_a_quilt_folder_are_imported_as_they_are(tmp_path: Path) -> None:
    old = os.environ.copy()
    os.environ.update(GIT_ENV)
    os.environ["GIT_CONFIG_GLOBAL"] = os.devnull
    try:
        up = tmp_path / "up"
        up.mkdir()
        git(up, "init", "-q", "-b", "master")
        base = commit_files(up, {"src/f.c": F, "src/g.c": F}, "initial")
        # two diffs made against the clean base, each alone (not stacked)
        (up / "src/f.c").write_text(F.replace("line 3\n", "line three\n"))
        d1 = git(up, "diff") + "\n"
        git(up, "checkout", "-q", "--", "src/f.c")
        (up / "src/f.c").write_text(F.replace("line 17\n", "line seventeen\n"))
        d2 = git(up, "diff") + "\n"
        git(up, "checkout", "-q", "--", "src/f.c")
        (up / "src/f.c").write_text(F.replace("line 4\n", "line four\n"))
        d3 = git(up, "diff") + "\n"  # alone it applies; on top of d1 (line 3 changed) it does not
        git(up, "checkout", "-q", "--", "src/f.c")
    finally:
        os.environ.clear()
        os.environ.update(old)
    q = tmp_path / "q"
    q.mkdir()
    (q / "01-ggml-three.patch").write_bytes(d1.encode())
    (q / "02-seventeen.diff").write_bytes(("Spell seventeen out\n\nThe docs say so.\n\n" + d2).encode())
    (q / "series").write_text("02-seventeen.diff\n01-ggml-three.patch -p1\n")
    proj = tmp_path / "proj"
    (proj / "patches").mkdir(parents=True)
    (proj / "recipes").mkdir()
    r = invoke(proj, "series", "import", str(q), "--base", base)
    assert r.exit_code == 0, r.output
    assert "plain; derived Subject" in r.output
    patches = load_series(proj / "patches").patches
    assert [p.filename for p in patches] == ["02-seventeen.diff", "01-ggml-three.patch"]  # quilt's order
    assert [p.subject for p in patches] == ["Spell seventeen out", "ggml three"]
    assert [p.kind for p in patches] == ["plain", "plain"]
    assert all(p.author is None for p in patches)
    # each file kept byte for byte
    assert (proj / "patches" / "01-ggml-three.patch").read_bytes() == (q / "01-ggml-three.patch").read_bytes()
    r = invoke(proj, "check", "--all", "--repo", str(up), "--ref", base)
    assert r.exit_code == 0, r.output
    assert r.stdout.count("applies") == 2
    # a third diff made against the base in the same place: the queue is independent,
    # found by trying each patch on the base, and recorded in patches/series
    (q / "03-four.patch").write_bytes(d3.encode())
    (q / "series").write_text("02-seventeen.diff\n01-ggml-three.patch -p1\n03-four.patch\n")
    r = invoke(proj, "series", "import", str(q), "--base", base, "--upstream", str(up), "--replace")
    assert r.exit_code == 0, r.output
    assert "independent: each applies to the base alone" in r.output
    assert "# patchkit: independent" in (proj / "patches" / "series").read_text().splitlines()
    series = load_series(proj / "patches")
    assert series.independent
    r = invoke(proj, "check", "--all", "--repo", str(up), "--ref", base, "--json")
    assert r.exit_code == 0, r.output
    (ref,) = json.loads(r.stdout)["refs"]
    assert [v["status"] for v in ref["results"]] == ["applies", "applies", "applies"]
    assert all(v["cascade_of"] == [] and v["note"] == "" for v in ref["results"])
    # exported as it came: the same files, byte for byte, and the series with its line
    out = tmp_path / "out"
    r = invoke(proj, "series", "export", str(out))
    assert r.exit_code == 0, r.output
    assert "a plain diff, as it came" in r.output
    assert (out / "series").read_text().splitlines() == [
        "# patchkit: independent",
        "02-seventeen.diff",
        "01-ggml-three.patch",
        "03-four.patch",
    ]
    for f in ("02-seventeen.diff", "01-ggml-three.patch", "03-four.patch"):
        assert (out / f).read_bytes() == (q / f).read_bytes()
    # a refresh onto the base itself: every patch unchanged, the series as it was
    # (tests/integration/upkeep/test_refresh_independent.py refreshes one onto a new commit)
    before = (proj / "patches" / "series").read_bytes()
    r = invoke(
        proj,
        "refresh",
        "--all",
        "--repo",
        str(up),
        "--from",
        base,
        "--onto",
        base,
        "--workdir",
        str(tmp_path / "wd"),
    )
    assert r.exit_code == 0, r.output
    assert r.output.count("unchanged ") == 3
    assert (proj / "patches" / "series").read_bytes() == before
    # stacked (as it was read before), the third does not apply on the first
    r = invoke(proj, "series", "import", str(q), "--base", base, "--stacked", "--replace")
    assert r.exit_code == 0, r.output
    assert not load_series(proj / "patches").independent
    r = invoke(proj, "check", "--all", "--repo", str(up), "--ref", base)
    assert r.exit_code == 11, r.output
    assert "#3 four: conflicts" in r.stdout
