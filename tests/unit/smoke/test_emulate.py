"""smoke.emulate: qemu's model list and warnings (REAL qemu 7.2 output), ggml's load line,
the variant a CPU model should load, and the one-line errors of --cpu."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.core.errors import ConfigError, ToolMissing
from patchkit.core.proc import RunResult
from patchkit.smoke import emulate
from tests.fixtures.paths import FIXTURES

QEMU = FIXTURES / "data" / "qemu"


def _help() -> str:
    return (QEMU / "cpu-help-7.2.txt").read_text()


def test_qemu_models_are_read_from_its_own_list() -> None:
    models = emulate.qemu_models(_help())
    assert {"Nehalem", "SandyBridge", "Haswell", "Skylake-Server", "EPYC-Milan", "qemu64"} <= set(models)
    assert "Available" not in models and "CPUs:" not in models and len(models) > 100


def test_the_loaded_variant_from_ggml_linux_windows_and_none() -> None:
    linux = "load_backend: loaded RPC backend from /opt/llama/bin/libggml-rpc.so\n" + (
        "load_backend: loaded CPU backend from /opt/llama/bin/libggml-cpu-sandybridge.so\n"
    )
    assert emulate.loaded_variant(linux) == "sandybridge"
    win = r"load_backend: loaded CPU backend from Z:\work\out\bin\ggml-cpu-haswell.dll"
    assert emulate.loaded_variant(win) == "haswell"
    assert emulate.loaded_variant("load_backend: loaded RPC backend from ./libggml-rpc.so") is None
    assert emulate.loaded_variant("") is None


def test_what_qemu_cannot_emulate_lowers_the_expected_variant() -> None:
    said = (QEMU / "skylake-server-7.2.txt").read_text()
    lost = emulate.unemulated_features(said)
    assert {"avx512f", "avx512vl", "pcid"} <= set(lost) and "avx2" not in lost
    built = ("x64", "sse42", "sandybridge", "haswell", "skylakex")
    # the table says skylakex for a Skylake-SP; qemu gives it no AVX-512, so ggml picks haswell
    assert emulate.expected_variant("Skylake-Server", built, lost) == (True, "haswell", ("AVX512",))
    assert emulate.expected_variant("Skylake-Server", built, ()) == (True, "skylakex", ())
    assert emulate.expected_variant("SandyBridge", built, ()) == (True, "sandybridge", ())
    assert emulate.expected_variant("Nehalem", ("x64", "haswell"), ()) == (True, "x64", ())
    assert emulate.expected_variant("Haswell", ("sandybridge",), ()) == (True, "sandybridge", ())
    assert emulate.expected_variant("Haswell-v4", built, ()) == (False, None, ())  # not in the table


def _qemu_help(args, **kw) -> RunResult:
    assert args[1:] == ["-cpu", "help"]
    return RunResult(args=tuple(args), returncode=0, stdout=_help(), stderr="", seconds=0.1)


def _find(model: str, **kw):
    opts = {
        "os_name": "linux",
        "arch": "x86_64",
        "env": {},
        "which": lambda name: f"/usr/bin/{name}",
        "machine": "x86_64",
        "run_": _qemu_help,
    }
    opts.update(kw)
    return emulate.find_emulation(model, **opts)


def test_find_emulation_runs_the_build_under_qemu_as_the_model() -> None:
    em = _find("SandyBridge")
    assert em.launcher == ("/usr/bin/qemu-x86_64", "-cpu", "SandyBridge")
    assert em.describe() == "qemu -cpu SandyBridge"
    static = _find("Haswell", which=lambda n: "/usr/bin/qemu-x86_64-static" if n.endswith("static") else None)
    assert static.qemu == "/usr/bin/qemu-x86_64-static"


@pytest.mark.parametrize(
    ("kw", "model", "error", "words"),
    [
        ({"os_name": "windows"}, "Haswell", ConfigError, "this build is windows x86_64"),
        ({"arch": "aarch64"}, "Haswell", ConfigError, "this build is linux aarch64"),
        ({"machine": "aarch64"}, "Haswell", ConfigError, "needs an x86_64 machine"),
        ({"which": lambda n: None}, "Haswell", ToolMissing, "needs qemu-x86_64"),
        ({}, "Sandybridge", ConfigError, "is not a CPU model qemu knows"),
        ({}, "--help", ConfigError, "is not a CPU model qemu knows"),
    ],
)
def test_find_emulation_refuses_in_one_line(kw: dict, model: str, error: type, words: str) -> None:
    with pytest.raises(error) as e:
        _find(model, **kw)
    assert words in str(e.value) and "\n" not in str(e.value) and e.value.hint


def test_a_wrong_case_model_name_gets_the_right_one_as_hint() -> None:
    with pytest.raises(ConfigError) as e:
        _find("sandybridge")
    assert e.value.hint == "did you mean SandyBridge?"


def test_a_qemu_that_lists_nothing_is_a_missing_tool(tmp_path: Path) -> None:
    def broken(args, **kw) -> RunResult:
        return RunResult(args=tuple(args), returncode=127, stdout="", stderr="exec failed", seconds=0.0)

    with pytest.raises(ToolMissing, match="listed no CPU models"):
        _find("Haswell", run_=broken)
