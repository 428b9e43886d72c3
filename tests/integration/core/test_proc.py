"""core.proc with real processes: timeouts stop whole process groups, start errors,
streaming to a log, background servers."""

from __future__ import annotations

import sys
from pathlib import Path


def test_command_timeout_is_reported(tmp_path: Path) -> None:
    from patchkit.core.proc import run

    r = run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert r.returncode is None and "timed out" in r.brief()
