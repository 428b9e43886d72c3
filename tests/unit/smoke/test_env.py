"""smoke.env.SmokeEnv: where a check finds its tools and how it would run them (nothing is
run here; tests/integration/smoke/test_env.py runs them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkit.smoke.env import SmokeEnv
from patchkit.spec.buildinfo import BuildInfo
from tests.fixtures.buildinfo import build_info_json, patch_json

ARTIFACTS = [
    {"target": "llama-cli", "type": "EXECUTABLE", "path": "bin/llama-cli", "sha256": "0" * 64, "size": 1},
    {"target": "ggml", "type": "SHARED_LIBRARY", "path": "bin/libggml.so", "sha256": "0" * 64, "size": 1},
    {
        "target": "ggml-rpc-server",
        "type": "EXECUTABLE",
        "path": "bin/ggml-rpc-server",
        "sha256": "0" * 64,
        "size": 1,
    },
]


BASE = {"PATH": "/usr/bin", "HOME": "/home/someone"}  # what a caller passes: its environment


def make_env(root: Path, *, os_name: str = "linux", **kw: object) -> SmokeEnv:
    out = root / "out"
    (out / "bin").mkdir(parents=True, exist_ok=True)
    data = build_info_json(
        artifacts=ARTIFACTS,
        platform={"os": os_name, "arch": "x86_64"},
        patches=[patch_json("guard"), patch_json("meta", "already-present")],
    )
    (out / "build-info.json").write_text(json.dumps(data))
    return SmokeEnv(
        out_dir=out,
        info=BuildInfo.from_json(data),
        workdir=root / "work",
        timeout=5,
        base_env=BASE,
        **kw,  # type: ignore[arg-type]
    )


def test_exe_looks_in_bin_then_the_tool_dirs(tmp_path: Path) -> None:
    tools = tmp_path / "build" / "bin"
    tools.mkdir(parents=True)
    env = make_env(tmp_path, tool_dirs=(tools,))
    assert env.exe("llama-cli") is None  # listed, but not there
    (env.out_dir / "bin" / "llama-cli").write_text("")
    (tools / "llama-cli").write_text("")
    (tools / "test-llama-archs").write_text("")
    assert env.exe("llama-cli") == env.out_dir / "bin" / "llama-cli"  # the output first
    assert env.exe("test-llama-archs") == tools / "test-llama-archs"
    (env.out_dir / "bin" / "a-folder").mkdir()
    assert env.exe("a-folder") is None


def test_windows_builds_add_exe_and_run_through_the_launcher(tmp_path: Path) -> None:
    env = make_env(tmp_path, os_name="windows", launcher=("/usr/lib/wine/wine64",))
    assert env.windows
    (env.out_dir / "bin" / "llama-cli").write_text("")
    assert env.exe("llama-cli") is None
    (env.out_dir / "bin" / "llama-cli.exe").write_text("")
    exe = env.exe("llama-cli")
    assert exe == env.out_dir / "bin" / "llama-cli.exe"
    assert env.cmd(exe, "--version") == ["/usr/lib/wine/wine64", str(exe), "--version"]


def test_executables_patches_and_no_reference(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    assert not env.windows and env.cmd(Path("/x/tool"), "-h") == ["/x/tool", "-h"]
    assert env.executables() == [env.out_dir / "bin/llama-cli", env.out_dir / "bin/ggml-rpc-server"]
    assert env.patches == {"guard", "meta"}
    assert env.reference_env() is None


def test_the_reference_runs_natively_in_the_same_workdir(tmp_path: Path) -> None:
    ref = make_env(tmp_path / "ref")
    env = make_env(
        tmp_path / "win",
        os_name="windows",
        launcher=("wine64",),
        env={"WINEDEBUG": "-all"},
        tool_dirs=(tmp_path,),
        reference=ref.out_dir,
    )
    other = env.reference_env()
    assert other is not None
    assert (other.out_dir, other.workdir, other.timeout) == (ref.out_dir, env.workdir, env.timeout)
    assert (other.launcher, other.env, other.tool_dirs, other.reference) == ((), {}, (), None)
    assert not other.windows and other.info == ref.info
    # the build's environment over the caller's; the reference runs with the caller's alone
    assert env.run_env == {**BASE, "WINEDEBUG": "-all"}
    assert other.run_env == BASE


def test_a_missing_reference_is_a_one_line_error(tmp_path: Path) -> None:
    from patchkit.core.errors import ConfigError

    env = make_env(tmp_path, reference=tmp_path / "nope")
    with pytest.raises(ConfigError, match="no finished build: .*nope does not exist"):
        env.reference_env()
