"""core.fs: hashes, and atomic writes that leave either the old or the new file, never a
temp file."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

from patchkit.cli.problems import render
from patchkit.core import fs
from patchkit.core.errors import BuildError, ConfigError, ReleaseError
from patchkit.core.fs import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    sha256_bytes,
    sha256_file,
)
from patchkit.core.fs_problems import WriteFailed


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


def test_a_failed_rename_keeps_the_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "f.txt"
    atomic_write_text(target, "old")

    def full(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fs.os, "replace", full)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["f.txt"]


def test_an_interrupted_write_keeps_the_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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


# -- hostile files: reads capped, links refused, full disks named --------------------------


def test_read_capped_refuses_folders_fifos_and_big_files(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"12345")
    assert fs.read_capped(tmp_path / "f", limit=5, error=ConfigError) == b"12345"
    with pytest.raises(ConfigError, match="f is larger than 4 bytes"):
        fs.read_capped(tmp_path / "f", limit=4, error=ConfigError)
    with pytest.raises(ConfigError, match="is a folder, not a file|is not a regular file"):
        fs.read_capped(tmp_path, limit=4, error=ConfigError)
    with pytest.raises(ReleaseError, match="nope does not exist"):
        fs.read_capped(tmp_path / "nope", limit=4, error=ReleaseError)
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo")  # opening it for reading must not wait for a writer
        with pytest.raises(ConfigError, match="fifo is not a regular file"):
            fs.read_capped(tmp_path / "fifo", limit=4, error=ConfigError)


@pytest.mark.skipif(os.name != "posix", reason="symlinks")
def test_safe_copy_refuses_links_out_of_the_root_and_special_files(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    secret = tmp_path / "secret"
    secret.write_text("host file")
    (root / "LICENSE").symlink_to(secret)
    dest = tmp_path / "dest"
    with pytest.raises(BuildError, match="resolves to .*secret, outside .*root: refusing"):
        fs.safe_copy(root / "LICENSE", dest, root=root, error=BuildError)
    assert not dest.exists()
    (root / "real").write_text("ok")
    (root / "inner").symlink_to(root / "real")  # a link inside the root is fine
    dest.symlink_to(secret)  # and a link at the destination is replaced, not written through
    fs.safe_copy(root / "inner", dest, root=root, error=BuildError)
    assert dest.read_text() == "ok" and not dest.is_symlink() and secret.read_text() == "host file"
    (root / "dir").mkdir()
    with pytest.raises(BuildError, match="is not a regular file"):
        fs.safe_copy(root / "dir", tmp_path / "d2", root=root, error=BuildError)


def test_write_failure_names_the_out_dir_its_mount_and_the_file(tmp_path: Path) -> None:
    out = tmp_path / "out" / "cpu-rpc"
    dest = tmp_path / "out" / ".cpu-rpc.tmp-1" / "bin" / "llama-cli"
    full = OSError(28, "No space left on device", "/cache/work/build/bin/llama-cli")
    err = fs.write_failure(full, dest=dest, folder=out, error=ConfigError, full_error=BuildError)
    mount = fs.mount_point(out)
    assert isinstance(err, BuildError) and err.exit_code == 6
    assert err.message.startswith(f"no space left on the file system of {out} (mounted at {mount}, ")
    assert f"free) while writing {dest}" in err.message and "/cache/" not in err.message
    p = err.problem
    assert isinstance(p, WriteFailed) and (p.dest, p.folder, p.found, p.mount) == (dest, out, "full", mount)
    assert p.free is not None and p.free > 0
    assert str(mount) in render(err)[1]  # the advice is the CLI's
    big = fs.write_failure(
        OSError(27, "File too large"), dest=dest, folder=out, error=ConfigError, full_error=BuildError
    )
    assert "ulimit -f" in big.message and isinstance(big, BuildError)
    denied = fs.write_failure(
        PermissionError(13, "Permission denied"), dest=dest, folder=out, error=ConfigError
    )
    assert isinstance(denied, ConfigError) and denied.exit_code == 2
    assert denied.message == f"cannot write {dest}: Permission denied"
    assert denied.problem == WriteFailed(dest=dest, folder=out, found="refused", reason="Permission denied")
    assert render(denied)[1] == f"is {out} writable? Pass another --out, or fix its permissions"


def test_mount_point_of_a_path_that_does_not_exist_yet(tmp_path: Path) -> None:
    assert os.path.ismount(fs.mount_point(tmp_path / "a" / "b" / "c"))
    assert fs.mount_point(tmp_path / "a") == fs.mount_point(tmp_path)
