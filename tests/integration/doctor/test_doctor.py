"""`patchkit doctor` on this machine (real tools, real PATH)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from click.testing import CliRunner

from patchkit.cli import main
from tests.fixtures.cuda import (
    doctor_project,
)


def test_doctor_command_on_this_machine(tmp_path: Path) -> None:
    proj, _ = doctor_project(tmp_path)
    res = CliRunner().invoke(main, ["--project", str(proj), "doctor", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    v = {x["recipe"]: x for x in data["recipes"]}
    win = v["windows-cuda-pascal-ampere"]
    if sys.platform != "win32":
        assert not win["ok"]
        assert win["why"] == "windows recipe: needs MSVC on Windows; cannot build on Linux"
    lin = v["cuda-pascal-ampere"]
    version = data["cuda"]["version"]
    if version and int(version.split(".")[0]) >= 13:
        assert not lin["ok"] and "CUDA 13 dropped every sm below 75" in lin["why"]
    elif version is None:
        assert not lin["ok"] and "no CUDA toolkit found" in lin["why"]
