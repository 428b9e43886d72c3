"""core.fs: hashes, and atomic writes that leave either the old or the new file, never a
temp file."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

from patchkit.core import fs
from patchkit.core.fs import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    sha256_bytes,
    sha256_file,
)


def test_sha256_of_bytes_and_files_agree(tmp_path: Path) -> None:
    data = os.urandom(3 << 20) + b"tail"  # more than one read chunk
    (tmp_path / "f").write_bytes(data)
    assert sha256_file(tmp_path / "f") == sha256_bytes(data) == hashlib.sha256(data).hexdigest()
    (tmp_path / "empty").write_bytes(b"")
    assert sha256_file(tmp_path / "empty") == hashlib.sha256(b"").hexdigest()


def test_atomic_writes_leave_only_the_file(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "dir" / "state.json"  # parents are made
    atomic_write_bytes(target, b"one")
    atomic_write_text(target, "twö")
    assert target.read_bytes() == "twö".encode()
    atomic_write_json(target, {"b": [1, 2], "a": None})
    assert target.read_text() == '{\n  "a": null,\n  "b": [\n    1,\n    2\n  ]\n}\n'  # sorted, newline
    assert json.loads(target.read_text()) == {"a": None, "b": [1, 2]}
    assert os.listdir(target.parent) == ["state.json"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")
def test_mode_is_set_before_the_rename(tmp_path: Path) -> None:
    target = tmp_path / "run.sh"
    atomic_write_bytes(target, b"#!/bin/sh\n", mode=0o755)
    assert target.stat().st_mode & 0o777 == 0o755
    atomic_write_text(target, "x", mode=0o600)
    assert target.stat().st_mode & 0o777 == 0o600


def test_a_failed_rename_keeps_the_old_file_and_no_temp(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f.txt"
    atomic_write_text(target, "old")

    def full(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fs.os, "replace", full)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["f.txt"]


def test_an_interrupted_write_keeps_the_old_file_and_no_temp(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f.txt"
    atomic_write_text(target, "old")

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(fs.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_bytes(target, b"new" * 1000)
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["f.txt"]


def test_unserialisable_json_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        atomic_write_json(tmp_path / "x.json", {"x": object()})
    assert os.listdir(tmp_path) == []
