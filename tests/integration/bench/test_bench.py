"""`patchkit bench` end to end with a fake llama-bench replaying real output
(tests/fixtures/fake_bench.py) and fake_llama's protocol-speaking ggml-rpc-server."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from patchkit.bench.report import write_reports
from tests.fixtures.bench import HELP, older_help
from tests.fixtures.buildinfo import build_info_json
from tests.fixtures.paths import BENCH_DATA, FAKE_BENCH, FAKE_LLAMA, RPC_SERVER

DATA = BENCH_DATA


# ---- the whole command, with a fake llama-bench replaying real output ---------------------

FAKE = FAKE_BENCH


def _fake_build(
    tmp_path: Path,
    *,
    help_text: str = HELP,
    fail: dict[str, str] | None = None,
    rates: dict[str, list[float]] | None = None,
) -> Path:
    out = tmp_path / "build"
    (out / "bin").mkdir(parents=True)
    shutil.copy(FAKE, out / "bin" / "llama-bench")
    os.chmod(out / "bin" / "llama-bench", 0o755)
    shutil.copy(FAKE_LLAMA, out / "bin" / "ggml-rpc-server")
    os.chmod(out / "bin" / "ggml-rpc-server", 0o755)
    (tmp_path / "help.txt").write_text(help_text)
    (out / "bin" / "bench.json").write_text(
        json.dumps(
            {
                "help": str(tmp_path / "help.txt"),
                "record": str(DATA / "layer-2rpc-82bb485.json"),
                "calls": str(tmp_path / "calls.jsonl"),
                "fail": fail or {},
                "rates": rates or {},
            }
        )
    )
    (out / "bin" / "fake.json").write_text(
        json.dumps(
            {  # for fake_llama's ggml-rpc-server
                "mode": "proto-patched",
                "piddir": str(tmp_path / "pids"),
                "rpc_server": str(RPC_SERVER),
            }
        )
    )
    (out / "build-info.json").write_text(json.dumps(build_info_json()))
    return out


def _calls(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "calls.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def _alive(tmp_path: Path) -> list[int]:
    alive = []
    for p in (tmp_path / "pids").iterdir() if (tmp_path / "pids").exists() else []:
        try:
            os.kill(int(p.name), 0)
        except ProcessLookupError:
            continue
        alive.append(int(p.name))
    return alive


def _cli(*args: str):
    from click.testing import CliRunner

    from patchkit.cli import main

    return CliRunner().invoke(main, list(args))


posix_only = pytest.mark.skipif(sys.platform == "win32", reason="fake binaries are POSIX scripts")


@posix_only
def test_sweep_records_failures_and_goes_on(tmp_path: Path) -> None:
    from tests.fixtures.rpc_server import FakeRpcServer

    build = _fake_build(
        tmp_path,
        fail={"-sm tensor -dev RPC0/RPC1": "abort", "-dev RPC1": "oom"},
        rates={"-sm tensor": [400.0, 9.9], "-sm layer": [300.0, 7.8]},
    )
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    with FakeRpcServer("patched", devices=1) as a, FakeRpcServer("patched", devices=1) as b:
        rpc = f"127.0.0.1:{a.port},127.0.0.1:{b.port}"
        r = _cli(
            "bench",
            str(tmp_path / "res"),
            "-m",
            str(model),
            "--build",
            str(build),
            "--rpc",
            rpc,
            "--sweep",
            "sm=layer,tensor",
            "--sweep",
            "dev=RPC0/RPC1,RPC1",
            "-p",
            "64",
            "-n",
            "16",
            "-r",
            "3",
            "--json",
        )
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)  # --json: stdout is bench.json, nothing else
    assert r.stdout == (tmp_path / "res" / "bench.json").read_text()
    assert "4 setups, 3 failed; fastest decode: sm=layer dev=RPC0/RPC1" in r.stderr  # the summary
    assert "bench results" not in r.stderr  # the table is the text result: not with --json
    got = [(p["label"], p["status"], p["error_kind"]) for p in res["points"]]
    assert got == [
        ("sm=layer dev=RPC0/RPC1", "ok", ""),
        ("sm=layer dev=RPC1", "failed", "oom"),
        ("sm=tensor dev=RPC0/RPC1", "failed", "abort"),
        ("sm=tensor dev=RPC1", "failed", "oom"),
    ]
    aborted = res["points"][2]
    assert [m["test"] for m in aborted["measurements"]] == ["pp64"]  # what it printed before dying
    assert "GGML_ASSERT" in aborted["error"]
    assert res["best"]["decode"] == "sm=layer dev=RPC0/RPC1" and res["complete"] is True
    assert [x["ok"] for x in res["rpc_latency"]] == [True, True]
    calls = _calls(tmp_path)
    assert calls[0] == ["--help"] and calls[1] == ["-rpc", rpc, "--list-devices"]
    relayed = calls[2][3]  # llama-bench talks to patchkit's relays, one per host, on loopback
    assert relayed != rpc and [e.split(":")[0] for e in relayed.split(",")] == ["127.0.0.1"] * 2
    tail = ["-o", "jsonl", "-sm", "layer", "-dev", "RPC0/RPC1"]
    assert calls[2:6] == [  # prompt and decode apart, each again with -r 1: its traffic per token
        ["-m", str(model), "-rpc", relayed, "-p", "64", "-n", "0", "-r", "3", *tail],
        ["-m", str(model), "-rpc", relayed, "-p", "64", "-n", "0", "-r", "1", *tail],
        ["-m", str(model), "-rpc", relayed, "-p", "0", "-n", "16", "-r", "3", *tail],
        ["-m", str(model), "-rpc", relayed, "-p", "0", "-n", "16", "-r", "1", *tail],
    ]
    assert len(calls) == 9  # the failing points stop at their first run
    first = res["points"][0]["traffic"]
    # fake_bench: per token and device 30 bytes up, 12 down, 1 round trip; 2 x 16 tokens counted
    dec = first["decode"]
    assert dec["tokens"] == 32 and dec["rt_per_token"] == 2.0
    assert dec["mb_per_token"] == pytest.approx(84e-6)
    for host in dec["hosts"].values():
        assert host["bytes_up"] == 32 * 30 and host["bytes_down"] == 32 * 12
        assert host["commands"] == {"GRAPH_COMPUTE": 32, "DEVICE_COUNT": 32}
        assert host["round_trips"] == 32 and host["version"] == "5.0.0"
    assert first["prompt"]["tokens"] == 128 and first["prompt"]["rt_per_token"] == pytest.approx(2 * 2 / 128)
    # named by the real host, not the relay (keys sorted, as in bench.json)
    assert list(dec["hosts"]) == sorted(rpc.split(","))
    out = tmp_path / "res"
    assert {p.name for p in out.iterdir()} == {
        ".patchkit-bench",
        "bench.json",
        "bench.md",
        "bench.png",
        "raw",
    }
    md = (out / "bench.md").read_text()
    assert "failed (abort)" in md and "| decode MB/token | decode RT/token |" in md
    assert "GGML_ASSERT" in (out / "raw" / "03-prompt.err").read_text()


@posix_only
def test_unsupported_sweep_refused_before_anything_runs(tmp_path: Path) -> None:
    build = _fake_build(tmp_path, help_text=older_help(HELP, tensor=False))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    r = _cli(
        "bench", str(tmp_path / "res"), "-m", str(model), "--build", str(build), "--sweep", "sm=layer,tensor"
    )
    assert r.exit_code == 2
    assert "--sweep sm=tensor: this llama-bench takes -sm none|layer|row" in r.output
    assert _calls(tmp_path) == [["--help"]] and not (tmp_path / "res").exists()
    r = _cli(
        "bench", str(tmp_path / "res"), "-m", str(model), "--build", str(build), "--sweep", "dev=CUDA0"
    )  # no such device: refused after --list-devices, before a run
    assert r.exit_code == 2 and "no device 'CUDA0'" in r.output
    assert not (tmp_path / "res").exists()
    r = _cli(
        "bench", str(tmp_path / "res"), "-m", str(model), "--build", str(build), "--rpc", "127.0.0.1:1"
    )  # nobody listens: fails before any llama-bench run
    assert r.exit_code == 14 and "connection refused" in r.output
    assert all(c in (["--help"],) or "--list-devices" in c for c in _calls(tmp_path))


@posix_only
def test_cli_input_errors(tmp_path: Path) -> None:
    build = _fake_build(tmp_path)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    r = _cli("bench", str(tmp_path / "r"), "--build", str(build))
    assert r.exit_code == 2 and "give the model to benchmark with -m" in r.output
    r = _cli("bench", str(tmp_path / "r"), "--demo", "-m", str(model), "--build", str(build))
    assert r.exit_code == 2 and "drop -m/--rpc" in r.output
    r = _cli("bench", str(tmp_path / "r"), "-m", str(model), "--build", str(tmp_path / "nope"))
    assert r.exit_code == 2 and "no finished build" in r.output
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "thesis.tex").write_text("x")
    r = _cli("bench", str(tmp_path / "busy"), "-m", str(model), "--build", str(build))
    assert r.exit_code == 2 and "holds thesis.tex, and patchkit bench did not write that folder" in r.output
    r = _cli("bench", str(tmp_path / "r"), "-m", str(model), "--build", str(build), "--rpc", "host")
    assert r.exit_code == 2 and "is not HOST:PORT" in r.output
    assert _calls(tmp_path) == []  # nothing ran


@posix_only
def test_demo_with_fake_binaries_stops_its_servers(tmp_path: Path) -> None:
    build = _fake_build(tmp_path, rates={"-sm tensor": [50.0, 5.0]}, fail={"-sm tensor -dev none": "abort"})
    r = _cli("bench", str(tmp_path / "demo"), "--demo", "--build", str(build))
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "demo" / "bench.json").read_text())
    assert res["demo"] is True and len(res["points"]) == 6
    assert [p["status"] for p in res["points"]] == ["ok", "ok", "ok", "skipped", "ok", "ok"]
    assert "tensor split needs at least one device" in res["points"][3]["error"]
    eps = [x["endpoint"] for x in res["rpc_latency"]]
    assert len(eps) == 2 and all(e.startswith("127.0.0.1:") for e in eps)
    assert all(x["ok"] for x in res["rpc_latency"])
    bench_calls = [c for c in _calls(tmp_path) if "-m" in c]
    relayed = {c[c.index("-rpc") + 1] for c in bench_calls}
    assert len(relayed) == 1 and relayed != {",".join(eps)}  # through the relays
    local = res["points"][0]["traffic"]["decode"]  # dev=none: no graph went to a host
    assert local["tokens"] == 32 and local["mb_per_token"] == 0 and "no graph" in local["note"]
    assert len(list((tmp_path / "pids").iterdir())) == 2 and _alive(tmp_path) == []
    md = (tmp_path / "demo" / "bench.md").read_text()
    assert "demo: a tiny generated llama model" in md
    assert "## The network: what a decoded token costs on the wire" in md
    assert "Link needed to come within 10 % of the best local setup" in md


@posix_only
def test_demo_exits_16_when_its_rpc_server_does_not_start(tmp_path: Path) -> None:
    build = _fake_build(tmp_path)
    server = build / "bin" / "ggml-rpc-server"  # asserts at start, as an upstream bug would
    server.write_text(
        f"#!{sys.executable}\n"
        "print('create_backend: using CPU backend', flush=True)\n"
        "print('/src/ggml/src/ggml-rpc/ggml-rpc.cpp:1820: GGML_ASSERT(port > 0) failed', flush=True)\n"
        "print('[New LWP 81231]', flush=True)\n"
        "raise SystemExit(134)\n"
    )
    r = _cli("bench", str(tmp_path / "demo"), "--demo", "--build", str(build))
    assert r.exit_code == 16, r.output
    assert "demo: rpc-a did not listen on 127.0.0.1:" in r.output
    assert r.output.rstrip().endswith(
        "within 30s: /src/ggml/src/ggml-rpc/ggml-rpc.cpp:1820: GGML_ASSERT(port > 0) failed"
    )
    assert _calls(tmp_path) == []  # llama-bench never ran
    assert not (tmp_path / "demo" / "bench.json").exists()


@posix_only
def test_ctrl_c_keeps_the_points_done_and_stops_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from patchkit.bench import run as bench

    build = _fake_build(tmp_path)
    real = bench.run_relayed
    calls = {"n": 0}

    def interrupt(*a, **kw):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(bench, "run_relayed", interrupt)
    with pytest.raises(KeyboardInterrupt):
        bench.run_demo(tmp_path / "demo", build)
    res = json.loads((tmp_path / "demo" / "bench.json").read_text())
    assert res["complete"] is False and len(res["points"]) == 2
    assert _alive(tmp_path) == []


# ---- the real thing --------------------------------------------------------------------------


@pytest.mark.realbuild
@pytest.mark.skipif(not os.environ.get("PATCHKIT_REALBUILD"), reason="PATCHKIT_REALBUILD is not set")
def test_real_demo(tmp_path: Path) -> None:
    from patchkit.bench.run import run_demo

    build = Path(os.environ["PATCHKIT_REALBUILD"])
    report = run_demo(
        tmp_path / "demo",
        build,
        n_prompt=16,
        n_gen=4,
        reps=2,
        sweep=("sm=layer,tensor", "dev=none,RPC0/RPC1"),
    )
    write_reports(report, tmp_path / "demo")
    assert len(report.points) == 4
    assert report.points[2].status == "skipped"  # sm=tensor dev=none: said, not run
    ok = [p for p in report.points if p.status == "ok"]
    assert ok and all(p.decode is not None and len(p.decode.samples_ts) == 2 for p in ok)
    assert all(x.ok and x.median_ms > 0 for x in report.latency) and len(report.latency) == 2
    assert report.best() is not None
    for p in ok:  # through the relays: RPC devices cost bytes and round trips per token, CPU none
        t = p.phase_traffic("decode")
        assert t is not None and t.counted
        remote = "RPC" in " ".join(p.args)
        assert (t.bytes_per_token > 0 and t.rt_per_token >= 1) if remote else t.bytes_per_token == 0
    assert (tmp_path / "demo" / "bench.png").stat().st_size > 10_000


@posix_only
def test_silent_and_hanging_points_are_failures(tmp_path: Path) -> None:
    build = _fake_build(tmp_path, fail={"-sm tensor": "silent", "-sm none": "hang"})
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    r = _cli(
        "bench",
        str(tmp_path / "res"),
        "-m",
        str(model),
        "--build",
        str(build),
        "--sweep",
        "sm=layer,tensor,none",
        "--timeout",
        "2",
        "-r",
        "2",
    )
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "res" / "bench.json").read_text())
    got = [(p["status"], p["error_kind"], p["error"]) for p in res["points"]]
    assert got == [
        ("ok", "", ""),
        ("failed", "error", "llama-bench exited 0 but printed no results"),
        ("failed", "timeout", "timed out after 2s"),
    ]
    # the summary on stdout: the table of results, then the closing line; progress on stderr
    out = r.stdout.splitlines()
    assert out[0] == "bench results (tok/s: median (min–max) test)"
    (layer,) = [ln for ln in out if ln.startswith("│ 1 ")]
    assert "sm=layer" in layer and "tok/s" not in layer and "best decode, best prompt" in layer
    assert " tg" in layer and " pp" in layer  # median (min-max) and the llama-bench test
    (silent,) = [ln for ln in out if ln.startswith("│ 2 ")]
    assert "failed (error): llama-bench exited 0 but printed no results" in silent
    (hang,) = [ln for ln in out if ln.startswith("│ 3 ")]
    assert "failed (timeout): timed out after 2s" in hang and hang.count("—") == 2
    assert out[-1] == (
        f"3 setups, 2 failed; fastest decode: sm=layer; wrote {tmp_path / 'res'}/bench.md, bench.json, bench.png"
    )
    assert "3 setups, 2 failed" not in r.stderr and "│" not in r.stderr
    assert "▸ bench" in r.stderr and "sm=layer:" in r.stderr  # the step and the per-point lines


@posix_only
def test_links_are_measured_first_and_swept(tmp_path: Path) -> None:
    build = _fake_build(tmp_path)
    r = _cli(
        "bench",
        str(tmp_path / "demo"),
        "--demo",
        "--build",
        str(build),
        "--sweep",
        "dev=none,RPC0/RPC1",
        "--link",
        "none",
        "--link",
        "rate=100mbit,rtt=2ms",
        "-r",
        "2",
        "-n",
        "4",
    )
    assert r.exit_code == 0, r.output
    assert "--link rate=100mbit+rtt=2ms (100 Mbit/s, rtt 2 ms): measured round trip" in r.stderr
    (proj,) = [ln for ln in r.stdout.splitlines() if "projection vs emulated" in ln]  # the result
    assert proj.startswith(
        "  projection vs emulated rate=100mbit+rtt=2ms: dev=RPC0/RPC1 link=rate=100mbit+rtt=2ms: measured "
    )
    assert "projection vs" not in r.stderr
    (wire,) = [ln for ln in r.stdout.splitlines() if ln.startswith("│ 4 ")]
    assert " MB, " in wire and " RT " in wire  # the decode traffic the relay counted
    res = json.loads((tmp_path / "demo" / "bench.json").read_text())
    links = {c["link"]["name"]: c for c in res["links"]}
    assert set(links) == {"none", "rate=100mbit+rtt=2ms"}
    shaped = links["rate=100mbit+rtt=2ms"]["measured"]
    assert abs(shaped["rtt_ms"] - 2) <= 0.2 and abs(shaped["up_mbit_s"] - 100) <= 10
    got = [(p["label"], p["status"], p["link"]) for p in res["points"]]
    assert got == [
        ("dev=none link=none", "ok", "none"),
        ("dev=none link=rate=100mbit+rtt=2ms", "duplicate", ""),
        ("dev=RPC0/RPC1 link=none", "ok", "none"),
        ("dev=RPC0/RPC1 link=rate=100mbit+rtt=2ms", "ok", "rate=100mbit+rtt=2ms"),
    ]
    assert "the link does not matter" in res["points"][1]["error"]
    assert res["points"][3]["path"]["rtt_ms"] == pytest.approx(shaped["rtt_ms"], abs=1e-3)
    md = (tmp_path / "demo" / "bench.md").read_text()
    assert "emulated link rate=100mbit+rtt=2ms (100 Mbit/s, rtt 2 ms): measured on loopback" in md
    assert "### Projection vs emulated link" in md
    r = _cli(
        "bench",
        str(tmp_path / "r2"),
        "-m",
        str(build / "bin" / "fake.json"),
        "--build",
        str(build),
        "--link",
        "1gbe",
    )
    assert r.exit_code == 2 and "--link shapes the connections to the RPC hosts" in r.output


@posix_only
def test_a_users_raw_folder_is_not_benchs_and_is_never_deleted(tmp_path: Path) -> None:
    """An OUTDIR holding only raw/IMG_0001.CR2 passed the foreign-files
    check because ``raw`` is one of bench's names; the bench then deleted OUTDIR/raw and
    exited 0. A folder is bench's only by the marker bench wrote into it first."""
    build = _fake_build(tmp_path)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    photos = tmp_path / "photos"
    (photos / "raw").mkdir(parents=True)
    (photos / "raw" / "IMG_0001.CR2").write_bytes(b"a photo")
    for layout in ({}, {"logs": "d", "demo": "d"}, {"bench.md": "f"}):
        for name, kind in layout.items():
            (photos / name).mkdir() if kind == "d" else (photos / name).write_text("mine")
        r = _cli("bench", str(photos), "-m", str(model), "--build", str(build))
        assert r.exit_code == 2, r.output
        assert "patchkit bench did not write that folder (no .patchkit-bench" in r.output
        assert "Traceback" not in r.output
        assert (photos / "raw" / "IMG_0001.CR2").read_bytes() == b"a photo"
        assert not (photos / ".patchkit-bench").exists()
    r = _cli("bench", str(photos), "--demo", "--build", str(build))
    assert r.exit_code == 2 and "patchkit bench did not write that folder" in r.output
    assert _calls(tmp_path) == []  # nothing ran
    assert (photos / "raw" / "IMG_0001.CR2").read_bytes() == b"a photo"


