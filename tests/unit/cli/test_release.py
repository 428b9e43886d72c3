"""`patchkit release` and `patchkit verify` from the command line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from patchkit.cli import main
from tests.fixtures.release import (
    make_build,
    project_build,
)

# ---------------------------------------------------------------- CLI


def test_cli_release_and_verify(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build = make_build(tmp_path, smoke="failed")
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    runner = CliRunner()
    dist = tmp_path / "dist"
    res = runner.invoke(main, ["release", "--build-dir", str(build), "--out", str(dist)])
    assert res.exit_code == 12 and "smoke stage failed" in res.output and "Traceback" not in res.output
    res = runner.invoke(
        main, ["release", "--build-dir", str(build), "--out", str(dist), "--allow-unsmoked", "--json"]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)  # stdout holds the JSON alone: the lines went to stderr
    assert out["waivers"] == ["unsmoked"] and out["archive"].endswith("-cpu-rpc.tar.gz")
    assert f"{out['archive']}  sha256 {out['sha256']}" in res.stderr
    res = runner.invoke(main, ["verify", str(dist)])
    assert res.exit_code == 0, res.output
    assert res.stderr == "" and res.stdout == (  # the result on stdout, then each floor
        f"{dist}: 1 archive(s) match SHA256SUMS, their manifests and provenance\n"
        f"{Path(out['archive']).name}: C library floor no versioned symbols (no floor stated); "
        "from the system: libc.so.6\n"
    )
    res = runner.invoke(main, ["verify", str(dist), "--json"])
    assert res.exit_code == 0, res.output
    ok = json.loads(res.stdout)
    assert set(ok) == {"schema", "directory", "ok", "archives", "images", "differences"}
    assert ok["schema"] == 1 and ok["ok"] is True and ok["differences"] == [] and len(ok["archives"]) == 1
    assert "1 archive(s) match" in res.stderr  # the line goes with the log
    Path(out["manifest"]).write_text("{}\n")
    res = runner.invoke(main, ["verify", str(dist)])
    assert res.exit_code == 12
    diffs = res.stdout.splitlines()  # one line per difference on stdout, the error on stderr
    assert len(diffs) == 2 and all(d.startswith(Path(out["manifest"]).name) for d in diffs)
    assert res.stderr.splitlines() == [f"error: {dist}: 2 differences"]
    res = runner.invoke(main, ["verify", str(dist), "--json"])
    assert res.exit_code == 12
    assert "2 differences" in res.stderr
    data = json.loads(res.stdout)
    assert data["ok"] is False and data["differences"] == diffs
    assert all(d in res.stderr for d in diffs)  # with --json the error's detail keeps them


def test_cli_release_by_recipe_finds_out_dir(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    res = runner.invoke(main, ["--project", str(project), "release", "fixture"])
    assert res.exit_code == 12
    assert "no finished build" in res.output and "patchkit build" in res.output
    project_build(project, tmp_path)  # writes tmp_path/b/out/fixture
    shutil.move(tmp_path / "b" / "out", tmp_path / "out")
    res = runner.invoke(main, ["--project", str(project), "release", "fixture"])
    assert res.exit_code == 0, res.output
    (archive,) = (tmp_path / "dist").glob("llama-*-fixture.tar.gz")
    # the files it wrote are the result, on stdout; the steps, the import check: stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith(f"{Path('dist') / archive.name}  sha256 ") and len(lines[0].split()[-1]) == 64
    assert lines[1:] == [f"{archive.name.removesuffix('.tar.gz')}.intoto.json  (provenance)"]
    assert "import check: every library resolves" in res.stderr and "sha256" not in res.stderr
