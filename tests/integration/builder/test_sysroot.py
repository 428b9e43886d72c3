"""`patchkit root prepare|list` and builder.sysroot.prepare_root with a fake debootstrap
and bwrap (no network): what runs, in which order, what is left behind on a failure."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from patchkit.builder import sysroot
from patchkit.cli import main
from patchkit.core.errors import BuildError
from tests.fixtures.sysroot import fake_tools

pytestmark = pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="preparing needs root")


def test_prepare_makes_the_root_and_then_reuses_it(tmp_path: Path) -> None:
    bin_ = fake_tools(tmp_path / "bin")
    env = {"PATH": f"{bin_}:/usr/bin:/bin"}
    rec, made = sysroot.prepare_root(tmp_path / "cache", "debian11", env=env)
    assert made and rec.suite == "bullseye" and rec.glibc == "2.31" and rec.debootstrap == "1.0.128+nmu2"
    base = tmp_path / "cache/roots/debian11"
    assert (base / "tree/var/lib/dpkg/status").is_file() and not (base / "tree.new").exists()
    calls = (bin_ / "bwrap.log").read_text().splitlines()
    assert [c.split(" --setenv PATH ")[1].split(" ", 1)[1] for c in calls] == [
        "apt-get update",
        "apt-get install -y --no-install-recommends build-essential cmake ninja-build git",
        "apt-get clean",
    ]
    assert all(f"--bind {base}/tree.new /" in c and "/etc/resolv.conf" in c for c in calls)
    again, made = sysroot.prepare_root(tmp_path / "cache", "debian11", env=env)
    assert not made and again == rec
    assert len((bin_ / "bwrap.log").read_text().splitlines()) == 3  # nothing ran


def test_a_failed_apt_leaves_no_root(tmp_path: Path) -> None:
    bin_ = fake_tools(tmp_path / "bin", apt_fails=True)
    with pytest.raises(BuildError, match="apt-get install .* in the root failed"):
        sysroot.prepare_root(tmp_path / "cache", "debian11", env={"PATH": f"{bin_}:/usr/bin:/bin"})
    assert sysroot.find_root(tmp_path / "cache", "debian11") is None
    assert not (tmp_path / "cache/roots/debian11/tree").exists()


def test_prepare_needs_debootstrap(tmp_path: Path) -> None:
    r = CliRunner().invoke(
        main,
        ["root", "prepare", "debian11"],
        env={"PATCHKIT_CACHE": str(tmp_path / "c"), "PATH": str(tmp_path / "empty")},
    )
    assert r.exit_code == 8, r.output
    assert "debootstrap not found" in r.stderr and "Traceback" not in r.output


def test_cli_prepare_again_and_list(tmp_path: Path) -> None:
    bin_ = fake_tools(tmp_path / "bin")
    env = {"PATCHKIT_CACHE": str(tmp_path / "c"), "PATH": f"{bin_}:/usr/bin:/bin"}
    r = CliRunner().invoke(main, ["root", "prepare", "debian11", "--json"], env=env)
    assert r.exit_code == 0, r.output
    rec = json.loads(r.stdout)
    assert rec["name"] == "debian11" and rec["glibc"] == "2.31"
    r = CliRunner().invoke(main, ["root", "prepare", "debian11"], env=env)
    assert r.stdout.strip() == f"debian11@{rec['packages_sha256'][:12]}" and "reusing" in r.stderr
    r = CliRunner().invoke(main, ["root", "list"], env=env)
    lines = r.stdout.splitlines()
    assert lines[0].startswith(
        "debian11: Debian bullseye, floor GLIBC_2.31 GLIBCXX_3.4.28: prepared (debian11@"
    )
    assert lines[1].endswith("not prepared (`patchkit root prepare debian12`)")
    r = CliRunner().invoke(main, ["root", "prepare", "debian13"], env=env)
    assert r.exit_code == 2 and "debian13" in r.output


@pytest.mark.parametrize(
    "planted", ["roots", "roots/debian11", "roots/debian11/tree", "roots/debian11/tree.new"]
)
def test_a_planted_link_in_the_cache_is_refused_in_one_line(tmp_path: Path, planted: str) -> None:
    """`<cache>/roots/debian11` a link to a user folder: `root prepare` wrote a whole root
    there (exit 0); a planted `tree` link gave a raw OSError. Now one line, exit 6, and
    nothing is written through the link."""
    bin_ = fake_tools(tmp_path / "bin")
    cache = tmp_path / "c"
    target = tmp_path / "users-folder"
    target.mkdir()
    (target / "mine.txt").write_text("the user's\n")
    if planted == "roots/debian11/tree":  # a prepared root whose tree became a link
        from tests.fixtures.sysroot import fake_root

        fake_root(cache)
        shutil.rmtree(cache / planted)
    link = cache / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    env = {"PATCHKIT_CACHE": str(cache), "PATH": f"{bin_}:/usr/bin:/bin"}
    for again in ((), ("--again",)):
        r = CliRunner().invoke(main, ["root", "prepare", "debian11", *again], env=env)
        assert r.exit_code == 6, r.output
        errors = [ln for ln in r.output.splitlines() if ln.startswith("error: ")]
        assert errors == [
            f"error: {link} is a link: patchkit prepares a build root only in its own cache folder"
        ]
        assert "Traceback" not in r.output
        assert sorted(p.name for p in target.iterdir()) == ["mine.txt"]
    assert sysroot.find_root(cache, "debian11") is None  # and no build uses it


def test_again_leaves_no_tree_old_or_new_behind(tmp_path: Path) -> None:
    """`--again` replaces a prepared root; a failed one keeps the old root and leaves no
    tree.new (nor tree.old) beside it."""
    bin_ = fake_tools(tmp_path / "bin")
    cache = tmp_path / "c"
    env = {"PATH": f"{bin_}:/usr/bin:/bin"}
    rec, _ = sysroot.prepare_root(cache, "debian11", env=env)
    base = cache / "roots/debian11"
    (base / "tree.old").mkdir()  # left by an interrupted earlier run
    again, made = sysroot.prepare_root(cache, "debian11", env=env, again=True)
    assert made and again.packages_sha256 == rec.packages_sha256
    assert sorted(p.name for p in base.iterdir()) == ["prepare.log", "root.json", "tree"]
    failing = fake_tools(tmp_path / "bin2", apt_fails=True)
    with pytest.raises(BuildError, match="apt-get install"):
        sysroot.prepare_root(cache, "debian11", env={"PATH": f"{failing}:/usr/bin:/bin"}, again=True)
    assert sorted(p.name for p in base.iterdir()) == ["prepare.log", "root.json", "tree"]
    assert sysroot.find_root(cache, "debian11") == again  # the old root, still whole
