"""Unit tests spawn no process: every way of starting one is switched off here.

They may use files (tmp_path), threads and loopback sockets (the in-process fake RPC
server), never a child process; a test that needs git, a compiler, a fake binary or a
server process belongs under tests/integration/.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.fixtures.upstream import FixtureUpstream

try:
    import _posixsubprocess  # multiprocessing's spawn goes straight to its fork_exec
except ImportError:  # Windows
    _posixsubprocess = None

_MESSAGE = (
    "unit tests must not spawn processes (got {what!r} via {name}); put the test under tests/integration/"
)

# (module, attribute) of everything that starts a process
SPAWNERS: list[tuple[object, str]] = (
    [(subprocess, "Popen")]
    + [
        (os, name)
        for name in (
            "system",
            "popen",
            "fork",
            "forkpty",
            "posix_spawn",
            "posix_spawnp",
            "spawnl",
            "spawnle",
            "spawnlp",
            "spawnlpe",
            "spawnv",
            "spawnve",
            "spawnvp",
            "spawnvpe",
            "startfile",
        )
        if hasattr(os, name)
    ]
    + ([(_posixsubprocess, "fork_exec")] if _posixsubprocess is not None else [])
)


class _Forbidden:
    """Stands in for subprocess.Popen, os.system, os.fork...: calling it fails the test."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise AssertionError(_MESSAGE.format(what=args[:1], name=self.name))


class _ForbiddenPopen:
    """subprocess.Popen's stand-in (a class, so isinstance/subclass checks still work)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise AssertionError(_MESSAGE.format(what=args[:1], name="subprocess.Popen"))


@pytest.fixture(autouse=True)
def _no_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    for module, name in SPAWNERS:
        stand_in = _ForbiddenPopen if name == "Popen" else _Forbidden(f"{module.__name__}.{name}")
        monkeypatch.setattr(module, name, stand_in)


@pytest.fixture(scope="session")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> FixtureUpstream:
    """No git repository for unit tests: an upstream that only names a path and commits, so
    a recipe can point at it (``project``). Anything that would clone it is integration."""
    return FixtureUpstream(
        path=tmp_path_factory.mktemp("no-upstream") / "upstream",
        commits={"c1": "1" * 40, "c2": "2" * 40, "c3": "3" * 40},
        tag="v2",
    )


@pytest.fixture(scope="session")
def drift() -> None:
    pytest.fail("the drift upstream is a git repository: tests that use it belong under tests/integration/")
