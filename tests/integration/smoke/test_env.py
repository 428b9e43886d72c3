"""smoke.env.SmokeEnv.run with real processes: the build's environment, the launcher, the
time limit, and a binary that cannot start as a result (exit 127), never an exception."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from patchkit.smoke.env import SmokeEnv
from patchkit.spec.buildinfo import BuildInfo
from tests.fixtures.buildinfo import build_info_json

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX scripts")


def make_env(tmp_path: Path, **kw: object) -> SmokeEnv:
    out = tmp_path / "out"
    (out / "bin").mkdir(parents=True)
    data = build_info_json()
    (out / "build-info.json").write_text(json.dumps(data))
    return SmokeEnv(
        out_dir=out,
        info=BuildInfo.from_json(data),
        workdir=tmp_path / "work",
        timeout=kw.pop("timeout", 10),
        base_env=kw.pop("base_env", dict(os.environ)),
        **kw,
    )  # type: ignore[arg-type]


def script(env: SmokeEnv, name: str, body: str, mode: int = 0o755) -> Path:
    path = env.out_dir / "bin" / name
    path.write_text(f"#!{sys.executable}\n{body}\n")
    path.chmod(mode)
    return path


def test_runs_with_the_builds_environment_and_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FROM_OUTSIDE", "not this process's")  # the caller's environment counts
    env = make_env(
        tmp_path,
        base_env={**os.environ, "FROM_OUTSIDE": "kept", "LD_LIBRARY_PATH": "/usr/lib"},
        env={"LD_LIBRARY_PATH": "/opt/cuda/lib64"},  # the build's, over the caller's
    )
    tool = script(
        env,
        "llama-cli",
        "import os, sys\nprint(os.environ['LD_LIBRARY_PATH'], os.environ['FROM_OUTSIDE'], *sys.argv[1:])",
    )
    assert env.exe("llama-cli") == tool
    r = env.run(tool, "--version")
    assert r.ok and r.stdout == "/opt/cuda/lib64 kept --version\n"


def test_the_launcher_comes_first(tmp_path: Path) -> None:
    launcher = tmp_path / "fake-wine"
    launcher.write_text(f"#!{sys.executable}\nimport sys\nprint('launched', *sys.argv[1:])\n")
    launcher.chmod(0o755)
    env = make_env(tmp_path, launcher=(str(launcher),))
    exe = env.out_dir / "bin" / "llama-cli.exe"
    exe.write_bytes(b"MZ")
    assert env.run(exe, "-h").stdout == f"launched {exe} -h\n"


def test_a_binary_that_cannot_start_is_exit_127(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    tool = script(env, "llama-cli", "print('never')", mode=0o644)  # no exec bit
    r = env.run(tool, "--version")
    assert (r.returncode, r.brief()) == (127, "exit 127")
    assert r.stderr == f"cannot run {tool}: Permission denied"


def test_the_time_limit(tmp_path: Path) -> None:
    env = make_env(tmp_path, timeout=0.3)
    tool = script(env, "slow", "import time\ntime.sleep(30)")
    start = time.monotonic()
    r = env.run(tool)
    assert r.returncode is None and r.brief().startswith("timed out")
    assert time.monotonic() - start < 5
    assert env.run(tool, timeout=0.2).seconds < 5  # a per-call limit overrides it
