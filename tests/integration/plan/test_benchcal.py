"""`plan --calibrate-from DIR`: a results folder the real `patchkit bench` wrote (a fake
llama-bench replaying real output, fake RPC servers speaking the protocol) teaches plan
its devices and links."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from patchkit.cli import main
from tests.fixtures.buildinfo import build_info_json
from tests.fixtures.paths import BENCH_DATA, FAKE_BENCH, FAKE_LLAMA, RPC_SERVER
from tests.integration.plan.test_check import _model

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="fake binaries are POSIX scripts")


def _fake_build(tmp_path: Path, rates: dict[str, list[float]]) -> Path:
    out = tmp_path / "build"
    (out / "bin").mkdir(parents=True)
    for src, name in ((FAKE_BENCH, "llama-bench"), (FAKE_LLAMA, "ggml-rpc-server")):
        shutil.copy(src, out / "bin" / name)
        os.chmod(out / "bin" / name, 0o755)
    (tmp_path / "help.txt").write_text((BENCH_DATA / "help-82bb485.txt").read_text())
    (out / "bin" / "bench.json").write_text(
        json.dumps(
            {
                "help": str(tmp_path / "help.txt"),
                "record": str(BENCH_DATA / "layer-2rpc-82bb485.json"),
                "calls": str(tmp_path / "calls.jsonl"),
                "fail": {},
                "rates": rates,
            }
        )
    )
    (out / "bin" / "fake.json").write_text(
        json.dumps({"mode": "proto-patched", "piddir": str(tmp_path / "pids"), "rpc_server": str(RPC_SERVER)})
    )
    (out / "build-info.json").write_text(json.dumps(build_info_json()))
    return out


@posix_only
def test_calibrate_from_a_bench_folder(tmp_path: Path) -> None:
    from tests.fixtures.rpc_server import FakeRpcServer

    model = _model(tmp_path)
    # first match wins: the two-server split before the one-server runs
    build = _fake_build(
        tmp_path, {"-dev RPC0/RPC1": [150.0, 25.0], "-dev RPC0": [300.0, 40.0], "-dev RPC1": [200.0, 25.0]}
    )
    env = {"PATCHKIT_CACHE": str(tmp_path / "cache")}
    with FakeRpcServer("patched", devices=1) as a, FakeRpcServer("patched", devices=1) as b:
        eps = [f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"]
        r = CliRunner().invoke(
            main,
            [
                *("bench", str(tmp_path / "res"), "-m", str(model), "--build", str(build)),
                *("--rpc", ",".join(eps), "--sweep", "sm=layer", "--sweep", "dev=RPC0,RPC1,RPC0/RPC1"),
                *("-p", "64", "-n", "16", "-r", "3"),
            ],
            env=env,
        )
        assert r.exit_code == 0, r.output
        assert (tmp_path / "res" / "bench.json").is_file()
        plan = [
            *("plan", str(model), "--cpu", "cpu,ram=8GiB", "--ctx", "256", "--mode", "layer"),
            *("--rpc", eps[0], "--rpc", eps[1], "--json"),
        ]
        before = CliRunner().invoke(main, plan, env=env)
        r = CliRunner().invoke(main, [*plan, "--calibrate-from", str(tmp_path / "res")], env=env)
    assert before.exit_code == 0 and r.exit_code == 0, before.output + r.output
    assert f"calibrated from {tmp_path / 'res' / 'bench.json'}: cpu@{eps[0]} (RPC0, point 1" in r.stderr
    assert "layer split over 2" in r.stderr and f"link to {eps[0]}: round trip" in r.stderr
    store = json.loads((tmp_path / "cache" / "plan" / "calibration.json").read_text())
    one, two = store["devices"][f"cpu@{eps[0]}"], store["devices"][f"cpu@{eps[1]}"]
    assert one["source"].startswith("bench ") and one["bw_gbs"] > two["bw_gbs"] > 0  # 40 vs 25 tok/s
    assert one["hop_cost_s"] > 0 and set(store["links"]) == set(eps)

    def alone(data: dict, ep: str) -> dict:
        return next(
            x
            for x in data["arrangements"]
            if x["split_mode"] == "layer" and [d["host"] for d in x["devices"]] == [ep]
        )

    old, new = json.loads(before.stdout), json.loads(r.stdout)
    assert alone(old, eps[0])["calibrated"] is False and alone(new, eps[0])["calibrated"] is True
    # learned from these very runs: the plan now predicts what bench measured
    assert alone(new, eps[0])["decode_tps"] == pytest.approx(40.0, rel=0.05)
    assert alone(new, eps[1])["decode_tps"] == pytest.approx(25.0, rel=0.05)
    assert alone(new, eps[0])["prompt_tps"] == pytest.approx(300.0, rel=0.1)
    pair = next(  # bench's split: llama.cpp's default -ts, by free memory (even here)
        x
        for x in new["arrangements"]
        if [d["host"] for d in x["devices"]] == eps
        and [d["share"] for d in x["devices"]] == [0.5, 0.5]
        and x["cache_type"] == "f16"  # bench ran with f16
    )
    assert pair["decode_tps"] == pytest.approx(25.0, rel=0.05)


def test_calibrate_from_a_folder_without_bench_json_is_one_line(tmp_path: Path) -> None:
    model = _model(tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "bench.json").write_text('{"schema": 1, "points": [{"index": 1}]}')
    for folder, said in (
        ("empty", "no bench.json there"),
        ("bad", "not a bench.json `patchkit bench` wrote"),
    ):
        r = CliRunner().invoke(
            main,
            ["plan", str(model), "--cpu", "cpu,ram=8GiB", "--calibrate-from", str(tmp_path / folder)],
            env={"PATCHKIT_CACHE": str(tmp_path / "cache")},
        )
        assert r.exit_code == 2 and said in r.stderr, r.output
        assert "Traceback" not in r.output and len(r.stderr.strip().splitlines()) <= 2
        assert not (tmp_path / "cache" / "plan" / "calibration.json").exists()


@posix_only
def test_a_device_only_in_a_layer_split_is_learned_from_the_others(tmp_path: Path) -> None:
    from tests.fixtures.rpc_server import FakeRpcServer

    model = _model(tmp_path)
    build = _fake_build(tmp_path, {"-dev RPC0/RPC1": [150.0, 25.0], "-dev RPC0": [300.0, 40.0]})
    env = {"PATCHKIT_CACHE": str(tmp_path / "cache")}
    with FakeRpcServer("patched", devices=1) as a, FakeRpcServer("patched", devices=1) as b:
        eps = [f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"]
        r = CliRunner().invoke(
            main,
            [
                *("bench", str(tmp_path / "res"), "-m", str(model), "--build", str(build)),
                *("--rpc", ",".join(eps), "--sweep", "sm=layer", "--sweep", "dev=RPC0,RPC0/RPC1"),
                *("-p", "64", "-n", "16", "-r", "3"),
            ],
            env=env,
        )
        assert r.exit_code == 0, r.output
        r = CliRunner().invoke(
            main,
            [
                *("plan", str(model), "--cpu", "cpu,ram=8GiB", "--ctx", "256", "--mode", "layer"),
                *("--rpc", eps[0], "--rpc", eps[1], "--json", "--calibrate-from", str(tmp_path / "res")),
            ],
            env=env,
        )
    assert r.exit_code == 0, r.output
    assert f"cpu@{eps[1]} (in the layer split of point 2 dev=RPC0/RPC1, the others known)" in r.stderr
    new = json.loads(r.stdout)
    pair = next(
        x
        for x in new["arrangements"]
        if [d["host"] for d in x["devices"]] == eps
        and [d["share"] for d in x["devices"]] == [0.5, 0.5]
        and x["cache_type"] == "f16"  # bench ran with f16
    )
    assert pair["calibrated"] is True and pair["decode_tps"] == pytest.approx(25.0, rel=0.05)
