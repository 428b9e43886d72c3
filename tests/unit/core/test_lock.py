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
    assert msg.startswith(f"the cache {cache} is in use by pid {os.getpid()} on {socket.gethostname()} "
                          "(patchkit build cpu-rpc, since ")
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
        with pytest.raises(LockBusy, match=r"is in use by another patchkit run$"), \
                cache_lock(tmp_path, "second"):
            pass
        (tmp_path / "lock.owner").unlink()
        with pytest.raises(LockBusy, match=r"is in use by another patchkit run$"), \
                cache_lock(tmp_path, "third"):
            pass
