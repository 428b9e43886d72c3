"""core.fs_batch.recover_batches: a batch of renames whose process died half way (its journal on
disk, no process holding it) is put back; one whose process still runs is left alone.
(tests/integration/faults/ kills real runs; here the journal a kill leaves is made by hand.)"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from patchkit.core import fs_batch
from patchkit.core.fs_batch import atomic_write_many, recover_batches

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock")


def _killed_half_way(tmp_path: Path) -> fs_batch._Journal:
    """The state a kill between the first and the second rename leaves: a.txt is new
    (its backup beside it), b.txt old (its temp file still there), c.txt new (it was not
    there before: no backup); and the journal."""
    patches, recipes = tmp_path / "patches", tmp_path / "recipes"
    patches.mkdir()
    recipes.mkdir()
    a, b, c = patches / "a.txt", patches / "b.txt", recipes / "c.toml"
    a.write_text("old a")
    b.write_text("old b")
    backup_a, backup_b = patches / ".a.txt.x.orig", patches / ".b.txt.x.orig"
    backup_a.hardlink_to(a)
    backup_b.hardlink_to(b)
    tmp_a, tmp_b, tmp_c = patches / ".a.txt.x.tmp", patches / ".b.txt.x.tmp", recipes / ".c.toml.x.tmp"
    for t, text in ((tmp_a, "new a"), (tmp_b, "new b"), (tmp_c, "new c")):
        t.write_text(text)
    journal = fs_batch._Journal([(a, tmp_a, backup_a), (b, tmp_b, backup_b), (c, tmp_c, None)])
    tmp_a.replace(a)
    tmp_c.replace(c)
    return journal


def test_a_batch_cut_off_is_put_back(tmp_path: Path) -> None:
    journal = _killed_half_way(tmp_path)
    assert recover_batches(tmp_path / "patches") == []  # its process (this one) holds it
    for _, fd in journal.copies:  # the process dies: the OS drops its locks, not its files
        os.close(fd)
    restored = recover_batches(tmp_path / "patches")
    assert sorted(p.name for p in restored) == ["a.txt", "c.toml"]
    assert (tmp_path / "patches/a.txt").read_text() == "old a"
    assert (tmp_path / "patches/b.txt").read_text() == "old b"
    assert sorted(p.name for p in (tmp_path / "patches").iterdir()) == ["a.txt", "b.txt"]
    assert list((tmp_path / "recipes").iterdir()) == []  # c was new: gone, the journal copy too
    assert recover_batches(tmp_path / "recipes") == []


def test_the_next_batch_in_a_folder_puts_a_cut_off_one_back_first(tmp_path: Path) -> None:
    journal = _killed_half_way(tmp_path)
    for _, fd in journal.copies:
        os.close(fd)
    atomic_write_many({tmp_path / "patches/b.txt": b"newer b"})
    assert (tmp_path / "patches/a.txt").read_text() == "old a"
    assert (tmp_path / "patches/b.txt").read_text() == "newer b"
    assert sorted(p.name for p in (tmp_path / "patches").iterdir()) == ["a.txt", "b.txt"]


def test_a_file_that_is_no_journal_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / ".patchkit-batch.zz.json").write_text("not json")
    (tmp_path / "x").write_text("x")
    assert recover_batches(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [".patchkit-batch.zz.json", "x"]


def test_a_finished_batch_leaves_no_journal(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("old")
    atomic_write_many({tmp_path / "a": b"new"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]
