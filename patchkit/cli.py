"""The `patchkit` command: a thin click group.

Subcommands live in ``patchkit/commands/*.py``; each module lists its click
commands in ``COMMANDS`` and is picked up here. Only this module catches
``FatalError``: it prints one line (plus hint/detail) and exits with the error's
code. ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

import click

from patchkit import __version__
from patchkit.errors import FatalError
from patchkit.log import log

__all__ = ["main"]


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> object:
        debug = ctx.find_root().params.get("debug", False)
        try:
            return super().invoke(ctx)
        except FatalError as e:
            if debug:
                raise
            log.error(e.message)
            if e.detail:
                text = "\n".join(f"  │ {ln}" for ln in e.detail.splitlines())
                log.console.print(text, markup=False, highlight=False, style="dim")
            if e.hint:
                log.console.print(f"hint: {e.hint}", markup=False, style="cyan")
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            if debug:
                raise
            log.error("interrupted")
            sys.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="patchkit")
@click.option("--project", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder holding recipes/ and patches/ (default: found from the current "
                   "directory, else the one patchkit ships).")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.option("-v", "--verbose", is_flag=True, help="Say more.")
@click.pass_context
def main(ctx: click.Context, project: Path | None, debug: bool, verbose: bool) -> None:
    """Turn a pinned llama.cpp into patched, tested CUDA/RPC binaries."""
    log.verbose = verbose
    ctx.obj = {"project": project, "debug": debug}


def _register() -> None:
    import patchkit.commands as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{pkg.__name__}.{info.name}")
        for cmd in getattr(module, "COMMANDS", ()):
            main.add_command(cmd)


_register()
