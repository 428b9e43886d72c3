"""Release names from a build-info's fields (release.names)."""

from __future__ import annotations

import json
from pathlib import Path

from patchkit.release.names import archive_name, variant_name
from tests.fixtures.release import (
    make_build,
)

# ---------------------------------------------------------------- naming


def test_names_cpu_cuda_windows(tmp_path: Path) -> None:
    cpu = json.loads((make_build(tmp_path / "a") / "build-info.json").read_text())
    assert archive_name(cpu) == ("llama-82bb485-pk5f3c2a1b-linux-x86_64-cpu-rpc", ".tar.gz")
    cu = json.loads((make_build(tmp_path / "b", name="cuda-pascal-ampere", cuda=True)
                     / "build-info.json").read_text())
    assert variant_name(cu) == "cuda12-sm60-61-75-86"  # sorted, from the build's archs
    assert archive_name(cu)[0] == "llama-82bb485-pk5f3c2a1b-linux-x86_64-cuda12-sm60-61-75-86"
    win = json.loads((make_build(tmp_path / "c", name="win-cuda", os_name="windows", cuda=True)
                      / "build-info.json").read_text())
    assert archive_name(win) == ("llama-82bb485-pk5f3c2a1b-windows-x86_64-cuda12-sm60-61-75-86",
                                 ".zip")


def test_variant_reads_arch_spellings() -> None:
    info = {"recipe": {"name": "x"}, "tools": {"nvcc": "Cuda compilation tools, release 13.0"},
            "cuda": {"archs": ["86-real", "sm_75", "120a-real", "75-virtual"], "nvcc": None}}
    assert variant_name(info) == "cuda13-sm75-86-120a"
