"""`patchkit rebuild --json`, byte for byte: one object per archive, in this key order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from patchkit.cli import main
from patchkit.cli import rebuild as rebuild_cli
from patchkit.rebuild.rebuild import ArchiveRebuild

SAME = ArchiveRebuild(archive="a.tar.gz", files=3, differs=(), tools=(), config=(), out_dir=None)
DIFF = ArchiveRebuild(
    archive="b.zip",
    files=2,
    differs=("bin/x: sha256 aa in the manifest, bb rebuilt",),
    tools=("cmake: 4.1.2 in the manifest, 4.2.0 here",),
    config=("GGML_NATIVE: OFF vs ON",),
    out_dir=Path("/k/rebuild-1"),
    expected="windows signing",
)


def test_rebuild_json_golden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "dist"
    target.mkdir()
    results = iter([SAME, DIFF])
    monkeypatch.setattr(rebuild_cli, "archives_of", lambda t: [t / "a.tar.gz", t / "b.zip"])
    monkeypatch.setattr(rebuild_cli, "rebuild_archive", lambda p, o, **kw: next(results))
    r = CliRunner().invoke(
        main, ["rebuild", str(target), "--json"], env={"PATCHKIT_CACHE": str(tmp_path / "c")}
    )
    want: list[dict[str, Any]] = [
        {
            "archive": "a.tar.gz",
            "identical": True,
            "files": 3,
            "differs": [],
            "tools": [],
            "config": [],
            "expected": "",
        },
        {
            "archive": "b.zip",
            "identical": False,
            "files": 2,
            "differs": ["bin/x: sha256 aa in the manifest, bb rebuilt"],
            "tools": ["cmake: 4.1.2 in the manifest, 4.2.0 here"],
            "config": ["GGML_NATIVE: OFF vs ON"],
            "expected": "windows signing",
        },
    ]
    assert r.stdout == json.dumps(want, indent=2) + "\n"
    assert r.exit_code == 15, r.output
