"""A Windows cross build of the fixture upstream with mingw-w64: PE stack edits in the
output, recorded in build-info.json, verified with an independent reader (objdump)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from patchkit.binary.pe_stack import pe_info
from patchkit.cli import main
from tests.fixtures.paths import REPO
from tests.fixtures.project import write_recipe
from tests.fixtures.upstream import FixtureUpstream

pytestmark = [
    pytest.mark.skipif(
        shutil.which("x86_64-w64-mingw32-gcc-posix") is None,
        reason="mingw-w64 is not installed (apt-get install g++-mingw-w64-x86-64)",
    ),
]
ROOT = REPO


def test_windows_cross_build_edits_rpc_client_stacks(
    project: Path, upstream: FixtureUpstream, tmp_path: Path
) -> None:
    (project / "toolchains").mkdir()
    for f in (ROOT / "toolchains").iterdir():
        shutil.copy(f, project / "toolchains" / f.name)
    write_recipe(
        project,
        "fixture",
        url=str(upstream.path),
        commit=upstream.head,
        extra=(
            'BUILD_SHARED_LIBS = false\n\n[platform]\nos = "windows"\n\n'
            '[windows]\nstack_reserve = "256MiB"\nrpc_clients = ["fixture-cli"]\n'
        ),
    )
    recipe = project / "recipes" / "fixture.toml"
    recipe.write_text(
        recipe.read_text().replace(
            "[build]\n", '[build]\ntoolchain = "toolchains/mingw-w64-x86_64.cmake"\n', 1
        )
    )
    out = tmp_path / "out"
    r = CliRunner().invoke(
        main,
        ["--project", str(project), "build", "fixture", "--out", str(out), "-j", "2"],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    info = json.loads((out / "build-info.json").read_text())
    assert info["pe_edits"] == [
        {
            "file": "bin/fixture-cli.exe",
            "before": {"stack_reserve": 2 * 1024 * 1024, "stack_commit": 4096},
            "after": {"stack_reserve": 256 * 1024 * 1024, "stack_commit": 4096},
        }
    ]
    cli, server = out / "bin" / "fixture-cli.exe", out / "bin" / "fixture-rpc-server.exe"
    assert pe_info(cli).stack_reserve == 256 * 1024 * 1024 and pe_info(cli).checksum_ok
    assert pe_info(server).stack_reserve == 2 * 1024 * 1024  # not an RPC client: untouched
    dump = subprocess.run(
        ["x86_64-w64-mingw32-objdump", "-p", str(cli)], capture_output=True, text=True, check=True
    ).stdout
    assert "SizeOfStackReserve\t0000000010000000" in dump
    # the hashes in build-info are of the edited files
    from patchkit.core.fs import sha256_file

    art = {a["path"]: a for a in info["artifacts"]}
    assert art["bin/fixture-cli.exe"]["sha256"] == sha256_file(cli)
    # the smoke stage ran the exes under wine (or said why not)
    assert info["smoke"]["status"] in ("passed", "skipped")
