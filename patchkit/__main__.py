"""The `patchkit` command (and ``python -m patchkit``): a thin entry point.

Its first lines decide what a signal means until the command itself starts anything: a
Ctrl-C (or SIGTERM, SIGHUP) then prints one line and exits 130 at once, wherever it lands
(importing click, rich and the command's modules, click's own start), because there is
nothing to stop or clean up yet. The CLI replaces that with ``core.proc``'s handlers
(children stopped, lock released, exit 130) before any command runs. A KeyboardInterrupt
that still reaches here is the same one line and exit 130.

This module imports only what the interpreter has built in (``sys``, ``_signal``, ``posix``)
before the handler is in place: importing ``os`` or ``signal`` first would be a window of
milliseconds. What runs before its first line is Python's: its startup (``site``, a
machine's ``.pth`` files) and the console script's own ``import re``; a Ctrl-C there kills
the process with SIGINT, which a shell reports as exit 130 too.
"""

import sys

try:  # the C module: `signal` itself builds enums on import
    import _signal as _signals  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # not CPython
    import signal as _signals  # type: ignore[no-redef, unused-ignore]

__all__ = ["main"]


def _stop_now(signum: int, frame: object) -> None:
    """Before any command started anything: one line, exit 130, nothing to clean up."""
    try:
        import posix as _os  # built in: usable even while `os` is half imported
    except ImportError:  # Windows
        import nt as _os  # type: ignore[import-not-found, no-redef, unused-ignore]
    try:
        _os.write(2, b"error: interrupted\n")
    finally:
        _os._exit(130)


def _early_signals() -> None:
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK"):
        sig = getattr(_signals, name, None)
        if sig is not None:
            try:
                _signals.signal(sig, _stop_now)
            except (OSError, ValueError):  # ValueError: not the main thread
                pass


def main() -> None:
    _early_signals()
    try:
        from patchkit.cli import main as cli_main

        cli_main()
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