@posix_only
def test_a_folder_bench_wrote_is_reused_and_only_its_own_raw_files_go(tmp_path: Path) -> None:
    build = _fake_build(tmp_path)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    res = tmp_path / "res"
    r = _cli("bench", str(res), "-m", str(model), "--build", str(build), "-r", "1")
    assert r.exit_code == 0, r.output
    marker = json.loads((res / ".patchkit-bench").read_text())
    assert marker["written_by"] == "patchkit bench"
    assert sorted(p.name for p in (res / "raw").iterdir()) == ["01.err", "01.out"]
    (res / "raw" / "99.out").write_text("a previous bench's")
    (res / "raw" / "notes.txt").write_text("mine")
    r = _cli("bench", str(res), "-m", str(model), "--build", str(build), "-r", "1")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (res / "raw").iterdir()) == ["01.err", "01.out", "notes.txt"]
    # a folder from a bench before the marker existed: its bench.json says whose it is
    (res / ".patchkit-bench").unlink()
    r = _cli("bench", str(res), "-m", str(model), "--build", str(build), "-r", "1")
    assert r.exit_code == 0, r.output
    assert (res / ".patchkit-bench").is_file()
    # a link named like bench's own is not bench's
    (res / "logs").symlink_to(tmp_path / "photos-elsewhere", target_is_directory=True)
    r = _cli("bench", str(res), "-m", str(model), "--build", str(build), "-r", "1")
    assert r.exit_code == 2 and "holds logs (a link), which patchkit bench did not write there" in r.output
    # a bench.json that is not bench's proves nothing
    other = tmp_path / "other"
    other.mkdir()
    (other / "bench.json").write_text('{"mine": true}')
    (other / "raw").mkdir()
    r = _cli("bench", str(other), "-m", str(model), "--build", str(build))
    assert r.exit_code == 2 and "patchkit bench did not write that folder" in r.output
    assert (other / "raw").is_dir()
