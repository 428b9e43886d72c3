"""CMake's File API reply, read after the configure (which a rebuild runs sandboxed, with
the build dir writable): a file of it that is a FIFO does not block patchkit, one that is
a link, or a ``jsonFile`` naming a file outside the reply, is not read, and each is one
error that says to start again with --clean."""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from patchkit.builder import cmake as cm
from patchkit.builder.problems import BuildDirStale
from patchkit.cli.problems import render
from patchkit.core.errors import BuildError
from patchkit.core.paths import cache_dir
from tests.fixtures.project import build

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs and symlinks (POSIX)")


class Blocked(BaseException):
    """Not an OSError (nor an Exception): no ``except`` in the code under test swallows it."""


@pytest.fixture(autouse=True)
def _no_hang() -> Iterator[None]:
    def blocked(signum: int, frame: object) -> None:
        raise Blocked("blocked: a FIFO in the reply was opened or read")

    old = signal.signal(signal.SIGALRM, blocked)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def built(project: Path, tmp_path: Path) -> Path:
    """The fixture's build dir after a build, its codemodel record removed (so the reply
    is parsed again)."""
    r = build(project, tmp_path / "out", "--no-smoke")
    assert r.exit_code == 0, r.output
    (work,) = (cache_dir() / "work").glob("fixture-*")
    b = work / "build"
    (b / cm._CODEMODEL).unlink()
    assert cm.read_codemodel(b).names >= {"fixture-cli", "fixture-rpc-server"}  # as it is, it parses
    (b / cm._CODEMODEL).unlink()
    return b


def _reply(b: Path) -> Path:
    return b / ".cmake" / "api" / "v1" / "reply"


def _target_file(b: Path) -> Path:
    return next(_reply(b).glob("target-fixture-cli-*.json"))


def _refused(b: Path) -> BuildError:
    signal.alarm(10)
    with pytest.raises(BuildError) as e:
        cm.read_codemodel(b)
    signal.alarm(0)
    assert "--clean" in render(e.value)[1], e.value  # the advice is the CLI's
    assert "\n" not in render(e.value)[0]
    if e.value.problem is not None and not isinstance(e.value.problem, BuildDirStale):
        pass  # a read core.fs refused: its own problem
    elif e.value.problem is not None:
        assert e.value.problem.build_dir == b and e.value.problem.found == "unreadable-reply", e.value
    return e.value


def test_a_fifo_in_the_reply_does_not_block(built: Path) -> None:
    t = _target_file(built)
    t.unlink()
    os.mkfifo(t)
    _refused(built)


def test_a_link_in_the_reply_is_not_followed(built: Path, tmp_path: Path) -> None:
    t = _target_file(built)
    host = tmp_path / "host" / t.name
    host.parent.mkdir()
    shutil.move(t, host)  # a host file that is a valid reply file: still not read through the link
    t.symlink_to(host)
    _refused(built)


def test_a_json_file_outside_the_reply_is_not_read(built: Path, tmp_path: Path) -> None:
    t = _target_file(built)
    host = tmp_path / "host" / t.name
    host.parent.mkdir()
    shutil.copy(t, host)
    # the codemodel file names each target's file (jsonFile): name one outside the reply
    (naming,) = [f for f in _reply(built).glob("codemodel-v2-*.json") if f'"{t.name}"' in f.read_text()]
    original = naming.read_text()
    for elsewhere in (
        str(host),
        f"../reply/{t.name}",
        f"../../../../../{host.relative_to(built.parents[4])}",
    ):
        naming.write_text(original.replace(f'"{t.name}"', json.dumps(elsewhere)))
        _refused(built)


def test_a_linked_reply_folder_is_not_read(built: Path, tmp_path: Path) -> None:
    reply = _reply(built)
    host = tmp_path / "host-reply"
    shutil.move(reply, host)
    reply.symlink_to(host)
    _refused(built)
