"""bench.report: the markdown table and the bar chart (read back pixel by pixel)."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import matplotlib.font_manager  # noqa: F401  (builds its font cache, which runs fc-list, at collection)
import numpy as np
import pytest

from patchkit.bench.report import BAR_COLOR, BEST_COLOR, render_markdown, render_png, write_reports
from patchkit.bench.result import (
    PointResult,
    measurements,
    parse_bench_output,
)
from patchkit.bench.run import BenchReport, RpcLatency
from tests.fixtures.paths import BENCH_DATA

DATA = BENCH_DATA


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
