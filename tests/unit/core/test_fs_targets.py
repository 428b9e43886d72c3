"""The atomic writer never replaces what is not a regular file.

A device, a FIFO, a link (to a device, to this process's stdout, to a regular file) named as
the target used to be replaced by a regular file (temp beside it, then rename): as root,
``-o /dev/stdout`` or ``--summary /dev/null`` did that to the system's files. Now a
character device or FIFO is written in place, this process's own stdout/stderr at its
offset, a block device, socket or folder is refused in one line; a link in one of
patchkit's own folders is still replaced (never written through), while a name the user
gave (``follow_links=True``) is followed: through to a regular file, in place into a
device, a FIFO or ``/proc/self/fd/1`` (``-o /dev/stdout`` streams)."""

from __future__ import annotations

import os
import socket
import stat
import threading
import time
from pathlib import Path

import pytest

from patchkit.core.errors import ConfigError
from patchkit.core.fs import atomic_file, atomic_write_bytes, atomic_write_many, atomic_write_text

root_only = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="mknod needs root")
posix_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs and device nodes are POSIX")


def _only(folder: Path, *names: str) -> None:
    """No temp file was left beside the target."""
    assert sorted(p.name for p in folder.iterdir()) == sorted(names)


@root_only
def test_a_character_device_is_written_in_place_not_replaced(tmp_path: Path) -> None:
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    atomic_write_text(null, "name: release\n")
    assert stat.S_ISCHR(os.lstat(null).st_mode) and os.lstat(null).st_rdev == os.makedev(1, 3)
    _only(tmp_path, "null")


@root_only
def test_a_block_device_is_refused_and_kept(tmp_path: Path) -> None:
    blk = tmp_path / "disk"
    os.mknod(blk, 0o600 | stat.S_IFBLK, os.makedev(7, 200))  # a loop device number; never opened
    with pytest.raises(ConfigError, match=r"disk is a block device: refusing to write to it"):
        atomic_write_bytes(blk, b"x")
    assert stat.S_ISBLK(os.lstat(blk).st_mode)
    _only(tmp_path, "disk")


@posix_only
def test_a_fifo_with_a_reader_gets_the_bytes(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    deadline = time.monotonic() + 10
    while True:  # until the reader has the FIFO open (the write refuses a FIFO nobody reads)
        try:
            atomic_write_bytes(fifo, b"hello\n" * 10000)
            break
        except ConfigError:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    reader.join(10)
    assert got == [b"hello\n" * 10000]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    _only(tmp_path, "pipe")


@posix_only
def test_a_fifo_nobody_reads_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=r"pipe is a FIFO that no process reads"):
        atomic_write_text(fifo, "x")
    assert time.monotonic() - t0 < 5
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    _only(tmp_path, "pipe")


@posix_only
def test_a_link_to_this_process_stdout_streams_there(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1" if Path("/proc/self/fd/1").exists() else "/dev/fd/1")
    atomic_write_text(link, "on: push\n", follow_links=True)
    assert capfd.readouterr().out == "on: push\n"
    assert link.is_symlink() and os.readlink(link).endswith("/fd/1")
    _only(tmp_path, "stdout")


def test_a_link_to_a_regular_file_is_written_through_and_kept(tmp_path: Path) -> None:
    real = tmp_path / "shared" / "release.yml"
    real.parent.mkdir()
    real.write_text("old\n")
    real.chmod(0o640)
    link = tmp_path / "release.yml"
    link.symlink_to(Path("shared") / "release.yml")
    atomic_write_text(link, "new\n", follow_links=True)
    assert link.is_symlink() and os.readlink(link) == str(Path("shared") / "release.yml")
    assert real.read_text() == "new\n" and stat.S_IMODE(real.stat().st_mode) == 0o640
    _only(tmp_path, "release.yml", "shared")
    _only(real.parent, "release.yml")


def test_a_dangling_link_is_refused_and_kept(tmp_path: Path) -> None:
    link = tmp_path / "out.yml"
    link.symlink_to(tmp_path / "elsewhere" / "x.yml")
    with pytest.raises(ConfigError, match=r"out.yml is a symlink to .*x.yml, which does not exist"):
        atomic_write_text(link, "x", follow_links=True)
    assert link.is_symlink() and not (tmp_path / "elsewhere").exists()
    _only(tmp_path, "out.yml")


@posix_only
def test_a_socket_and_a_folder_are_refused(tmp_path: Path) -> None:
    sock_path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock_path))
        with pytest.raises(ConfigError, match=r"s is a socket: refusing to write to it"):
            atomic_write_text(sock_path, "x")
        assert stat.S_ISSOCK(os.lstat(sock_path).st_mode)
    (tmp_path / "d").mkdir()
    with pytest.raises(ConfigError, match=r"d is a folder"):
        atomic_write_text(tmp_path / "d", "x")
    (tmp_path / "ld").symlink_to("d")
    with pytest.raises(ConfigError, match=r"ld is a folder"):
        atomic_write_text(tmp_path / "ld", "x", follow_links=True)
    _only(tmp_path, "s", "d", "ld")


