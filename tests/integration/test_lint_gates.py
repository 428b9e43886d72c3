"""The house rules ruff enforces (pyproject.toml): no relative imports (TID252); processes
only through core.proc and the process environment read only by the CLI, core.environ,
core.paths, core.log and git.runner (TID251, banned APIs with per-file allowances). These
run ruff on snippets named as files of each package, so a rule dropped from the config (or
an allowance that grew) fails here, not only in a review."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.fixtures.paths import REPO

PACKAGES = ["bench", "binary", "builder", "doctor", "git", "plan", "rebuild", "release", "rpc"]
PACKAGES += ["smoke", "spec", "upkeep", "weights", "core"]

SPAWN = "import subprocess\n\nsubprocess.run(['true'], check=False)\n"
ENVIRON = "import os\n\nA = os.environ.get('A')\n"
GETENV = "import os\n\nA = os.getenv('A')\n"
RELATIVE = "from .x import y\n\nprint(y)\n"


def _ruff(filename: str, source: str) -> str:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            "--output-format",
            "concise",
            "--select",
            "TID",
            "--stdin-filename",
            filename,
            "-",
        ],
        input=source,
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        timeout=120,
    )
    return r.stdout + r.stderr


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_may_not_spawn_or_read_the_environment(package: str) -> None:
    name = f"patchkit/{package}/example.py"
    assert "TID251" in _ruff(name, SPAWN) and "core.proc" in _ruff(name, SPAWN)
    assert "TID251" in _ruff(name, ENVIRON) and "TID251" in _ruff(name, GETENV)
    assert "TID252" in _ruff(name, RELATIVE)


@pytest.mark.parametrize(
    ("filename", "source"),
    [
        ("patchkit/cli/example.py", ENVIRON),
        ("patchkit/core/proc.py", SPAWN),
        ("patchkit/core/environ.py", ENVIRON),
        ("patchkit/core/paths.py", ENVIRON),
        ("patchkit/git/runner.py", ENVIRON),
    ],
)
def test_the_allowed_modules_may(filename: str, source: str) -> None:
    assert "TID251" not in _ruff(filename, source)
