"""Release from a real fixture build: archive contents, reproducibility, verify."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from tests.fixtures.project import invoke


def test_build_release_verify_reproducible(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "fixture"
    r = invoke(project, "build", "fixture", "--out", str(out), "-j", "2")
    assert r.exit_code == 0, r.output
    assert json.loads((out / "build-info.json").read_text())["smoke"]["status"] == "passed"
    sums = []
    for n in (1, 2):
        dist = tmp_path / f"dist{n}"
        r = invoke(project, "release", "fixture", "--build-dir", str(out), "--out", str(dist))
        assert r.exit_code == 0, r.output
        (archive,) = dist.glob("*.tar.gz")
        sums.append((archive.name, (dist / "SHA256SUMS").read_text()))
        r = invoke(project, "verify", str(dist))
        assert r.exit_code == 0, r.output
    assert sums[0] == sums[1]  # byte-identical archives from the same build
    name = sums[0][0]
    assert name.startswith("llama-") and "-pk" in name and name.endswith("-linux-x86_64-fixture.tar.gz")
    with tarfile.open(tmp_path / "dist1" / name) as tf:
        names = tf.getnames()
    stem = name.removesuffix(".tar.gz")
    assert f"{stem}/bin/fixture-cli" in names
    assert f"{stem}/LICENSE" in names and f"{stem}/manifest.json" in names
    assert any("libfixture-core.so" in n for n in names)
