"""Diagnostics and progress: steps with timing and ✓/✕, CI fold groups, warnings, errors.

They go to stderr through one rich Console. A command's result (a table, a report, the
lines a user pipes into grep, ``--json``) goes to stdout through ``patchkit.cli._common``'s
printer, never through this log, so stdout holds the result and nothing else.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator

from rich.console import Console

__all__ = ["Logger", "log"]


def _in_ci() -> str | None:
    if os.environ.get("GITHUB_ACTIONS") == "true":
        return "github"
    if os.environ.get("TF_BUILD"):
        return "azure"
    return None


class Logger:
    def __init__(self) -> None:
        self.console = Console(stderr=True, highlight=False, soft_wrap=True)
        if not self.console.is_terminal:  # logs and CI: no 80-column squeeze
            self.console.width = max(160, self.console.width)
        self.verbose = False

    def info(self, msg: str) -> None:
        self.console.print(msg, markup=False)

    def detail(self, msg: str) -> None:
        if self.verbose:
            self.console.print(f"  {msg}", markup=False, style="dim")

    def warning(self, msg: str) -> None:
        self.console.print(f"warning: {msg}", markup=False, style="yellow")

    def error(self, msg: str) -> None:
        self.console.print(f"error: {msg}", markup=False, style="bold red")

    @contextlib.contextmanager
    def step(
        self, name: str, key: str | None = None, *, on_time: Callable[[str, float], None] | None = None
    ) -> Iterator[None]:
        """Run a stage: fold it in CI, time it, end with ✓ or ✕.

        ``on_time(key, seconds)`` is told the duration (rounded to ms) when the stage ends,
        also when it fails; ``key`` defaults to ``name``. The logger keeps nothing.
        """
        ci = _in_ci()
        # fold markers go to stderr with the rest of the log: stdout stays clean for --json
        if ci == "github":
            print(f"::group::{name}", file=sys.stderr, flush=True)
        elif ci == "azure":
            print(f"##[group]{name}", file=sys.stderr, flush=True)
        self.console.print(f"[bold]▸ {name}[/bold]")
        start = time.perf_counter()
        ok = False
        try:
            yield
            ok = True
        finally:
            took = time.perf_counter() - start
            if on_time is not None:
                on_time(key or name, round(took, 3))
            if ci == "github":
                print("::endgroup::", file=sys.stderr, flush=True)
            elif ci == "azure":
                print("##[endgroup]", file=sys.stderr, flush=True)
            mark = "[green]✓[/green]" if ok else "[red]✕[/red]"
            self.console.print(f"{mark} {name} [dim]({took:.1f}s)[/dim]")


log = Logger()
