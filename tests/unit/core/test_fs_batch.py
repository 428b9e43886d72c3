"""core.fs's one all-or-nothing multi-file writer and its one owned-folder test.

``atomic_write_many`` stages every file beside its target, then renames them in turn; a
rename that fails half way (or an interrupt) puts back what was already renamed, so every
target ends as it was, and no temp file or backup is left. ``first_foreign`` names the first
entry of a folder its owner did not write (a link never counts as the owner's)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from patchkit.core import fs
from patchkit.core.fs import BatchWriteError, Foreign, atomic_write_many, first_foreign, folder_entries


def _fail_on(monkeypatch: pytest.MonkeyPatch, name: str, exc: BaseException) -> list[str]:
    real_replace = os.replace
    renamed: list[str] = []

    def flaky(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if Path(dst).name == name and str(src).endswith(".tmp"):
            raise exc
        real_replace(src, dst)
        renamed.append(Path(dst).name)

    monkeypatch.setattr(fs.os, "replace", flaky)
    return renamed


def test_a_rename_that_fails_half_way_puts_every_file_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.toml").write_text("old a")
    (tmp_path / "b.toml").write_text("old b")
    os.chmod(tmp_path / "b.toml", 0o600)
    renamed = _fail_on(monkeypatch, "c.toml", OSError(28, "No space left on device"))
    files = {tmp_path / n: f"new {n[0]}".encode() for n in ("a.toml", "b.toml", "new.toml", "c.toml")}
    (tmp_path / "c.toml").write_text("old c")
    with pytest.raises(BatchWriteError) as e:
        atomic_write_many(files)
    assert e.value.target == tmp_path / "c.toml" and e.value.errno == 28
    assert e.value.strerror == "No space left on device"
    assert renamed[:3] == ["a.toml", "b.toml", "new.toml"]  # three were in place when c failed
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {
        "a.toml": "old a",
        "b.toml": "old b",
        "c.toml": "old c",
    }  # the new file is gone again, no temp file, no backup
    assert (tmp_path / "b.toml").stat().st_mode & 0o777 == 0o600


def test_an_interrupt_between_renames_puts_every_file_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a").write_text("old a")
    (tmp_path / "b").write_text("old b")
    _fail_on(monkeypatch, "b", KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        atomic_write_many({tmp_path / "a": b"new a", tmp_path / "b": b"new b"})
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"a": "old a", "b": "old b"}


def test_a_check_that_refuses_a_staged_file_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("old a")
    seen: list[tuple[str, bytes]] = []

    def check(target: Path, tmp: Path) -> None:
        seen.append((target.name, tmp.read_bytes()))
        if target.name == "b":
            raise ValueError("b reads back wrong")

    with pytest.raises(ValueError, match="b reads back wrong"):
        atomic_write_many({tmp_path / "a": b"new a", tmp_path / "b": b"new b"}, check=check)
    assert seen == [("a", b"new a"), ("b", b"new b")]
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"a": "old a"}


def test_every_file_is_written_when_nothing_fails(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("old a")
    os.chmod(tmp_path / "a", 0o640)
    atomic_write_many({tmp_path / "a": b"new a", tmp_path / "b": b"new b"})
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"a": "new a", "b": "new b"}
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o640


def test_first_foreign_names_what_the_owner_does_not_write(tmp_path: Path) -> None:
    (tmp_path / "out.json").write_text("{}")
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "01.out").write_text("")
    own = {"files": {"out.json"}.__contains__, "dirs": {"raw": None}}
    assert folder_entries(tmp_path) == ["out.json", "raw"]
    assert first_foreign(tmp_path, ["out.json", "raw"], **own) is None  # type: ignore[arg-type]
    (tmp_path / "notes.txt").write_text("mine")
    assert first_foreign(tmp_path, folder_entries(tmp_path) or [], **own) == Foreign("notes.txt")  # type: ignore[arg-type]


def test_first_foreign_never_takes_a_link_for_the_owners_entry(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    box = tmp_path / "box"
    box.mkdir()
    (box / "raw").symlink_to(tmp_path / "elsewhere")
    (box / "out.json").symlink_to(tmp_path / "elsewhere")
    found = first_foreign(box, ["out.json", "raw"], files={"out.json"}.__contains__, dirs={"raw": None})
    assert found == Foreign("out.json", link=True)
    assert first_foreign(box, ["raw"], files=lambda _: False, dirs={"raw": None}) == Foreign("raw", link=True)


def test_first_foreign_asks_a_folders_own_check(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "x").write_text("")

    def only_listed(folder: Path) -> Foreign | None:
        return next((Foreign(f"bin/{n}", why="not listed") for n in os.listdir(folder) if n != "y"), None)

    assert first_foreign(tmp_path, ["bin"], files=lambda _: False, dirs={"bin": only_listed}) == Foreign(
        "bin/x", why="not listed"
    )


def test_folder_entries_of_nothing_a_file_and_a_link(tmp_path: Path) -> None:
    assert folder_entries(tmp_path / "missing") is None
    (tmp_path / "f").write_text("")
    (tmp_path / "l").symlink_to(tmp_path)
    for p in (tmp_path / "f", tmp_path / "l"):
        with pytest.raises(NotADirectoryError):
            folder_entries(p)
