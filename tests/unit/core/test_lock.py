"""core.lock: one patchkit run per cache; a second one is told who holds it."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from patchkit.core.errors import LockBusy
from patchkit.core.lock import cache_lock


def test_second_holder_gets_lock_busy_naming_the_holder(tmp_path: Path) -> None:
    cache = tmp_path / "cache"  # made on first use
    with cache_lock(cache, "patchkit build cpu-rpc"):
        owner = json.loads((cache / "lock.owner").read_text())
        assert owner["pid"] == os.getpid() and owner["what"] == "patchkit build cpu-rpc"
        with pytest.raises(LockBusy) as e, cache_lock(cache, "patchkit check"):
            pass
    msg = e.value.message
    assert msg.startswith(
        f"the cache {cache} is in use by pid {os.getpid()} on {socket.gethostname()} "
        "(patchkit build cpu-rpc, since "
    )
    assert "\n" not in msg and e.value.exit_code == 9
    assert "PATCHKIT_CACHE" in e.value.hint


def test_released_on_exit_and_on_error(tmp_path: Path) -> None:
    with cache_lock(tmp_path, "first"):
        pass
    assert not (tmp_path / "lock.owner").exists()
    with pytest.raises(RuntimeError), cache_lock(tmp_path, "second"):
        raise RuntimeError("boom")
    assert not (tmp_path / "lock.owner").exists()
    with cache_lock(tmp_path, "third"):  # free again
        assert json.loads((tmp_path / "lock.owner").read_text())["what"] == "third"


def test_an_unreadable_owner_file_still_gives_one_line(tmp_path: Path) -> None:
    with cache_lock(tmp_path, "first"):
        (tmp_path / "lock.owner").write_text("{not json")
        with (
            pytest.raises(LockBusy, match=r"is in use by another patchkit run$"),
            cache_lock(tmp_path, "second"),
        ):
            pass
        (tmp_path / "lock.owner").unlink()
        with (
            pytest.raises(LockBusy, match=r"is in use by another patchkit run$"),
            cache_lock(tmp_path, "third"),
        ):
            pass


@pytest.mark.skipif(os.name != "posix", reason="symlinks and FIFOs")
def test_a_planted_owner_link_is_replaced_not_written_through(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (cache / "lock.owner").symlink_to(victim)
    with cache_lock(cache, "patchkit build x"):
        assert not (cache / "lock.owner").is_symlink()
        assert json.loads((cache / "lock.owner").read_text())["what"] == "patchkit build x"
    assert victim.read_text() == "precious"


@pytest.mark.skipif(os.name != "posix", reason="symlinks")
def test_a_planted_lock_link_is_refused(tmp_path: Path) -> None:
    from patchkit.core.errors import ConfigError

    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match="cannot open the cache lock .*lock"), cache_lock(cache, "x"):
        pass
    assert not (tmp_path / "elsewhere").exists()  # not created through the link


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_a_hostile_owner_file_never_hangs_and_is_capped(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with cache_lock(cache, "first"):
        (cache / "lock.owner").unlink()
        os.mkfifo(cache / "lock.owner")  # reading it would wait for a writer forever
        with pytest.raises(LockBusy, match="in use by another patchkit run"), cache_lock(cache, "2nd"):
            pass
        os.unlink(cache / "lock.owner")
        (cache / "lock.owner").write_text(
            json.dumps({"pid": 1, "host": "h" * 10_000, "what": "w", "since": "s"})
        )
        with pytest.raises(LockBusy) as e, cache_lock(cache, "3rd"):
            pass
        assert len(e.value.message) < 500
