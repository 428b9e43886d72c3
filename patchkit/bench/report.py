"""bench.md (the table) and bench.png (decode and prompt bars side by side).

Best setup: the highest median decode tok/s (and, in the prompt panel, the highest
prompt tok/s). Failed points keep their row, with the error instead of numbers.
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any

from patchkit.bench.result import Measurement, PointResult
from patchkit.bench.run import BenchReport
from patchkit.core.fs import atomic_write_bytes, atomic_write_text

__all__ = ["BAR_COLOR", "BEST_COLOR", "PlotInfo", "fmt_rate", "render_markdown", "render_png",
           "write_reports"]

BAR_COLOR = "#4c72b0"
BEST_COLOR = "#dd8452"
FAIL_COLOR = "#c44e52"
DPI = 100


def fmt_rate(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _cell(m: Measurement | None, same_test: bool, best: bool) -> str:
    if m is None:
        return "—"
    spread = f"{fmt_rate(m.min)}–{fmt_rate(m.max)}"
    value = f"**{fmt_rate(m.median)}**" if best else fmt_rate(m.median)
    text = f"{value} ({spread})"
    return text if same_test else f"{text} {m.test}"


def _tests(points: tuple[PointResult, ...], kind: str) -> list[str]:
    return sorted({m.test for p in points for m in p.measurements if m.kind == kind})


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: BenchReport) -> str:
    b = report.build
    best_d, best_p = report.best("decode"), report.best("prompt")
    s = report.settings
    reps = s.get("reps")
    lines = ["# patchkit bench", ""]
    commit = (b.get("upstream_commit") or "?")[:12]
    patches = ", ".join(b.get("patches") or []) or "none"
    lines.append(f"- build: `{b.get('dir')}`: llama.cpp {commit}, recipe {b.get('recipe')}, "
                 f"patches: {patches}")
    lines.append(f"- model: `{Path(report.model).name}`")
    lines.append(f"- llama-bench {' '.join(s.get('base_args', []))}: one run per setup; "
                 f"tok/s = median (min–max) over {reps} repetitions")
    if report.demo:
        lines.append("- demo: a tiny generated llama model, two ggml-rpc-servers on 127.0.0.1 "
                     "with CPU devices (numbers say nothing about a real rig)")
    if report.devices:
        lines.append("- devices: " + ", ".join(f"{d.name} ({d.description})" for d in report.devices))
    if not report.complete:
        lines.append("- **incomplete**: the sweep was interrupted")
    if report.latency:
        lines += ["", "## RPC hosts: round trip per hop", "",
                  "| host | protocol | devices | round trip (median) | min–max |",
                  "|---|---|---|---|---|"]
        for x in report.latency:
            if x.ok:
                lines.append(f"| {x.endpoint} | {x.version} | {x.devices} | "
                             f"{x.median_ms:.3f} ms | {x.min_ms:.3f}–{x.max_ms:.3f} ms |")
            else:
                lines.append(f"| {x.endpoint} | ? | ? | not measured: {_md_escape(x.error)} | |")
    dec_tests, pp_tests = _tests(report.points, "decode"), _tests(report.points, "prompt")
    dh = f"decode tok/s ({dec_tests[0]})" if len(dec_tests) == 1 else "decode tok/s"
    ph = f"prompt tok/s ({pp_tests[0]})" if len(pp_tests) == 1 else "prompt tok/s"
    lines += ["", "## Results", "", f"| # | setup | devices | {dh} | {ph} | |",
              "|---|---|---|---|---|---|"]
    for p in report.points:
        dev = p.devices or dict(p.settings).get("dev", "auto")
        if p.status == "ok":
            mark = []
            if p is best_d:
                mark.append("best decode")
            if p is best_p:
                mark.append("best prompt")
            lines.append(f"| {p.index} | {_md_escape(p.label)} | {dev} | "
                         f"{_cell(p.decode, len(dec_tests) == 1, p is best_d)} | "
                         f"{_cell(p.prompt, len(pp_tests) == 1, p is best_p)} | "
                         f"{', '.join(mark)} |")
        else:
            what = (f"failed ({p.error_kind}): {p.error}" if p.status == "failed"
                    else f"not run: {p.error}")
            lines.append(f"| {p.index} | {_md_escape(p.label)} | {dev} | "
                         f"{_md_escape(what)} | | |")
    failed = sum(p.status == "failed" for p in report.points)
    ok = sum(p.status == "ok" for p in report.points)
    lines += ["", f"{ok} of {len(report.points)} setups ran, {failed} failed."]
    if best_d is not None and best_d.decode is not None:
        lines.append(f"Fastest decode: **{best_d.label}** at {fmt_rate(best_d.decode.median)} tok/s.")
    if report.latency:
        lines.append("Every RPC hop adds a round trip per token in decode: compare the latency "
                     "above with the decode drop when a remote device is added.")
    return "\n".join(lines) + "\n"


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlotInfo:
    width: int  # pixels
    height: int
    bars: dict[str, list[float | None]]  # panel kind -> median per point (None: no bar)
    best: dict[str, int | None]  # panel kind -> index (0-based row) of the highlighted bar
    panels: dict[str, tuple[int, int]]  # panel kind -> (left, right) pixel columns of its axes


def _panel(ax: Any, points: tuple[PointResult, ...], kind: str, title: str,
           best: PointResult | None) -> list[float | None]:
    ys = list(range(len(points)))
    values: list[float | None] = []
    for y, p in zip(ys, points, strict=True):
        m = p.kind(kind) if p.status == "ok" else None
        values.append(m.median if m else None)
        if m is None:
            why = "failed" if p.status == "failed" else ("not run" if p.status != "ok" else "—")
            ax.text(0, y, f" {why}", va="center", ha="left", color=FAIL_COLOR, fontsize=9)
            continue
        color = BEST_COLOR if p is best else BAR_COLOR
        ax.barh(y, m.median, height=0.6, color=color, edgecolor="none")
        ax.errorbar(m.median, y, xerr=[[m.median - m.min], [m.max - m.median]], fmt="none",
                    ecolor="black", capsize=3, lw=1)
        ax.text(m.max, y, f" {fmt_rate(m.median)}", va="center", ha="left", fontsize=8)
    top = max((v for v in values if v is not None), default=1.0)
    ax.set_xlim(0, top * 1.25)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("tokens/s")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    return values


def render_png(report: BenchReport) -> tuple[bytes, PlotInfo]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    points = report.points
    n = max(len(points), 1)
    w_in, h_in = 11.0, max(3.0, 0.5 * n + 1.8)
    fig = Figure(figsize=(w_in, h_in), dpi=DPI)
    FigureCanvasAgg(fig)
    axd, axp = fig.subplots(1, 2, sharey=True)
    best_d, best_p = report.best("decode"), report.best("prompt")
    dec, pp = _tests(points, "decode"), _tests(points, "prompt")
    bars = {
        "decode": _panel(axd, points, "decode",
                         "decode tok/s" + (f" ({dec[0]})" if len(dec) == 1 else ""), best_d),
        "prompt": _panel(axp, points, "prompt",
                         "prompt tok/s" + (f" ({pp[0]})" if len(pp) == 1 else ""), best_p),
    }
    axd.set_yticks(range(len(points)), [p.label for p in points], fontsize=9)
    axd.invert_yaxis()  # first setup at the top, like the table
    fig.legend(handles=[Patch(color=BEST_COLOR, label="best"), Patch(color=BAR_COLOR, label="setup")],
               loc="upper right", fontsize=8, frameon=False)
    title = f"patchkit bench: {Path(report.model).name}"
    if report.demo:
        title += " (demo: loopback RPC, CPU)"
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    panels = {}
    for kind, ax in (("decode", axd), ("prompt", axp)):
        box = ax.get_window_extent()
        panels[kind] = (round(box.x0), round(box.x1))
    idx = {p.label: i for i, p in enumerate(points)}
    info = PlotInfo(width=round(w_in * DPI), height=round(h_in * DPI), bars=bars,
                    best={"decode": idx.get(best_d.label) if best_d else None,
                          "prompt": idx.get(best_p.label) if best_p else None},
                    panels=panels)
    return buf.getvalue(), info


def write_reports(report: BenchReport, out_dir: Path) -> PlotInfo:
    """bench.md and bench.png (bench.json is written by run_bench as it goes)."""
    atomic_write_text(out_dir / "bench.md", render_markdown(report))
    png, info = render_png(report)
    atomic_write_bytes(out_dir / "bench.png", png)
    return info