@posix_only
def test_the_streaming_form_is_refused_where_a_temp_file_is_needed(tmp_path: Path) -> None:
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"model.gguf is a FIFO: refusing to replace it"):
        with atomic_file(fifo) as (f, _):
            f.write(b"x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    _only(tmp_path, "model.gguf")


def test_a_link_patchkit_did_not_make_is_replaced_never_written_through(tmp_path: Path) -> None:
    """Without follow_links (a file patchkit names inside its own folders), a planted link
    cannot redirect the write: it is replaced, the file it names is untouched."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "state.json").symlink_to(victim)
    atomic_write_text(tmp_path / "state.json", "{}")
    assert not (tmp_path / "state.json").is_symlink() and (tmp_path / "state.json").read_text() == "{}"
    assert victim.read_text() == "precious"


@posix_only
def test_write_many_refuses_special_files_before_writing_anything(tmp_path: Path) -> None:
    (tmp_path / "b.toml").write_text("old b")
    os.mkfifo(tmp_path / "c.toml")
    with pytest.raises(ConfigError, match=r"c.toml is a FIFO: refusing to replace it"):
        atomic_write_many({tmp_path / "b.toml": b"new b", tmp_path / "c.toml": b"c"})
    assert (tmp_path / "b.toml").read_text() == "old b"  # all or nothing
    assert stat.S_ISFIFO(os.lstat(tmp_path / "c.toml").st_mode)
    _only(tmp_path, "b.toml", "c.toml")


def test_each_refusal_carries_its_facts_as_fields(tmp_path: Path) -> None:
    from patchkit.core.fs import check_writable
    from patchkit.core.fs_problems import WriteRefused

    def refused(call: object, *args: object, **kw: object) -> object:
        with pytest.raises(ConfigError) as e:
            call(*args, **kw)  # type: ignore[operator]
        assert e.value.hint == ""  # the advice is the CLI's (patchkit/cli/problems/fs.py)
        return e.value.problem

    (tmp_path / "dir").mkdir()
    assert refused(atomic_write_text, tmp_path / "dir", "x") == WriteRefused(
        path=tmp_path / "dir", found="special", kind="a folder"
    )
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert refused(atomic_write_many, {fifo: b"x"}) == WriteRefused(
        path=fifo, found="not-replaceable", kind="a FIFO"
    )
    assert refused(atomic_write_text, fifo, "x") == WriteRefused(path=fifo, found="no-reader")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    assert refused(atomic_write_text, tmp_path / "dangling", "x", follow_links=True) == WriteRefused(
        path=tmp_path / "dangling", found="dangling-link", link=str(tmp_path / "gone")
    )
    (tmp_path / "file").write_text("")
    assert refused(check_writable, tmp_path / "file" / "x.json") == WriteRefused(
        path=tmp_path / "file" / "x.json", found="no-folder", parent=tmp_path / "file"
    )
