"""bench.report: the markdown table and the bar chart (read back pixel by pixel)."""

from __future__ import annotations

import dataclasses
import io
import itertools
from pathlib import Path

import matplotlib.font_manager  # noqa: F401  (builds its font cache, which runs fc-list, at collection)
import numpy as np
import pytest

from patchkit.bench.relay import Traffic
from patchkit.bench.report import BAR_COLOR, BEST_COLOR, render_markdown, render_png, write_reports
from patchkit.bench.result import (
    PhaseTraffic,
    PointResult,
    measurements,
    parse_bench_output,
)
from patchkit.bench.run import BenchReport, RpcLatency
from tests.fixtures.paths import BENCH_DATA

DATA = BENCH_DATA


# ---- table and plot -------------------------------------------------------------------------


def _point(
    i: int,
    label: str,
    pp: float | None,
    tg: float | None,
    *,
    status: str = "ok",
    error: str = "",
    kind: str = "",
    devices: str = "RPC0/RPC1",
) -> PointResult:
    base = measurements(parse_bench_output((DATA / "layer-2rpc-82bb485.json").read_text()))
    ms = []
    for m, v in zip(base, (pp, tg), strict=True):
        if v is not None:
            ms.append(
                dataclasses.replace(
                    m, samples_ts=(v * 0.95, v, v * 1.1), median=v, min=v * 0.95, max=v * 1.1, devices=devices
                )
            )
    return PointResult(
        index=i,
        label=label,
        settings=(("sm", label),),
        args=(),
        status=status,
        error=error,
        error_kind=kind,
        measurements=tuple(ms),
    )


def _report(points: list[PointResult], latency: tuple[RpcLatency, ...] = ()) -> BenchReport:
    return BenchReport(
        build={
            "dir": "out/cpu-rpc",
            "recipe": "cpu-rpc",
            "upstream_commit": "82bb48500a9a6b3374da2cf5811695369278e4d3",
            "patches": ["rpc-deserialize-tensor-zero-nbytes"],
        },
        model="/m/Qwen3.6-27B-Q4_K_M.gguf",
        settings={"reps": 3, "base_args": ["-p", "64", "-n", "16", "-r", "3"]},
        latency=latency,
        devices=(),
        points=tuple(points),
    )


PUBLISHED = [  # the numbers: decode tok/s (prompt numbers made up)
    _point(1, "sm=layer", 300.0, 7.79),
    _point(2, "sm=tensor", 410.0, 9.9),
    _point(3, "sm=tensor dev=+RPC1", 200.0, 4.32),
    _point(
        4,
        "sm=tensor dev=RPC0/RPC1",
        None,
        None,
        status="failed",
        kind="oom",
        error="exit 1: cudaMalloc failed: out of memory",
    ),
    _point(5, "sm=layer dev-order=remote-first", 450.0, 7.33),
]


def test_markdown_table() -> None:
    lat = (
        RpcLatency(
            endpoint="192.168.1.20:50052",
            ok=True,
            version="5.0.0",
            devices=1,
            count=20,
            median_ms=0.412,
            min_ms=0.35,
            max_ms=1.2,
        ),
        RpcLatency(endpoint="192.168.1.21:50052", ok=False, error="protocol 6.0.0 is not supported"),
    )
    md = render_markdown(_report(PUBLISHED, lat))
    results = md[md.index("## Results") :]
    rows = [ln for ln in results.splitlines() if ln.startswith("| ") and ln[2].isdigit()]
    assert len(rows) == 5
    assert "| decode tok/s (tg16) | prompt tok/s (pp64) |" in md
    assert rows[1] == ("| 2 | sm=tensor | RPC0/RPC1 | **9.90** (9.40–10.9) | 410 (390–451) | best decode |")
    assert rows[4].endswith("| 7.33 (6.96–8.06) | **450** (428–495) | best prompt |")
    assert "failed (oom): exit 1: cudaMalloc failed: out of memory" in rows[3]
    assert "| 192.168.1.20:50052 | 5.0.0 | 1 | 0.412 ms | 0.350–1.200 ms |" in md
    assert "not measured: protocol 6.0.0 is not supported" in md
    assert "4 of 5 setups ran, 1 failed." in md
    assert "Fastest decode: **sm=tensor** at 9.90 tok/s." in md
    assert "82bb48500a9a" in md and "rpc-deserialize-tensor-zero-nbytes" in md


