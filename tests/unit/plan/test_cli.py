"""`patchkit plan` and `patchkit plan shape` from the command line (no processes)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from click.testing import CliRunner

from patchkit.cli import main
from tests.fixtures.rpc_server import FakeRpcServer, closed_port
from tests.unit.plan.shapes import dense, hybrid

KEYS = {
    "split_mode",
    "devices",
    "fits",
    "why_not",
    "max_ctx",
    "decode_tps",
    "prompt_tps",
    "link_mb_per_token",
    "round_trips_per_token",
    "bottleneck",
    "calibrated",
    "command",
}


def _cli(*args: str, cache: Path):
    return CliRunner().invoke(main, ["plan", *args], env={"PATCHKIT_CACHE": str(cache)})


def _config(tmp_path: Path, cfg: dict) -> Path:
    p = tmp_path / "cfg" / "config.json"
    p.parent.mkdir(exist_ok=True)
    p.write_text(json.dumps(cfg))
    return p


def test_plan_json_has_the_documented_keys_ranked(tmp_path: Path) -> None:
    cfg = _config(tmp_path, hybrid())
    r = _cli(
        str(cfg),
        "--quant",
        "Q8_0",
        "-d",
        "rtx3070",
        "-d",
        "p100-16g@box2",
        "--link",
        "box2=1gbe",
        "--cpu",
        "cpu,ram=32GiB",
        "--ctx",
        "8K",
        "--json",
        cache=tmp_path / "c",
    )
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["schema"] == 1 and data["ctx"] == 8192
    arrs = data["arrangements"]
    assert arrs and all(set(a) >= KEYS for a in arrs)
    assert all({"name", "host", "share"} <= set(d) for a in arrs for d in a["devices"])
    assert arrs[0]["fits"] and arrs[0]["command"].startswith("llama-server ")
    assert arrs[0]["calibrated"] is False
    assert arrs[-1]["split_mode"] == "row" and "split buffer type" in arrs[-1]["why_not"]
    fitting = [a["decode_tps"] for a in arrs if a["fits"]]
    assert all(b <= a * 1.02 for a, b in itertools.pairwise(fitting))  # ties within 1 % go by context


def test_plan_table_and_best_command(tmp_path: Path) -> None:
    cfg = _config(tmp_path, dense())
    png = tmp_path / "plan.png"
    r = _cli(
        str(cfg),
        "--quant",
        "Q4_K_M",
        "-d",
        "gtx1660",
        "--cpu",
        "cpu,ram=16GiB",
        "--png",
        str(png),
        cache=tmp_path / "c",
    )
    assert r.exit_code == 0, r.output
    assert "arrangements, best first" in r.stdout
    assert "best: " in r.stdout and "llama-server -m" in r.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_input_is_one_line_with_its_exit_code(tmp_path: Path) -> None:
    cfg = _config(tmp_path, dense())
    cases = [
        (["-d", "rtx3007"], 2, 'did you mean "rtx30'),
        (["-d", "p100-16g,eff=3"], 2, "efficiency = 3.0 is out of range"),
        (["-d", "rtx3070", "--ctx", "0"], 2, "context 0 is out of range"),
        (["-d", "rtx3070", "--ctx", "1000000000000"], 2, "is out of range"),
        (["-d", "p100-16g@box9"], 2, "no link to box9"),
        (["-d", "rtx3070", "--rpc", f"127.0.0.1:{closed_port()}"], 14, "connection refused"),
    ]
    for extra, code, text in cases:
        r = _cli(str(cfg), "--quant", "Q8_0", *extra, cache=tmp_path / "c")
        assert r.exit_code == code, (extra, r.output)
        assert text in r.stderr, (extra, r.stderr)
        assert "Traceback" not in r.output
        assert r.stdout == ""


def test_a_lying_gguf_is_refused(tmp_path: Path) -> None:
    import os

    out = tmp_path / "m.gguf"
    cfg = _config(tmp_path, dense())
    r = _cli("shape", str(cfg), "--quant", "Q8_0", "-o", str(out), cache=tmp_path / "c")
    assert r.exit_code == 0, r.output
    assert "data region a hole" in r.stdout
    r = _cli(str(out), "-d", "rtx3070", "--json", cache=tmp_path / "c")
    assert r.exit_code == 0, r.output
    again = _cli("shape", str(cfg), "--quant", "Q8_0", "-o", str(out), cache=tmp_path / "c")
    assert again.exit_code == 2 and "exists" in again.stderr
    os.truncate(out, out.stat().st_size // 2)
    r = _cli(str(out), "-d", "rtx3070", cache=tmp_path / "c")
    assert r.exit_code == 2
    assert "shorter than its tensor table says" in r.stderr and r.stdout == ""


def test_rpc_servers_are_asked_for_their_devices(tmp_path: Path) -> None:
    cfg = _config(tmp_path, dense())
    with FakeRpcServer("patched", version=(4, 0, 1), devices=2) as srv:
        r = _cli(
            str(cfg), "--quant", "Q8_0", "--rpc", f"127.0.0.1:{srv.port}", "--json", cache=tmp_path / "c"
        )
    assert r.exit_code == 0, r.output
    arrs = json.loads(r.stdout)["arrangements"]
    hosts = {d["host"] for a in arrs for d in a["devices"]}
    assert hosts == {f"127.0.0.1:{srv.port}"}
    two = next(a for a in arrs if len(a["devices"]) == 2 and a["split_mode"] == "layer")
    assert f"--rpc 127.0.0.1:{srv.port}" in two["command"]


def test_the_table_marks_ot_hybrids_as_needing_the_experimental_patch(tmp_path: Path) -> None:
    cfg = _config(tmp_path, dense(num_hidden_layers=16))
    r = _cli(
        str(cfg),
        "--quant",
        "Q8_0",
        "-d",
        "rtx3070",
        "-d",
        "p100-16g",
        "-d",
        "gtx1660@box2",
        "--link",
        "box2=1gbe",
        "--cpu",
        "cpu,ram=32GiB",
        "--top",
        "1000",
        cache=tmp_path / "c",
    )
    assert r.exit_code == 0, r.output
    rows = [ln for ln in r.stdout.splitlines() if "-ot blk" in ln]
    assert rows and all("needs the experimental -ot patch" in ln for ln in rows)
