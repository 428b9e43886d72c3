"""Smoke checks on a real llama.cpp build made by patchkit.

Skipped unless PATCHKIT_REALBUILD points at a build output dir (out/<recipe>), e.g.
    PATCHKIT_REALBUILD=out/cpu-rpc python3 -m pytest -m realbuild
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from patchkit.smoke.checks import GUARD_PATCH, META_OT_PATCH
from patchkit.smoke.runner import run_smoke
from patchkit.spec.buildinfo import read_build_info

REAL = os.environ.get("PATCHKIT_REALBUILD")
pytestmark = [
    pytest.mark.realbuild,
    pytest.mark.skipif(not REAL, reason="set PATCHKIT_REALBUILD=out/<recipe> (a real build)"),
]


def test_real_build_smoke_matches_its_patches() -> None:
    out = Path(REAL or ".")
    info = read_build_info(out)
    patches = info.in_build
    tools = (Path(info.build_dir) / "bin",) if info.build_dir else ()
    report = run_smoke(out, env=dict(os.environ), tool_dirs=tools, record=False)
    st = {c.name: c for c in report.checks}
    assert st["version"].status == "pass", st["version"].why
    assert st["generate"].status == "pass", st["generate"].why
    # a check whose patch is in the build must pass; without it, upstream's failure shows
    for check, patch in (
        ("rpc-guard", GUARD_PATCH),
        ("tensor-split", GUARD_PATCH),
        ("meta-ot", META_OT_PATCH),
    ):
        if patch in patches:
            assert st[check].status in ("pass",) or "was not built" in st[check].why, st[check].why
        else:
            assert st[check].status == "skip" and "as expected" in st[check].why, st[check].why
    assert report.status == "passed"


def test_real_build_binaries_search_only_origin() -> None:
    """Every ELF file in bin/ has RUNPATH exactly $ORIGIN (or none) and no RPATH."""
    from patchkit.binary.elf import read_dynamic

    out = Path(REAL or ".")
    seen = 0
    for f in sorted((out / "bin").iterdir()):
        dyn = read_dynamic(f)
        if dyn is None:
            continue
        seen += 1
        assert dyn.runpath in ((), ("$ORIGIN",)) and dyn.rpath == (), (f.name, dyn)
    info = read_build_info(out)
    assert seen or info.platform.os == "windows"