def _hex(c: str) -> np.ndarray:
    return np.array([int(c[i : i + 2], 16) / 255 for i in (1, 3, 5)])


def _bars(img: np.ndarray, color: str, x0: int, x1: int) -> list[tuple[int, int]]:
    """(top row, width in px) of each bar of that colour between columns x0 and x1.

    Runs under 10 rows (the legend's swatches) are not bars."""
    mask = np.abs(img[:, x0:x1, :3] - _hex(color)).max(axis=2) < 0.02
    rows = np.flatnonzero(mask.sum(axis=1) > 3)
    bars: list[tuple[int, int]] = []
    start = prev = None
    for r in [*rows, None]:
        if r is not None and prev is not None and r == prev + 1:
            prev = r
            continue
        if start is not None:
            cols = np.flatnonzero(mask[start : prev + 1].any(axis=0))
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


# ---- the network: per-token traffic, projections, the second figure --------------------------


def _traffic(mb: float, rt: float, tokens: int = 100, host_s: float = 0.0) -> PhaseTraffic:
    hosts = (
        (
            "10.0.0.2:50052",
            Traffic(
                bytes_up=int(mb * 1e6 * tokens * 0.7),
                host_s=host_s * tokens,
                bytes_down=int(mb * 1e6 * tokens * 0.3),
                round_trips=int(rt * tokens),
                commands=(("SET_TENSOR", tokens), ("GET_TENSOR", int(rt * tokens))),
            ),
        ),
    )
    return PhaseTraffic(tokens=tokens, hosts=hosts if mb or rt else (("10.0.0.2:50052", Traffic()),))


def _net_point(
    i: int,
    label: str,
    tg: float,
    mb: float,
    rt: float,
    *,
    link: str = "none",
    rtt: float = 0.1e-3,
    rate: float = 1.25e9,
    pp: float = 1300.0,
    host_s: float = 0.0,
) -> PointResult:
    p = _point(i, label, pp, tg)
    settings = (("sm", label),) + ((("link", link),) if link != "none" else ())
    return dataclasses.replace(
        p,
        settings=settings,
        traffic=(("decode", _traffic(mb, rt, host_s=host_s)),),
        link=link,
        path_rtt_s=rtt,
        path_bytes_s=rate,
    )


NET = [
    _net_point(1, "local", 9.9, 0, 0),
    _net_point(2, "layer+remote", 5.91, 0.4, 4),
    _net_point(3, "tensor+remote", 0.60, 150, 300, rtt=0.3e-3, rate=125e6),  # run over 1GbE
    # the same setup as #2 through an emulated 1GbE: 1/5.91 - 0.4 ms - 3.2 ms + 1.2 ms + 3.2 ms
    _net_point(
        4,
        "layer+remote",
        1 / (1 / 5.91 - 4 * 0.1e-3 + 4 * 0.3e-3 + 0.4e6 / 125e6 - 0.4e6 / 1.25e9),
        0.4,
        4,
        link="1gbe",
        rtt=0.3e-3,
        rate=125e6,
    ),
]


