"""The `patchkit` command: a thin click group.

Subcommands live in ``patchkit/cli/*.py``; each module lists its click
commands in ``COMMANDS``. ``_COMMANDS`` says which module holds which command, so a
run imports only the module of the command it runs (fast start). Only this module catches
``FatalError``: it prints one line (plus hint/detail) and exits with the error's
code. ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from patchkit import __version__
from patchkit.core.errors import FatalError
from patchkit.core.log import log
from patchkit.core.proc import install_signal_handlers
from patchkit.core.text import printable

__all__ = ["main"]


# command name -> module in patchkit.cli (tests check this against COMMANDS)
_COMMANDS = {
    "bench": "bench",
    "build": "build",
    "bump": "bump",
    "check": "check",
    "ci-template": "ci_template",
    "doctor": "doctor",
    "list": "list",
    "model": "model",
    "pe-info": "pe",
    "pe-stack": "pe",
    "plan": "plan",
    "rebuild": "rebuild",
    "refresh": "refresh",
    "release": "release",
    "root": "root",
    "rpc-probe": "rpc_probe",
    "series": "series",
    "smoke": "smoke",
    "verify": "verify",
}


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = _COMMANDS.get(cmd_name)
        if module is None:
            return None
        mod = importlib.import_module(f"patchkit.cli.{module}")
        command: click.Command = next(c for c in mod.COMMANDS if c.name == cmd_name)
        return command

    def resolve_command(self, ctx: click.Context, args: list[str]):  # type: ignore[no-untyped-def]
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in _COMMANDS:
            from patchkit.core.text import did_you_mean

            ctx.fail(f"No such command '{name}'{did_you_mean(name, _COMMANDS)}.")
        return super().resolve_command(ctx, args)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """click's main, with a bad command line as one line (+ a hint), exit 2."""
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as e:
            path = e.ctx.command_path if e.ctx is not None else "patchkit"
            log.error(e.format_message())
            log.console.print(
                f"hint: `{path} --help` lists the arguments and options", markup=False, style="cyan"
            )
            sys.exit(e.exit_code)
        except click.ClickException as e:
            log.error(e.format_message())
            sys.exit(e.exit_code)
        except click.Abort:
            log.error("interrupted")
            sys.exit(130)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context) -> object:
        debug = ctx.find_root().params.get("debug", False)
        try:
            return super().invoke(ctx)
        except FatalError as e:
            if debug:
                raise
            # an error's text often quotes input patchkit does not trust (archive members,
            # manifest fields, upstream subjects, a build log): shown with every control
            # character escaped, whichever command raised it
            from patchkit.cli.problems import render

            message, hint = render(e)  # a structured error's words are the CLI's
            log.error(printable(message))
            if e.detail:
                text = "\n".join(f"  │ {printable(ln)}" for ln in e.detail.splitlines())
                log.console.print(text, markup=False, highlight=False, style="dim")
            if hint:
                log.console.print(f"hint: {printable(hint)}", markup=False, style="cyan")
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            if debug:
                raise
            log.error("interrupted")
            sys.exit(130)
        except OSError as e:  # a file or program the OS refused: still one line
            if debug:
                raise
            where = f"{e.filename}: " if e.filename else ""
            log.error(printable(f"{where}{e.strerror or e}"))
            log.console.print("hint: rerun with --debug for the traceback", style="cyan")
            sys.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="patchkit")
@click.option(
    "--project",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder holding recipes/ and patches/ (default: found from the current "
    "directory, else the one patchkit ships).",
)
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.option("-v", "--verbose", is_flag=True, help="Say more.")
@click.pass_context
def main(ctx: click.Context, project: Path | None, debug: bool, verbose: bool) -> None:
    """Turn a pinned llama.cpp into patched, tested CUDA/RPC binaries."""
    install_signal_handlers()  # SIGTERM/SIGHUP: children stopped, lock released, exit 130
    log.verbose = verbose
    ctx.obj = {"project": project, "debug": debug}
