"""--check-memory and --calibrate/--verify against stand-in llama-cli / llama-bench
processes (python scripts that print what the real ones print at the pin)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

from click.testing import CliRunner

from patchkit.cli import main
from tests.unit.plan.shapes import dense

FAKE_CLI = r"""#!{py}
import json, sys
from pathlib import Path
cfg = json.loads(Path(__file__).with_name("fake-plan.json").read_text())
Path(__file__).with_name("argv.txt").write_text("\n".join(sys.argv[1:]))
for line in cfg["log"]:
    print(line, file=sys.stderr)
print("hi")
"""

FAKE_BENCH = r"""#!{py}
import json, sys
from pathlib import Path
cfg = json.loads(Path(__file__).with_name("fake-plan.json").read_text())
with Path(__file__).with_name("bench-argv.txt").open("a") as f:
    f.write(" ".join(sys.argv[1:]) + "\n")
print(json.dumps([
    {"n_prompt": 512, "n_gen": 0, "avg_ts": cfg["pp"]},
    {"n_prompt": 0, "n_gen": 32, "avg_ts": cfg["tg"]},
]))
"""


def _bin(tmp_path: Path, cfg: dict) -> Path:
    b = tmp_path / "bin"
    b.mkdir()
    for name, body in (("llama-cli", FAKE_CLI), ("llama-bench", FAKE_BENCH)):
        p = b / name
        p.write_text(body.replace("{py}", sys.executable))
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    (b / "fake-plan.json").write_text(json.dumps(cfg))
    return b


def _model(tmp_path: Path) -> Path:
    cfg = tmp_path / "m" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps(dense()))
    out = tmp_path / "m.gguf"
    r = CliRunner().invoke(main, ["plan", "shape", str(cfg), "--quant", "Q8_0", "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out


def test_check_memory_reads_llama_cpps_buffer_sizes(tmp_path: Path) -> None:
    model = _model(tmp_path)
    log = [
        "load_tensors:   CPU_Mapped model buffer size =     9.00 MiB",
        "llama_kv_cache:        CPU KV buffer size =     2.00 MiB",
        "sched_reserve:        CPU compute buffer size =     3.50 MiB",
    ]
    b = _bin(tmp_path, {"log": log, "tg": 10, "pp": 100})
    r = CliRunner().invoke(
        main,
        [
            "plan",
            str(model),
            "--cpu",
            "cpu,ram=8GiB",
            "--ctx",
            "2048",
            "--check-memory",
            "1",
            "--bin",
            str(b),
            "--mode",
            "layer",
        ],
        env={"PATCHKIT_CACHE": str(tmp_path / "cache")},
    )
    assert r.exit_code == 0, r.output
    assert "memory check: cpu only" in r.stderr
    assert "llama.cpp 14 MiB (model 9, context 2, compute 4)" in r.stderr  # 14.5 and 3.5, rounded
    argv = (b / "argv.txt").read_text().split("\n")
    assert argv[:2] == ["-m", str(model)] and "-ngl" in argv and "-n" in argv


def test_check_memory_without_buffer_lines_is_one_line(tmp_path: Path) -> None:
    model = _model(tmp_path)
    b = _bin(tmp_path, {"log": ["error: something else"], "tg": 1, "pp": 1})
    r = CliRunner().invoke(
        main,
        ["plan", str(model), "--cpu", "cpu,ram=8GiB", "--check-memory", "1", "--bin", str(b)],
        env={"PATCHKIT_CACHE": str(tmp_path / "cache")},
    )
    assert r.exit_code == 7
    assert "printed no buffer sizes" in r.stderr and "Traceback" not in r.output


def test_calibrate_then_verify_learn_and_mark(tmp_path: Path) -> None:
    model = _model(tmp_path)
    b = _bin(tmp_path, {"log": [], "tg": 50.0, "pp": 400.0})
    env = {"PATCHKIT_CACHE": str(tmp_path / "cache")}
    base = ["plan", str(model), "--cpu", "cpu,ram=8GiB", "--bin", str(b), "--json"]
    r = CliRunner().invoke(main, [*base, "--calibrate"], env=env)
    assert r.exit_code == 0, r.output
    assert "calibrated cpu:" in r.stderr
    store = json.loads((tmp_path / "cache" / "plan" / "calibration.json").read_text())
    assert store["devices"]["cpu"]["bw_gbs"] > 0
    data = json.loads(r.stdout)
    cpu_only = next(a for a in data["arrangements"] if a["split_mode"] == "none")
    assert cpu_only["calibrated"] is True
    # calibrated from this very measurement: the prediction now matches it
    assert abs(cpu_only["decode_tps"] / 50.0 - 1) < 0.02
    assert abs(cpu_only["prompt_tps"] / 400.0 - 1) < 0.05
    assert "-ngl 0" in (b / "bench-argv.txt").read_text()


def test_calibrate_learns_the_hop_cost_of_two_rpc_devices(tmp_path: Path) -> None:
    from tests.fixtures.rpc_server import FakeRpcServer

    model = _model(tmp_path)
    b = _bin(tmp_path, {"log": [], "tg": 40.0, "pp": 300.0})
    env = {"PATCHKIT_CACHE": str(tmp_path / "cache")}
    with FakeRpcServer("patched", version=(4, 0, 1), devices=2) as srv:
        ep = f"127.0.0.1:{srv.port}"
        r = CliRunner().invoke(
            main,
            [
                "plan",
                str(model),
                "--cpu",
                "cpu,ram=8GiB",
                "--rpc",
                ep,
                "--bin",
                str(b),
                "--calibrate",
                "--json",
            ],
            env=env,
        )
    assert r.exit_code == 0, r.output
    assert "2 remote devices in a layer split:" in r.stderr
    store = json.loads((tmp_path / "cache" / "plan" / "calibration.json").read_text())
    remote = {k: v for k, v in store["devices"].items() if "@" in k}
    assert len(remote) == 2 and all(v["hop_cost_s"] >= 0 and v["bw_gbs"] > 0 for v in remote.values())
    runs = (b / "bench-argv.txt").read_text().splitlines()
    assert len(runs) == 4 and "-dev RPC0/RPC1" in runs[-1] and "-sm layer" in runs[-1]