def test_network_table_projection_and_needed_link() -> None:
    from patchkit.bench.analysis import network

    rep = _report(NET)
    net = network(rep)
    assert net.best_local is NET[0] and len(net.rows) == 4
    r2 = net.rows[1]
    assert r2.mb_per_token == pytest.approx(0.4) and r2.rt_per_token == pytest.approx(4)
    assert r2.t_compute == pytest.approx(1 / 5.91 - 4 * 0.1e-3 - 0.4e6 / 1.25e9)
    assert r2.projected["1gbe"] == pytest.approx(1 / (r2.t_compute + 4 * 0.3e-3 + 0.4e6 / 125e6))
    (check,) = net.checks  # #4 against #2's projection at 1GbE
    assert check.point is NET[3] and check.projected == pytest.approx(check.measured, rel=1e-3)
    md = render_markdown(rep)
    assert "| decode MB/token | decode RT/token | prompt MB/token |" in md
    assert "## The network: what a decoded token costs on the wire" in md
    row3 = next(ln for ln in md.splitlines() if ln.startswith("| 3 | tensor+remote | none |"))
    assert "| 0.60 | 150 | 300 | 377 |" in row3 and "| bandwidth / bandwidth (compute 23%" in row3
    assert "Link needed to come within 10 % of the best local setup (**local**, 9.90 tok/s" in md
    assert "- tensor+remote: none: compute alone is" in md or "- tensor+remote: rtt ≤" in md
    assert "### Projection vs emulated link" in md
    assert "| 4 | layer+remote | 1 Gbit/s, rtt 0.3 ms |" in md and "+0.0%" in md
    assert not check.timed and "| — | — | — |" in md  # no host time: said, not invented
    assert "| 10.0.0.2:50052 |" in md and "GET_TENSOR 4" in md


def test_projection_with_this_runs_host_time_separates_host_drift_from_the_link() -> None:
    """#4 ran at 1GbE while its host took 30 ms/token instead of the unshaped run's 20: the
    plain projection is off by that drift, the one with this run's host time is not."""
    from patchkit.bench.analysis import network

    twin = _net_point(2, "layer+remote", 5.91, 0.4, 4, host_s=0.020)
    t4 = 1 / 5.91 - 4 * 0.1e-3 - 0.4e6 / 1.25e9 + 0.010 + 4 * 0.3e-3 + 0.4e6 / 125e6
    run = _net_point(4, "layer+remote", 1 / t4, 0.4, 4, link="1gbe", rtt=0.3e-3, rate=125e6, host_s=0.030)
    net = network(_report([_net_point(1, "local", 9.9, 0, 0), twin, run]))
    (check,) = net.checks
    assert check.timed and check.host_s == pytest.approx(0.030)
    assert check.twin_host_s == pytest.approx(0.020)
    assert check.error == pytest.approx((1 / (t4 - 0.010) - 1 / t4) * t4)  # off by the drift
    assert check.projected_same_hosts == pytest.approx(check.measured, rel=1e-6)
    md = render_markdown(_report([_net_point(1, "local", 9.9, 0, 0), twin, run]))
    row = next(ln for ln in md.splitlines() if ln.startswith("| 4 | layer+remote | 1 Gbit/s"))
    assert "| 30 / 20 |" in row and row.endswith("| +0.0% |")
    assert "| 10.0.0.2:50052 | 280 | 120 | 4 | 30 |" in md  # host ms per token, per host


def test_png_second_figure_and_prompt_ticks_apart() -> None:
    import matplotlib.image as mpimg

    png, info = render_png(_report(NET))
    img = mpimg.imread(io.BytesIO(png), format="png")
    assert img.shape[:2] == (info.height, info.width) and info.height > 430 + 300
    # projected tok/s against bandwidth and latency, one line per setup run without shaping
    assert set(info.curves["bandwidth"]) == {"local", "layer+remote", "tensor+remote"}
    bw = info.curves["bandwidth"]["tensor+remote"]
    assert bw == sorted(bw) and bw[-1] > 5 * bw[0]  # more bandwidth, faster
    lat = info.curves["latency"]["layer+remote"]
    assert lat == sorted(lat, reverse=True)  # more latency, slower
    assert len(set(info.curves["bandwidth"]["local"])) == 1  # no traffic: flat
    for kind in ("decode", "prompt"):  # prompt numbers in the thousands: labels must not touch
        boxes = info.tick_boxes[kind]
        assert len(boxes) >= 3
        assert all(a[1] < b[0] for a, b in itertools.pairwise(boxes))
