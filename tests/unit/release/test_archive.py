"""Reproducible archives (release.archive)."""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from patchkit.core.fs import sha256_bytes, sha256_file
from patchkit.release.archive import (
    Member,
    archive_kind,
    check_archive,
    read_archive,
    write_archive,
    zip_date_time,
)


def test_zip_clamps_dates_before_1980(tmp_path: Path) -> None:
    path = tmp_path / "a.zip"
    write_archive(path, "a", [Member(name="x", mode=0o644, data=b"x")], mtime=0)
    with zipfile.ZipFile(path) as zf:
        assert zf.infolist()[0].date_time == (1980, 1, 1, 0, 0, 0)
    assert [e.name for e in read_archive(path)] == ["a/x"]


MEMBERS = [
    Member(name="bin/tool", mode=0o755, data=b"\x7fELF tool"),
    Member(name="LICENSE", mode=0o644, data=b"MIT\n"),
]


@pytest.mark.parametrize("suffix", [".tar.gz", ".zip"])
def test_written_archives_read_back_and_pass_the_layout_check(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"r{suffix}"
    digest = write_archive(path, "r", MEMBERS, mtime=1786106096)
    assert digest == sha256_file(path)
    entries = read_archive(path, keep=["r/LICENSE"])
    assert [e.name for e in entries] == ["r/LICENSE", "r/bin/tool"]  # sorted
    lic, tool = entries
    assert lic.data == b"MIT\n" and tool.data is None  # only what was asked for is kept
    assert (tool.mode, lic.mode, tool.size) == (0o755, 0o644, len(b"\x7fELF tool"))
    assert tool.sha256 == sha256_bytes(b"\x7fELF tool")
    assert check_archive(path, entries, root="r", mtime=1786106096) == []
    assert os.listdir(tmp_path) == [path.name]  # no temp file left


@pytest.mark.parametrize("suffix", [".tar.gz", ".zip"])
def test_source_files_and_bytes_give_the_same_archive(tmp_path: Path, suffix: str) -> None:
    src = tmp_path / "tool"
    src.write_bytes(b"\x7fELF tool")
    src.chmod(0o600)  # the file's own mode does not leak in
    from_file = [Member(name="bin/tool", mode=0o755, source=src), MEMBERS[1]]
    a = write_archive(tmp_path / "a" / f"x{suffix}", "r", MEMBERS, mtime=1700000000)
    b = write_archive(tmp_path / "b" / f"x{suffix}", "r", from_file, mtime=1700000000)
    assert a == b


def test_members_and_kinds_are_checked() -> None:
    with pytest.raises(ValueError, match="exactly one of data or source"):
        Member(name="x", mode=0o644)
    with pytest.raises(ValueError, match="exactly one of data or source"):
        Member(name="x", mode=0o644, data=b"", source=Path("x"))
    assert (archive_kind("a.tar.gz"), archive_kind("a.zip")) == ("tar.gz", "zip")
    with pytest.raises(ValueError, match=r"a.tgz: not a .tar.gz or .zip"):
        archive_kind("a.tgz")
    assert zip_date_time(0) == (1980, 1, 1, 0, 0, 0)
    assert zip_date_time(1786106097) == (2026, 8, 7, 12, 34, 56)  # zip keeps even seconds


def test_duplicate_names_are_refused_and_nothing_is_left(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="duplicate member names"):
        write_archive(tmp_path / "d.tar.gz", "r", [*MEMBERS, MEMBERS[0]], mtime=0)
    assert os.listdir(tmp_path) == []


def test_unreadable_archives_are_a_one_line_value_error(tmp_path: Path) -> None:
    for name in ("x.tar.gz", "x.zip"):
        (tmp_path / name).write_bytes(b"not an archive at all")
        with pytest.raises(ValueError, match=r"^not a readable (tar\.gz|zip) archive \("):
            read_archive(tmp_path / name)


def test_layout_check_finds_what_write_archive_would_not_do(tmp_path: Path) -> None:
    path = tmp_path / "odd.tar.gz"
    with tarfile.open(path, "w:gz") as tar:  # gzip header with a name and a time
        for name, mode, uid in (("r/z", 0o600, 1000), ("elsewhere/a", 0o644, 0)):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.mtime = 1, mode, uid, 5
            tar.addfile(info, io.BytesIO(b"x"))
        d = tarfile.TarInfo("r/dir")
        d.type, d.mode, d.mtime = tarfile.DIRTYPE, 0o755, 7
        tar.addfile(d)
    problems = check_archive(path, read_archive(path), root="r", mtime=7)
    assert "entries are not in sorted order" in problems
    assert "r/z: mode 600, expected 755 or 644" in problems
    assert "r/z: mtime 5, the manifest declares 7" in problems
    assert "r/z: owner 1000:0 ('':''), expected 0:0 with no names" in problems
    assert "elsewhere/a: outside the top folder r/" in problems
    assert "r/dir: not a regular file" in problems
    assert "gzip header holds a file name" in problems and "gzip header holds a timestamp" in problems
