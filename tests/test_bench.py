"""patchkit bench: sweep, option mapping, llama-bench output, failures, table and plot.

Fixtures under tests/data/bench are real output of llama-bench at upstream 82bb48500a9a
(patchkit cpu-rpc build, two loopback `ggml-rpc-server -d CPU`, the tiny llama model,
`-p 64 -n 16 -r 3`); only the usage line's binary path is shortened to "llama-bench".
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import sys
from pathlib import Path

import matplotlib.font_manager  # noqa: F401  (builds its font cache, which runs fc-list, at collection)
import numpy as np
import pytest

from patchkit.bench.report import BAR_COLOR, BEST_COLOR, render_markdown, render_png, write_reports
from patchkit.bench.result import (
    PointResult,
    classify_failure,
    measurements,
    parse_bench_output,
)
from patchkit.bench.run import BenchReport, RpcLatency, measure_latency
from patchkit.bench.sweep import (
    Device,
    Point,
    check_supported,
    expand_sweep,
    parse_caps,
    parse_devices,
    parse_sweep,
    point_args,
    resolve_devices,
)
from patchkit.core.errors import ConfigError
from patchkit.core.proc import RunResult
from tests.fixtures.buildinfo import build_info_json
from tests.fixtures.paths import BENCH_DATA, FAKE_BENCH, FAKE_LLAMA, RPC_SERVER

DATA = BENCH_DATA
HELP = (DATA / "help-82bb485.txt").read_text()
RIG = [Device(name="CUDA0", description="NVIDIA GeForce RTX 3070"),
       Device(name="CUDA1", description="Tesla P100-PCIE-16GB"),
       Device(name="RPC0", description="192.168.1.20:50052"),
       Device(name="RPC1", description="192.168.1.21:50052")]


# ---- sweep ------------------------------------------------------------------------------

def test_sweep_is_the_product_first_dimension_outermost() -> None:
    dims = parse_sweep(["sm=layer,tensor", "dev-order=auto,remote-first", "p=512"])
    points = expand_sweep(dims)
    assert [p.settings for p in points] == [
        (("sm", "layer"), ("dev-order", "auto"), ("p", "512")),
        (("sm", "layer"), ("dev-order", "remote-first"), ("p", "512")),
        (("sm", "tensor"), ("dev-order", "auto"), ("p", "512")),
        (("sm", "tensor"), ("dev-order", "remote-first"), ("p", "512")),
    ]
    # labels name only what varies; a one-value dimension is a fixed setting
    assert [p.label for p in points] == ["sm=layer dev-order=auto", "sm=layer dev-order=remote-first",
                                         "sm=tensor dev-order=auto", "sm=tensor dev-order=remote-first"]


def test_sweep_aliases_repeats_and_no_sweep() -> None:
    dims = parse_sweep(["split-mode=layer", "sm=tensor,layer", "d=0,4096", "ts=3/1,0.6/0.4"])
    assert [(d.key, d.values) for d in dims] == [("sm", ("layer", "tensor")), ("depth", ("0", "4096")),
                                                ("ts", ("3/1", "0.6/0.4"))]
    assert len(expand_sweep(dims)) == 8
    only = expand_sweep(parse_sweep([]))
    assert len(only) == 1 and only[0].label == "default" and only[0].settings == ()


@pytest.mark.parametrize(("spec", "text"), [
    ("sm", "is not KEY=VALUE"),
    ("smm=layer", 'unknown key (did you mean "sm"?)'),
    ("ts=3:1", "is not a split like 3/1"),
    ("b=big", "is not a whole number"),
    ("dev-order=remote_first", 'did you mean "remote-first"'),
    ("sm=layer,,tensor", "empty value"),
    ("dev=RPC0;rm -rf", "characters llama-bench does not take"),
])
def test_sweep_errors_are_one_line(spec: str, text: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_sweep([spec])
    assert text in e.value.message and "\n" not in e.value.message


# ---- which options this llama-bench takes ------------------------------------------------

def test_caps_of_the_real_help() -> None:
    caps = parse_caps(HELP)
    for flag in ("-m", "-p", "-n", "-r", "-o", "-sm", "-dev", "-ts", "-ot", "-rpc", "-fitt",
                 "--list-devices", "-d", "-b", "-ub", "-fa"):
        assert caps.has(flag), flag
    assert not caps.has("-fit")  # llama-bench has only -fitt/-fitc, off by default
    assert caps.allowed("-sm") == ("none", "layer", "row", "tensor")
    assert caps.allowed("--split-mode") == caps.allowed("-sm")
    assert caps.allowed("-fa") == ("on", "off", "auto")
    assert caps.output_format == "jsonl"
    check_supported(parse_sweep(["sm=layer,tensor", "dev=local", "dev-order=remote-first",
                                 "ts=3/1", "depth=0,512", "fa=on,off"]), caps)


def _older(help_text: str, *, tensor: bool = True, dev: bool = True, jsonl: bool = True,
           rpc: bool = True) -> str:
    """The help of older llama-bench versions, as their print_usage wrote it."""
    lines = []
    for ln in help_text.splitlines():
        if not tensor and "--split-mode" in ln:  # before d6f303004 (2026-04)
            ln = ln.replace("<none|layer|row|tensor>", "<none|layer|row>       ")
        if not dev and ("--device" in ln or "--list-devices" in ln):  # before be79d9fdd (2025-09)
            continue
        if not jsonl:  # before 8962422b1 (2024-09)
            ln = ln.replace("csv|json|jsonl|md|sql", "csv|json|md|sql")
        if not rpc and "--rpc" in ln:  # a build without GGML_RPC
            continue
        lines.append(ln)
    return "\n".join(lines)


def test_older_versions_refuse_what_they_cannot_do() -> None:
    caps = parse_caps(_older(HELP, tensor=False))
    check_supported(parse_sweep(["sm=layer,row"]), caps)
    with pytest.raises(ConfigError) as e:
        check_supported(parse_sweep(["sm=layer,tensor"]), caps)
    assert e.value.message == "--sweep sm=tensor: this llama-bench takes -sm none|layer|row"
    assert "d6f303004" in e.value.hint
    caps = parse_caps(_older(HELP, dev=False, jsonl=False))
    assert caps.output_format == "json"
    for spec in ("dev=RPC0", "dev-order=remote-first"):
        with pytest.raises(ConfigError, match="has no -dev option"):
            check_supported(parse_sweep([spec]), caps)
    assert not parse_caps(_older(HELP, rpc=False)).has("-rpc")
    with pytest.raises(ConfigError, match="not a llama-bench"):
        parse_caps("usage: something else\n  -x  whatever\n")


# ---- devices -----------------------------------------------------------------------------

def test_list_devices_of_the_real_binary() -> None:
    devs = parse_devices((DATA / "list-devices-2rpc-82bb485.txt").read_text())
    assert [d.name for d in devs] == ["RPC0", "RPC1"]
    assert all(d.remote and d.description.startswith("127.0.0.1:") and d.total_mib > 0 for d in devs)
    assert parse_devices((DATA / "list-devices-none-82bb485.txt").read_text()) == []
    with pytest.raises(ConfigError, match="no 'Available devices:'"):
        parse_devices("error: failed to connect\n")


@pytest.mark.parametrize(("dev", "order", "want"), [
    ("auto", "auto", "auto"),  # llama's own choice (RPC first, at this version)
    ("auto", "remote-first", "RPC0/RPC1/CUDA0/CUDA1"),
    ("auto", "local-first", "CUDA0/CUDA1/RPC0/RPC1"),
    ("all", "auto", "CUDA0/CUDA1/RPC0/RPC1"),
    ("local", "auto", "CUDA0/CUDA1"),
    ("remote", "auto", "RPC0/RPC1"),
    ("none", "remote-first", "none"),
    ("CUDA1/RPC0", "remote-first", "RPC0/CUDA1"),
    ("local/RPC1", "remote-first", "RPC1/CUDA0/CUDA1"),
    ("RPC1/RPC0", "auto", "RPC1/RPC0"),
    ("RPC0/local/RPC0", "auto", "RPC0/CUDA0/CUDA1"),
])
def test_device_sets_and_order(dev: str, order: str, want: str) -> None:
    assert resolve_devices(dev, order, RIG) == want


def test_device_sets_on_a_cpu_only_machine_and_unknown_names() -> None:
    assert resolve_devices("local", "auto", []) == "none"
    with pytest.raises(ConfigError) as e:
        resolve_devices("CUDO0", "auto", RIG)
    assert 'no device \'CUDO0\' (did you mean "CUDA0"?)' in e.value.message
    assert "CUDA0, CUDA1, RPC0, RPC1" in e.value.hint


def test_point_args_map_every_dimension() -> None:
    caps = parse_caps(HELP)
    p = Point(settings=(("sm", "tensor"), ("dev", "local/RPC0"), ("dev-order", "remote-first"),
                        ("ts", "1/3/1"), ("depth", "4096"), ("b", "512"), ("ub", "128"), ("fa", "on")))
    assert point_args(p, caps, RIG) == ("-sm", "tensor", "-dev", "RPC0/CUDA0/CUDA1", "-ts", "1/3/1",
                                        "-d", "4096", "-b", "512", "-ub", "128", "-fa", "on")
    # dev-order without dev reorders every device; dev=auto with auto order passes no -dev
    assert point_args(Point(settings=(("dev-order", "remote-first"),)), caps, RIG) == (
        "-dev", "RPC0/RPC1/CUDA0/CUDA1")
    assert point_args(Point(settings=(("dev", "auto"), ("sm", "layer"))), caps, RIG) == ("-sm", "layer")


# ---- llama-bench output --------------------------------------------------------------------

def test_real_json_output() -> None:
    text = (DATA / "layer-2rpc-82bb485.json").read_text()
    recs = parse_bench_output(text)
    assert len(recs) == 2 and recs[0]["build_commit"]
    ms = measurements(recs)
    assert [m.kind for m in ms] == ["prompt", "decode"]
    pp, tg = ms
    assert pp.test == "pp64" and tg.test == "tg16"
    assert len(pp.samples_ts) == 3 and pp.min <= pp.median <= pp.max
    assert pp.median == sorted(recs[0]["samples_ts"])[1]
    assert tg.devices == "RPC0/RPC1" and tg.split_mode == "layer"


def test_real_jsonl_and_a_crash_halfway() -> None:
    text = (DATA / "tensor-2rpc-82bb485.jsonl").read_text()
    ms = measurements(parse_bench_output(text))
    assert [m.test for m in ms] == ["pp64", "tg16"] and ms[0].split_mode == "tensor"
    json_text = (DATA / "layer-2rpc-82bb485.json").read_text()
    cut = json_text[: json_text.index('"samples_ns"', json_text.index("\"n_gen\": 16"))]
    assert [m.test for m in measurements(parse_bench_output(cut))] == ["pp64"]
    assert parse_bench_output("main: error: failed to load model\n") == []
    # log lines mixed into stdout are skipped
    assert len(parse_bench_output("load: something\n" + text)) == 2


def _run(rc: int | None, err: str = "", out: str = "", secs: float = 3.0) -> RunResult:
    return RunResult(args=("llama-bench",), returncode=rc, stdout=out, stderr=err, seconds=secs)


def test_failures_are_classified() -> None:
    real_err = (DATA / "failed-dev-82bb485.txt").read_text()
    kind, msg = classify_failure(_run(1, real_err))
    assert (kind, msg) == ("args", "exit 1: error: invalid device: CUDA0")
    # -sm tensor with no device but the CPU, at 82bb485
    real_err = (DATA / "failed-tensor-cpu-82bb485.txt").read_text()
    assert classify_failure(_run(1, real_err)) == (
        "load", "exit 1: llama_bench: error: failed to load model 'tiny-llama.gguf'")
    kind, msg = classify_failure(_run(1, "llama_model_load: ...\nggml_backend_cuda_buffer_type_alloc_buffer: "
                                         "allocating 9216.00 MiB on device 1: cudaMalloc failed: out of memory\n"
                                         "main: error: failed to load model 'm.gguf'\n"))
    assert kind == "oom" and "cudaMalloc failed: out of memory" in msg
    kind, msg = classify_failure(_run(-6, "ggml-rpc.cpp:1094: GGML_ASSERT(data + nbytes <= base + size) failed\n"))
    assert kind == "abort" and msg.startswith("killed by signal 6: ") and "GGML_ASSERT" in msg
    assert classify_failure(_run(None, secs=900)) == ("timeout", "timed out after 900s")
    assert classify_failure(_run(-11)) == ("signal", "killed by signal 11")
    assert classify_failure(_run(2, "weird\n"))[0] == "error"


# ---- table and plot -------------------------------------------------------------------------

def _point(i: int, label: str, pp: float | None, tg: float | None, *, status: str = "ok",
           error: str = "", kind: str = "", devices: str = "RPC0/RPC1") -> PointResult:
    base = measurements(parse_bench_output((DATA / "layer-2rpc-82bb485.json").read_text()))
    ms = []
    for m, v in zip(base, (pp, tg), strict=True):
        if v is not None:
            ms.append(dataclasses.replace(m, samples_ts=(v * 0.95, v, v * 1.1), median=v,
                                          min=v * 0.95, max=v * 1.1, devices=devices))
    return PointResult(index=i, label=label, settings=(("sm", label),), args=(), status=status,
                       error=error, error_kind=kind, measurements=tuple(ms))


def _report(points: list[PointResult], latency: tuple[RpcLatency, ...] = ()) -> BenchReport:
    return BenchReport(build={"dir": "out/cpu-rpc", "recipe": "cpu-rpc",
                              "upstream_commit": "82bb48500a9a6b3374da2cf5811695369278e4d3",
                              "patches": ["rpc-deserialize-tensor-zero-nbytes"]},
                       model="/m/Qwen3.6-27B-Q4_K_M.gguf",
                       settings={"reps": 3, "base_args": ["-p", "64", "-n", "16", "-r", "3"]},
                       latency=latency, devices=(), points=tuple(points))


PUBLISHED = [  # the numbers: decode tok/s (prompt numbers made up)
    _point(1, "sm=layer", 300.0, 7.79),
    _point(2, "sm=tensor", 410.0, 9.9),
    _point(3, "sm=tensor dev=+RPC1", 200.0, 4.32),
    _point(4, "sm=tensor dev=RPC0/RPC1", None, None, status="failed", kind="oom",
           error="exit 1: cudaMalloc failed: out of memory"),
    _point(5, "sm=layer dev-order=remote-first", 450.0, 7.33),
]


def test_markdown_table() -> None:
    lat = (RpcLatency(endpoint="192.168.1.20:50052", ok=True, version="5.0.0", devices=1, count=20,
                      median_ms=0.412, min_ms=0.35, max_ms=1.2),
           RpcLatency(endpoint="192.168.1.21:50052", ok=False, error="protocol 6.0.0 is not supported"))
    md = render_markdown(_report(PUBLISHED, lat))
    results = md[md.index("## Results"):]
    rows = [ln for ln in results.splitlines() if ln.startswith("| ") and ln[2].isdigit()]
    assert len(rows) == 5
    assert "| decode tok/s (tg16) | prompt tok/s (pp64) |" in md
    assert rows[1] == ("| 2 | sm=tensor | RPC0/RPC1 | **9.90** (9.40–10.9) | 410 (390–451) "
                       "| best decode |")
    assert rows[4].endswith("| 7.33 (6.96–8.06) | **450** (428–495) | best prompt |")
    assert "failed (oom): exit 1: cudaMalloc failed: out of memory" in rows[3]
    assert "| 192.168.1.20:50052 | 5.0.0 | 1 | 0.412 ms | 0.350–1.200 ms |" in md
    assert "not measured: protocol 6.0.0 is not supported" in md
    assert "4 of 5 setups ran, 1 failed." in md
    assert "Fastest decode: **sm=tensor** at 9.90 tok/s." in md
    assert "82bb48500a9a" in md and "rpc-deserialize-tensor-zero-nbytes" in md


def _hex(c: str) -> np.ndarray:
    return np.array([int(c[i:i + 2], 16) / 255 for i in (1, 3, 5)])


def _bars(img: np.ndarray, color: str, x0: int, x1: int) -> list[tuple[int, int]]:
    """(top row, width in px) of each bar of that colour between columns x0 and x1.

    Runs under 10 rows (the legend's swatches) are not bars."""
    mask = (np.abs(img[:, x0:x1, :3] - _hex(color)).max(axis=2) < 0.02)
    rows = np.flatnonzero(mask.sum(axis=1) > 3)
    bars: list[tuple[int, int]] = []
    start = prev = None
    for r in [*rows, None]:
        if r is not None and prev is not None and r == prev + 1:
            prev = r
            continue
        if start is not None:
            cols = np.flatnonzero(mask[start:prev + 1].any(axis=0))
            if prev - start + 1 >= 10:
                bars.append((int(start), int(cols.max() - cols.min() + 1)))
        start = prev = r
    return bars


def test_png_has_the_bars_best_highlighted() -> None:
    import matplotlib.image as mpimg

    png, info = render_png(_report(PUBLISHED))
    img = mpimg.imread(io.BytesIO(png), format="png")
    assert img.shape[:2] == (info.height, info.width) == (430, 1100)
    assert info.bars["decode"] == [7.79, 9.9, 4.32, None, 7.33]
    assert info.best == {"decode": 1, "prompt": 4}
    (d0, d1), (p0, p1) = info.panels["decode"], info.panels["prompt"]
    assert 0 < d0 < d1 < p0 < p1 < info.width  # side by side
    for x0, x1, values, best in ((d0, d1, info.bars["decode"], 1), (p0, p1, info.bars["prompt"], 4)):
        plain, top = _bars(img, BAR_COLOR, x0, x1), _bars(img, BEST_COLOR, x0, x1)
        assert len(plain) == 3 and len(top) == 1  # 4 bars; the failed setup has none
        bars = sorted(plain + top)  # top to bottom = table order
        ok_values = [v for v in values if v is not None]
        assert bars.index(top[0]) == [i for i, v in enumerate(values) if v is not None].index(best)
        widths = [w for _, w in bars]
        for w, v in zip(widths, ok_values, strict=True):  # lengths proportional to the medians
            assert w / widths[0] == pytest.approx(v / ok_values[0], rel=0.03)


def test_png_with_every_point_failed_still_renders(tmp_path: Path) -> None:
    pts = [_point(1, "sm=tensor", None, None, status="failed", kind="abort", error="GGML_ASSERT")]
    write_reports(_report(pts), tmp_path)
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "0 of 1 setups ran, 1 failed." in (tmp_path / "bench.md").read_text()


def test_latency_from_a_protocol_server() -> None:
    from tests.fixtures.rpc_server import FakeRpcServer

    with FakeRpcServer("patched", devices=1) as fake:
        (lat,) = measure_latency([f"127.0.0.1:{fake.port}"], count=5)
    assert lat.ok and lat.version == "5.0.0" and lat.devices == 1 and lat.count == 5
    assert 0 < lat.min_ms <= lat.median_ms <= lat.max_ms


# ---- the whole command, with a fake llama-bench replaying real output ---------------------

FAKE = FAKE_BENCH


def _fake_build(tmp_path: Path, *, help_text: str = HELP, fail: dict[str, str] | None = None,
                rates: dict[str, list[float]] | None = None) -> Path:
    out = tmp_path / "build"
    (out / "bin").mkdir(parents=True)
    shutil.copy(FAKE, out / "bin" / "llama-bench")
    os.chmod(out / "bin" / "llama-bench", 0o755)
    shutil.copy(FAKE_LLAMA, out / "bin" / "ggml-rpc-server")
    os.chmod(out / "bin" / "ggml-rpc-server", 0o755)
    (tmp_path / "help.txt").write_text(help_text)
    (out / "bin" / "bench.json").write_text(json.dumps({
        "help": str(tmp_path / "help.txt"), "record": str(DATA / "layer-2rpc-82bb485.json"),
        "calls": str(tmp_path / "calls.jsonl"), "fail": fail or {}, "rates": rates or {}}))
    (out / "bin" / "fake.json").write_text(json.dumps({  # for fake_llama's ggml-rpc-server
        "mode": "proto-patched", "piddir": str(tmp_path / "pids"),
        "rpc_server": str(RPC_SERVER)}))
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


@pytest.mark.integration
@posix_only
def test_sweep_records_failures_and_goes_on(tmp_path: Path) -> None:
    from tests.fixtures.rpc_server import FakeRpcServer

    build = _fake_build(tmp_path, fail={"-sm tensor -dev RPC0/RPC1": "abort", "-dev RPC1": "oom"},
                        rates={"-sm tensor": [400.0, 9.9], "-sm layer": [300.0, 7.8]})
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    with FakeRpcServer("patched", devices=1) as a, FakeRpcServer("patched", devices=1) as b:
        rpc = f"127.0.0.1:{a.port},127.0.0.1:{b.port}"
        r = _cli("bench", str(tmp_path / "res"), "-m", str(model), "--build", str(build),
                 "--rpc", rpc, "--sweep", "sm=layer,tensor", "--sweep", "dev=RPC0/RPC1,RPC1",
                 "-p", "64", "-n", "16", "-r", "3", "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout[r.stdout.index("{"):])
    got = [(p["label"], p["status"], p["error_kind"]) for p in res["points"]]
    assert got == [("sm=layer dev=RPC0/RPC1", "ok", ""), ("sm=layer dev=RPC1", "failed", "oom"),
                   ("sm=tensor dev=RPC0/RPC1", "failed", "abort"), ("sm=tensor dev=RPC1", "failed", "oom")]
    aborted = res["points"][2]
    assert [m["test"] for m in aborted["measurements"]] == ["pp64"]  # what it printed before dying
    assert "GGML_ASSERT" in aborted["error"]
    assert res["best"]["decode"] == "sm=layer dev=RPC0/RPC1" and res["complete"] is True
    assert [x["ok"] for x in res["rpc_latency"]] == [True, True]
    calls = _calls(tmp_path)
    assert calls[0] == ["--help"] and calls[1] == ["-rpc", rpc, "--list-devices"]
    assert calls[2] == ["-m", str(model), "-rpc", rpc, "-p", "64", "-n", "16", "-r", "3", "-o", "jsonl",
                        "-sm", "layer", "-dev", "RPC0/RPC1"]
    assert len(calls) == 6
    out = tmp_path / "res"
    assert {p.name for p in out.iterdir()} == {"bench.json", "bench.md", "bench.png", "raw"}
    assert "failed (abort)" in (out / "bench.md").read_text()
    assert "GGML_ASSERT" in (out / "raw" / "03.err").read_text()


@pytest.mark.integration
@posix_only
def test_unsupported_sweep_refused_before_anything_runs(tmp_path: Path) -> None:
    build = _fake_build(tmp_path, help_text=_older(HELP, tensor=False))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    r = _cli("bench", str(tmp_path / "res"), "-m", str(model), "--build", str(build),
             "--sweep", "sm=layer,tensor")
    assert r.exit_code == 2
    assert "--sweep sm=tensor: this llama-bench takes -sm none|layer|row" in r.output
    assert _calls(tmp_path) == [["--help"]] and not (tmp_path / "res").exists()
    r = _cli("bench", str(tmp_path / "res"), "-m", str(model), "--build", str(build),
             "--sweep", "dev=CUDA0")  # no such device: refused after --list-devices, before a run
    assert r.exit_code == 2 and "no device 'CUDA0'" in r.output
    assert not (tmp_path / "res").exists()
    r = _cli("bench", str(tmp_path / "res"), "-m", str(model), "--build", str(build),
             "--rpc", "127.0.0.1:1")  # nobody listens: fails before any llama-bench run
    assert r.exit_code == 14 and "connection refused" in r.output
    assert all(c in (["--help"],) or "--list-devices" in c for c in _calls(tmp_path))


@pytest.mark.integration
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
    assert r.exit_code == 2 and "already holds other files" in r.output
    r = _cli("bench", str(tmp_path / "r"), "-m", str(model), "--build", str(build), "--rpc", "host")
    assert r.exit_code == 2 and "is not HOST:PORT" in r.output
    assert _calls(tmp_path) == []  # nothing ran


@pytest.mark.integration
@posix_only
def test_demo_with_fake_binaries_stops_its_servers(tmp_path: Path) -> None:
    build = _fake_build(tmp_path, rates={"-sm tensor": [50.0, 5.0]}, fail={"-sm tensor -dev none": "abort"})
    r = _cli("bench", str(tmp_path / "demo"), "--demo", "--build", str(build))
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "demo" / "bench.json").read_text())
    assert res["demo"] is True and len(res["points"]) == 6
    assert [p["status"] for p in res["points"]] == ["ok", "ok", "ok", "failed", "ok", "ok"]
    eps = [x["endpoint"] for x in res["rpc_latency"]]
    assert len(eps) == 2 and all(e.startswith("127.0.0.1:") for e in eps)
    assert all(x["ok"] for x in res["rpc_latency"])
    bench_calls = [c for c in _calls(tmp_path) if "-m" in c]
    assert all(c[c.index("-rpc") + 1] == ",".join(eps) for c in bench_calls)
    assert len(list((tmp_path / "pids").iterdir())) == 2 and _alive(tmp_path) == []
    assert "demo: a tiny generated llama model" in (tmp_path / "demo" / "bench.md").read_text()


@pytest.mark.integration
@posix_only
def test_ctrl_c_keeps_the_points_done_and_stops_servers(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from patchkit.bench import run as bench
    build = _fake_build(tmp_path)
    real = bench._run_point
    calls = {"n": 0}

    def interrupt(*a, **kw):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(bench, "_run_point", interrupt)
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
    report = run_demo(tmp_path / "demo", build, n_prompt=16, n_gen=4, reps=2,
                      sweep=("sm=layer,tensor", "dev=none,RPC0/RPC1"))
    write_reports(report, tmp_path / "demo")
    assert len(report.points) == 4
    ok = [p for p in report.points if p.status == "ok"]
    assert ok and all(p.decode is not None and len(p.decode.samples_ts) == 2 for p in ok)
    assert all(x.ok and x.median_ms > 0 for x in report.latency) and len(report.latency) == 2
    assert report.best() is not None
    assert (tmp_path / "demo" / "bench.png").stat().st_size > 10_000


@pytest.mark.integration
@posix_only
def test_silent_and_hanging_points_are_failures(tmp_path: Path) -> None:
    build = _fake_build(tmp_path, fail={"-sm tensor": "silent", "-sm none": "hang"})
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    r = _cli("bench", str(tmp_path / "res"), "-m", str(model), "--build", str(build),
             "--sweep", "sm=layer,tensor,none", "--timeout", "2", "-r", "2")
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "res" / "bench.json").read_text())
    got = [(p["status"], p["error_kind"], p["error"]) for p in res["points"]]
    assert got == [("ok", "", ""), ("failed", "error", "llama-bench exited 0 but printed no results"),
                   ("failed", "timeout", "timed out after 2s")]
    assert "3 setups, 2 failed; fastest decode: sm=layer" in r.output
