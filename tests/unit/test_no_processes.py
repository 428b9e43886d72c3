"""tests/unit/conftest.py switches off every way of starting a process, with one clear message."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

posix = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process calls")

CALLS: list[tuple[str, Callable[[], object]]] = [
    ("subprocess.Popen", lambda: subprocess.run(["git", "status"], check=False)),
    ("subprocess.Popen", lambda: subprocess.check_output(["true"])),
    ("os.system", lambda: os.system("true")),
    ("os.popen", lambda: os.popen("true")),
]
POSIX_CALLS: list[tuple[str, Callable[[], object]]] = [
    ("os.fork", lambda: os.fork()),
    ("os.posix_spawn", lambda: os.posix_spawn("/bin/true", ["true"], {})),
    ("os.posix_spawnp", lambda: os.posix_spawnp("true", ["true"], {})),
    ("os.spawnv", lambda: os.spawnv(os.P_WAIT, "/bin/true", ["true"])),
]


@pytest.mark.parametrize(("name", "call"), CALLS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CALLS)])
def test_spawning_fails_and_says_where_the_test_belongs(name: str, call: Callable[[], object]) -> None:
    with pytest.raises(AssertionError) as e:
        call()
    assert str(e.value).startswith("unit tests must not spawn processes (got ")
    assert f" via {name}); put the test under tests/integration/" in str(e.value)


@posix
@pytest.mark.parametrize(("name", "call"), POSIX_CALLS, ids=[n for n, _ in POSIX_CALLS])
def test_posix_spawning_fails_too(name: str, call: Callable[[], object]) -> None:
    with pytest.raises(AssertionError, match=rf"unit tests must not spawn processes .* via {name}\)"):
        call()


@posix
def test_asyncio_subprocesses_are_refused() -> None:
    async def start() -> None:
        await asyncio.create_subprocess_exec("true")

    with pytest.raises(AssertionError, match="unit tests must not spawn processes"):
        asyncio.run(start())


@posix
def test_multiprocessing_fork_exec_is_refused() -> None:
    import _posixsubprocess

    with pytest.raises(AssertionError, match=r"via _posixsubprocess\.fork_exec"):
        _posixsubprocess.fork_exec()  # type: ignore[call-arg]


def test_the_message_names_the_command() -> None:
    with pytest.raises(AssertionError, match=r"\(got \(\['cmake', '--version'\],\) via subprocess\.Popen\)"):
        subprocess.run(["cmake", "--version"], check=False)
