"""`build --configure-only` (a recipe configures at its pin, nothing compiled) and the RPC
protocol a build records: read from ggml/include/ggml-rpc.h at build time."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixtures.drift import RPC_HEADER_FMT
from tests.fixtures.project import build, write_recipe
from tests.fixtures.upstream import commit_files, git, make_upstream


def test_configure_only_builds_nothing(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = build(project, out, "--configure-only")
    assert res.exit_code == 0, res.output
    assert "configured in" in res.stderr and "nothing built" in res.stderr
    assert not out.exists()
    build_dir = Path(res.stderr.split("configured in ")[1].split(": ", 1)[1].split("/ (")[0])
    assert (build_dir / "CMakeCache.txt").is_file()
    assert not (build_dir / "bin" / "fixture-cli").exists()


def test_build_records_the_rpc_protocol_of_its_source(tmp_path: Path) -> None:
    up = make_upstream(tmp_path / "up")
    v51 = commit_files(up.path, {"ggml/include/ggml-rpc.h": RPC_HEADER_FMT.format(5, 1)}, "rpc: protocol 5.1")
    proj = tmp_path / "project"
    (proj / "patches").mkdir(parents=True)
    (proj / "recipes").mkdir()
    (proj / "patches" / "series").write_text("")
    write_recipe(proj, "rpc", url=str(up.path), commit=v51, extra="GGML_RPC = true\n")
    write_recipe(proj, "norpc", url=str(up.path), commit=v51)  # not an RPC build
    old = git(up.path, "rev-parse", "HEAD~1")
    write_recipe(proj, "old", url=str(up.path), commit=old, extra="GGML_RPC = true\n")
    for name, want in (("rpc", "5.1.0"), ("norpc", None), ("old", None)):
        out = tmp_path / f"out-{name}"
        res = build(proj, out, "--no-smoke", recipe=name)
        assert res.exit_code == 0, res.output
        info = json.loads((out / "build-info.json").read_text())
        assert info.get("rpc_protocol") == want, name
