"""The CLI's command table and its error handling."""

from __future__ import annotations

import importlib
import pkgutil

from click.testing import CliRunner

import patchkit.cli as commands_pkg
from patchkit.cli import _COMMANDS, main


def test_every_command_module_is_registered() -> None:
    found = {}
    for info in pkgutil.iter_modules(commands_pkg.__path__):
        mod = importlib.import_module(f"patchkit.cli.{info.name}")
        for cmd in getattr(mod, "COMMANDS", ()):
            found[cmd.name] = info.name
    assert found == _COMMANDS


def test_help_lists_all_and_unknown_command_suggests() -> None:
    r = CliRunner().invoke(main, ["--help"])
    assert r.exit_code == 0
    for name in _COMMANDS:
        assert name in r.output
    r = CliRunner().invoke(main, ["biuld"])
    assert r.exit_code == 2
    assert "No such command 'biuld'" in r.output and "build" in r.output
