"""The `patchkit` command (and ``python -m patchkit``): a thin entry point.

Ctrl-C while Python is still importing the CLI exits 130 with one line, like Ctrl-C later.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    try:
        from patchkit.cli import main as cli_main
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    cli_main()


if __name__ == "__main__":
    main()
