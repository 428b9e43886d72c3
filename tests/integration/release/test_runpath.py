"""`patchkit release` / `patchkit verify` on real ELF files linked with a bad search path
(`$ORIGIN:`, an absolute folder): release refuses (exit 12), verify names the member."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from patchkit.cli import main
from patchkit.release import contents as release_contents
from tests.fixtures.elf import put_artifact
from tests.fixtures.release import do_release, make_build

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or shutil.which("cc") is None, reason="ELF binaries and a C compiler (Linux)"
)

CASES = [
    ("$ORIGIN:", "RUNPATH entry '': empty entry (the loader reads it as the current directory)"),
    (
        "$ORIGIN:/opt/build-host/venv/nvidia/cu13/lib",
        "RUNPATH entry '/opt/build-host/venv/nvidia/cu13/lib': absolute path",
    ),
]


def linked_lib(tmp_path: Path, runpath: str) -> bytes:
    src = tmp_path / "ggml.c"
    src.write_text("int ggml_answer(void) { return 42; }\n")
    lib = tmp_path / "libggml.so"
    res = subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(lib), str(src), f"-Wl,--enable-new-dtags,-rpath,{runpath}"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    return lib.read_bytes()


@pytest.mark.parametrize(("runpath", "message"), CASES)
def test_release_refuses_and_verify_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runpath: str, message: str
) -> None:
    build = make_build(tmp_path)
    put_artifact(build, "bin/libggml.so", linked_lib(tmp_path, runpath))
    dist = tmp_path / "dist"
    runner = CliRunner()
    res = runner.invoke(main, ["release", "--build-dir", str(build), "--out", str(dist)])
    assert res.exit_code == 12, res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"error: bin/libggml.so: {message}"), res.output
    assert "Traceback" not in res.output and not dist.exists()

    # an archive made without that check (an older patchkit): verify names the member
    monkeypatch.setattr(release_contents, "_refuse_bad_runpath", lambda path, rel: None)
    r = do_release(build, dist)
    res = runner.invoke(main, ["verify", str(dist)])
    assert res.exit_code == 12, res.output
    assert f"{r.archive.name}: bin/libggml.so: {message}" in res.output
    assert "1 difference" in res.output
