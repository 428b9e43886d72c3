"""Reproducible archives (release.archive)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from patchkit.release.archive import Member, read_archive, write_archive


def test_zip_clamps_dates_before_1980(tmp_path: Path) -> None:
    path = tmp_path / "a.zip"
    write_archive(path, "a", [Member(name="x", mode=0o644, data=b"x")], mtime=0)
    with zipfile.ZipFile(path) as zf:
        assert zf.infolist()[0].date_time == (1980, 1, 1, 0, 0, 0)
    assert [e.name for e in read_archive(path)] == ["a/x"]
