"""bench.md (the tables) and bench.png (decode and prompt bars side by side; below them,
when RPC traffic was counted, projected decode tok/s against link bandwidth and latency).

Best setup: the highest median decode tok/s (and, in the prompt panel, the highest
prompt tok/s). Failed points keep their row, with the error instead of numbers.

Rendering only: the network analysis it draws (per-token wire cost, projections, the
link each setup needs, projection vs emulation) is ``bench.analysis``.
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any

from patchkit.bench.analysis import Network, network
from patchkit.bench.link import STANDARD_LINKS, Link, fmt_bits
from patchkit.bench.projection import Terms, limit, terms
from patchkit.bench.result import Measurement, PointResult
from patchkit.bench.run import BenchReport
from patchkit.core.fs import atomic_write_bytes, atomic_write_text

__all__ = [
    "BAR_COLOR",
    "BEST_COLOR",
    "PlotInfo",
    "fmt_rate",
    "render_markdown",
    "render_png",
    "write_reports",
]

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


def _share(t: Terms) -> str:
    tot = t.total or 1.0
    return (
        f"{limit(t)} (compute {t.compute / tot:.0%}, latency {t.latency / tot:.0%}, "
        f"bandwidth {t.bandwidth / tot:.0%})"
    )


def _mb(v: float) -> str:
    return f"{v:.3g}" if v else "0"


def _network_md(report: BenchReport, net: Network) -> list[str]:
    if not net.rows:
        return []
    lines = [
        "",
        "## The network: what a decoded token costs on the wire",
        "",
        "Counted by patchkit's relay between llama-bench and each RPC host: bytes both ways "
        "and round trips (commands the client waits for) per token, from llama-bench run "
        "with -r R minus the same run with -r 1 (loading and warmup cancel out). "
        "Projection: time/token = compute + RT/token × rtt + bytes/token ÷ bandwidth, with "
        "compute = the measured time/token minus the wire time of the path it ran through.",
        "",
    ]
    heads = " | ".join(
        f"{lk.name} ({fmt_bits(lk.rate_bit_s)}, {lk.rtt_s * 1e3:g} ms)" for lk in STANDARD_LINKS
    )
    lines += [
        f"| # | setup | link | decode tok/s | MB/token | RT/token | compute ms/token | "
        f"{heads} | what limits it: as run / at 1gbe |",
        "|---|---|---|---|---|---|---|" + "---|" * len(STANDARD_LINKS) + "---|",
    ]
    for r in net.rows:
        proj = " | ".join(fmt_rate(r.projected[lk.name]) for lk in STANDARD_LINKS)
        lines.append(
            f"| {r.point.index} | {_md_escape(r.point.label)} | {r.point.link or '—'} | "
            f"{fmt_rate(r.tok_s)} | {_mb(r.mb_per_token)} | {r.rt_per_token:.3g} | "
            f"{fmt_rate(r.t_compute * 1e3)} | {proj} | {limit(r.as_run)} / "
            f"{_share(r.at_1gbe)} |"
        )
    if net.best_local is not None and net.best_local.decode is not None:
        target = net.best_local.decode.median
        lines += [
            "",
            f"Link needed to come within 10 % of the best local setup "
            f"(**{_md_escape(net.best_local.label)}**, {fmt_rate(target)} tok/s, "
            f"no RPC traffic per token):",
            "",
        ]
        for r in net.rows:
            if r.need is None or r.point is net.best_local or (r.nbytes == 0 and r.rt_per_token == 0):
                continue
            lines.append(
                f"- {_md_escape(r.point.label)}"
                + (f" ({r.point.link})" if r.point.link not in ("", "none") else "")
                + f": {r.need.text}"
            )
    else:
        lines += [
            "",
            "No local setup (one without RPC traffic per token) in this sweep: "
            "add `dev=none` or `dev=local` to see the link each setup needs.",
        ]
    if net.checks:
        lines += [
            "",
            "### Projection vs emulated link",
            "",
            "Each setup run through an emulated link, against the projection from the same "
            "setup without shaping. The hosts' time per token (timed by the relay: compute "
            "and the path to them, not the link) can move between two runs on a busy "
            "machine; the last two columns project again with this run's host time, so "
            "they show what the link model alone gets wrong:",
            "",
            "| # | setup | link | measured tok/s | projected tok/s | off by | "
            "host ms/token (here / unshaped) | projected, this run's hosts | off by |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for c in net.checks:
            tail = (
                f"{c.host_s * 1e3:.3g} / {c.twin_host_s * 1e3:.3g} | "
                f"{fmt_rate(c.projected_same_hosts)} | {c.error_same_hosts:+.1%}"
                if c.timed
                else "— | — | —"
            )
            lines.append(
                f"| {c.point.index} | {_md_escape(c.point.label)} | {c.link.describe()} | "
                f"{fmt_rate(c.measured)} | {fmt_rate(c.projected)} | {c.error:+.1%} | "
                f"{tail} |"
            )
    wire = [r for r in net.rows if r.nbytes or r.rt_per_token]
    if wire:
        lines += [
            "",
            "### Per host, per decoded token",
            "",
            "| # | setup | host | up KB | down KB | RT | host ms | commands per token |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in wire:
            t = r.point.phase_traffic("decode")
            assert t is not None
            for ep, tr in t.hosts:
                if not tr.bytes:
                    continue  # a host this setup does not use
                cmds = ", ".join(
                    f"{n} {c / t.tokens:.3g}" for n, c in sorted(tr.commands, key=lambda x: -x[1]) if c
                )
                up, down = tr.bytes_up / t.tokens / 1e3, tr.bytes_down / t.tokens / 1e3
                lines.append(
                    f"| {r.point.index} | {_md_escape(r.point.label)} | {ep} | "
                    f"{fmt_rate(up)} | {fmt_rate(down)} | "
                    f"{tr.round_trips / t.tokens:.3g} | "
                    f"{tr.host_s / t.tokens * 1e3:.3g} | {cmds or '—'} |"
                )
    return lines


def render_markdown(report: BenchReport) -> str:
    b = report.build
    best_d, best_p = report.best("decode"), report.best("prompt")
    s = report.settings
    reps = s.get("reps")
    lines = ["# patchkit bench", ""]
    commit = (b.get("upstream_commit") or "?")[:12]
    patches = ", ".join(b.get("patches") or []) or "none"
    lines.append(
        f"- build: `{b.get('dir')}`: llama.cpp {commit}, recipe {b.get('recipe')}, patches: {patches}"
    )
    lines.append(f"- model: `{Path(report.model).name}`")
    lines.append(
        f"- llama-bench {' '.join(s.get('base_args', []))}: one run per setup; "
        f"tok/s = median (min–max) over {reps} repetitions"
    )
    if report.demo:
        what = s.get("model_note") or "a tiny generated llama model"
        lines.append(
            f"- demo: {what}; two ggml-rpc-servers on 127.0.0.1 with CPU devices "
            "(numbers say nothing about a real rig)"
        )
    for c in report.links:
        m = c.measured
        what = (
            "the relay alone (no shaping)"
            if not c.link.shaped
            else f"emulated link {c.link.name} ({c.link.describe()})"
        )
        lines.append(
            f"- {what}: measured on loopback {m.rtt_s * 1e3:.3f} ms round trip, "
            f"{fmt_bits(m.up_bytes_s * 8)} up, {fmt_bits(m.down_bytes_s * 8)} down"
        )
    if report.devices:
        lines.append("- devices: " + ", ".join(f"{d.name} ({d.description})" for d in report.devices))
    if not report.complete:
        lines.append("- **incomplete**: the sweep was interrupted")
    if report.latency:
        lines += [
            "",
            "## RPC hosts: round trip per hop",
            "",
            "| host | protocol | devices | round trip (median) | min–max |",
            "|---|---|---|---|---|",
        ]
        for x in report.latency:
            if x.ok:
                lines.append(
                    f"| {x.endpoint} | {x.version} | {x.devices} | "
                    f"{x.median_ms:.3f} ms | {x.min_ms:.3f}–{x.max_ms:.3f} ms |"
                )
            else:
                lines.append(f"| {x.endpoint} | ? | ? | not measured: {_md_escape(x.error)} | |")
    dec_tests, pp_tests = _tests(report.points, "decode"), _tests(report.points, "prompt")
    dh = f"decode tok/s ({dec_tests[0]})" if len(dec_tests) == 1 else "decode tok/s"
    ph = f"prompt tok/s ({pp_tests[0]})" if len(pp_tests) == 1 else "prompt tok/s"
    net = network(report)
    counted = any(t.counted for p in report.points for _, t in p.traffic)
    th = " decode MB/token | decode RT/token | prompt MB/token |" if counted else ""
    lines += [
        "",
        "## Results",
        "",
        f"| # | setup | devices | {dh} | {ph} |{th} |",
        "|---|---|---|---|---|" + ("---|---|---|" if counted else "") + "---|",
    ]
    for p in report.points:
        dev = p.devices or dict(p.settings).get("dev", "auto")
        if p.status == "ok":
            mark = []
            if p is best_d:
                mark.append("best decode")
            if p is best_p:
                mark.append("best prompt")
            lines.append(
                f"| {p.index} | {_md_escape(p.label)} | {dev} | "
                f"{_cell(p.decode, len(dec_tests) == 1, p is best_d)} | "
                f"{_cell(p.prompt, len(pp_tests) == 1, p is best_p)} |"
                + (_traffic_cells(p) if counted else "")
                + f" {', '.join(mark)} |"
            )
        else:
            what = (
                f"failed ({p.error_kind}): {p.error}"
                if p.status == "failed"
                else p.error
                if p.status == "skipped"
                else f"not run: {p.error}"
            )
            lines.append(
                f"| {p.index} | {_md_escape(p.label)} | {dev} | "
                f"{_md_escape(what)} | |" + (" | | |" if counted else "") + " |"
            )
    failed = sum(p.status == "failed" for p in report.points)
    ok = sum(p.status == "ok" for p in report.points)
    lines += ["", f"{ok} of {len(report.points)} setups ran, {failed} failed."]
    if best_d is not None and best_d.decode is not None:
        lines.append(f"Fastest decode: **{best_d.label}** at {fmt_rate(best_d.decode.median)} tok/s.")
    if report.latency and not net.rows:
        lines.append(
            "Every RPC hop adds a round trip per token in decode: compare the latency "
            "above with the decode drop when a remote device is added."
        )
    notes = [f"#{p.index} {k}: {t.note}" for p in report.points for k, t in p.traffic if t.note]
    if notes:
        lines += ["", "Traffic notes: " + "; ".join(_md_escape(n) for n in notes) + "."]
    lines += _network_md(report, net)
    return "\n".join(lines) + "\n"


def _traffic_cells(p: PointResult) -> str:
    cells = []
    for kind, what in (("decode", "mb"), ("decode", "rt"), ("prompt", "mb")):
        t = p.phase_traffic(kind)
        if t is None or not t.counted:
            cells.append("—")
        elif what == "mb":
            cells.append(_mb(t.bytes_per_token / 1e6))
        else:
            cells.append(f"{t.rt_per_token:.3g}")
    return " " + " | ".join(cells) + " |"


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlotInfo:
    width: int  # pixels
    height: int
    bars: dict[str, list[float | None]]  # panel kind -> median per point (None: no bar)
    best: dict[str, int | None]  # panel kind -> index (0-based row) of the highlighted bar
    panels: dict[str, tuple[int, int]]  # panel kind -> (left, right) pixel columns of its axes
    tick_boxes: dict[str, list[tuple[float, float]]] = dataclasses.field(default_factory=dict)
    # panel kind -> (left, right) pixels of each visible x tick label, left to right
    curves: dict[str, dict[str, list[float]]] = dataclasses.field(default_factory=dict)
    # "bandwidth"/"latency" -> setup label -> projected tok/s along the x axis


def _panel(
    ax: Any, points: tuple[PointResult, ...], kind: str, title: str, best: PointResult | None
) -> list[float | None]:
    from matplotlib.ticker import MaxNLocator

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
        ax.errorbar(
            m.median,
            y,
            xerr=[[m.median - m.min], [m.max - m.median]],
            fmt="none",
            ecolor="black",
            capsize=3,
            lw=1,
        )
        ax.text(m.max, y, f" {fmt_rate(m.median)}", va="center", ha="left", fontsize=8)
    top = max((v for v in values if v is not None), default=1.0)
    ax.set_xlim(0, top * 1.25)
    # at most 5 ticks: with wide numbers (1,200 tok/s) more labels collide in a half-width panel
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("tokens/s")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    return values


BW_GRID = [10 ** (e / 8) for e in range(-8, 17)]  # 0.1 .. 100 Gbit/s
RTT_GRID = [10 ** (e / 8) for e in range(-19, 9)]  # 0.004 .. 10 ms


def _projection_panels(axb: Any, axl: Any, net: Network) -> dict[str, dict[str, list[float]]]:
    """Projected decode tok/s against bandwidth (no added latency) and round trip
    (unlimited bandwidth), one line per setup; the best local setup as a dashed line."""
    curves: dict[str, dict[str, list[float]]] = {"bandwidth": {}, "latency": {}}
    rows = [r for r in net.rows if r.point.link in ("none", "")] or list(net.rows)
    for r in rows:
        bw = [
            terms(r.t_compute, r.rt_per_token, r.nbytes, Link(name="x", rate_bit_s=g * 1e9)).tok_s
            for g in BW_GRID
        ]
        lat = [
            terms(r.t_compute, r.rt_per_token, r.nbytes, Link(name="x", rtt_s=ms * 1e-3)).tok_s
            for ms in RTT_GRID
        ]
        curves["bandwidth"][r.point.label] = bw
        curves["latency"][r.point.label] = lat
        (line,) = axb.plot(BW_GRID, bw, lw=1.5, label=r.point.label)
        axl.plot(RTT_GRID, lat, lw=1.5, color=line.get_color())
    for ax, key, xs, xlabel, title in (
        (
            axb,
            "rate",
            BW_GRID,
            "link bandwidth, Gbit/s (log; no added latency)",
            "projected decode tok/s vs bandwidth",
        ),
        (
            axl,
            "rtt",
            RTT_GRID,
            "round trip, ms (log; unlimited bandwidth)",
            "projected decode tok/s vs latency",
        ),
    ):
        ax.set_xscale("log")
        ax.set_xlim(xs[0], xs[-1])
        ax.set_ylim(bottom=0)
        ax.set_xlabel(xlabel, fontsize=9)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, which="both")
        for lk in STANDARD_LINKS:
            x = lk.rate_bit_s / 1e9 if key == "rate" else lk.rtt_s * 1e3
            ax.axvline(x, color="grey", lw=0.8, ls=":")
            ax.text(
                x,
                1.0,
                lk.name,
                transform=ax.get_xaxis_transform(),
                fontsize=7,
                rotation=90,
                va="top",
                ha="right",
                color="grey",
            )
        if net.best_local is not None and net.best_local.decode is not None:
            ax.axhline(net.best_local.decode.median * 0.9, color="black", lw=0.8, ls="--")
    axb.set_ylabel("tokens/s")
    if net.best_local is not None:
        axb.plot([], [], color="black", lw=0.8, ls="--", label="best local - 10 %")
    axb.legend(fontsize=7, loc="lower right", frameon=False)
    return curves


def _tick_boxes(fig: Any, ax: Any) -> list[tuple[float, float]]:
    renderer = fig.canvas.get_renderer()
    lo, hi = ax.get_xlim()
    boxes = []
    for t, lab in zip(ax.get_xticks(), ax.get_xticklabels(), strict=True):
        if lo <= t <= hi and lab.get_text():
            e = lab.get_window_extent(renderer)
            boxes.append((e.x0, e.x1))
    return sorted(boxes)


def render_png(report: BenchReport) -> tuple[bytes, PlotInfo]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    points = report.points
    n = max(len(points), 1)
    net = network(report)
    bars_h = max(3.0, 0.5 * n + 1.8)
    w_in, h_in = 11.0, bars_h + (4.0 if net.rows else 0.0)
    fig = Figure(figsize=(w_in, h_in), dpi=DPI)
    FigureCanvasAgg(fig)
    if net.rows:
        grid = fig.add_gridspec(2, 2, height_ratios=[bars_h, 4.0])
        axd = fig.add_subplot(grid[0, 0])
        axp = fig.add_subplot(grid[0, 1], sharey=axd)
        axp.tick_params(labelleft=False)
        axb, axl = fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])
    else:
        axd, axp = fig.subplots(1, 2, sharey=True)
    best_d, best_p = report.best("decode"), report.best("prompt")
    dec, pp = _tests(points, "decode"), _tests(points, "prompt")
    bars = {
        "decode": _panel(
            axd, points, "decode", "decode tok/s" + (f" ({dec[0]})" if len(dec) == 1 else ""), best_d
        ),
        "prompt": _panel(
            axp, points, "prompt", "prompt tok/s" + (f" ({pp[0]})" if len(pp) == 1 else ""), best_p
        ),
    }
    axd.set_yticks(range(len(points)), [p.label for p in points], fontsize=9)
    axd.invert_yaxis()  # first setup at the top, like the table
    fig.legend(
        handles=[Patch(color=BEST_COLOR, label="best"), Patch(color=BAR_COLOR, label="setup")],
        loc="upper right",
        fontsize=8,
        frameon=False,
    )
    title = f"patchkit bench: {Path(report.model).name}"
    if report.demo:
        title += " (demo: loopback RPC, CPU)"
    fig.suptitle(title, fontsize=11)
    curves = _projection_panels(axb, axl, net) if net.rows else {}
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    panels = {}
    for kind, ax in (("decode", axd), ("prompt", axp)):
        box = ax.get_window_extent()
        panels[kind] = (round(box.x0), round(box.x1))
    idx = {p.label: i for i, p in enumerate(points)}
    info = PlotInfo(
        width=round(w_in * DPI),
        height=round(h_in * DPI),
        bars=bars,
        best={
            "decode": idx.get(best_d.label) if best_d else None,
            "prompt": idx.get(best_p.label) if best_p else None,
        },
        panels=panels,
        tick_boxes={k: _tick_boxes(fig, ax) for k, ax in (("decode", axd), ("prompt", axp))},
        curves=curves,
    )
    return buf.getvalue(), info


def write_reports(report: BenchReport, out_dir: Path) -> PlotInfo:
    """bench.md and bench.png (bench.json is written by run_bench as it goes)."""
    atomic_write_text(out_dir / "bench.md", render_markdown(report))
    png, info = render_png(report)
    atomic_write_bytes(out_dir / "bench.png", png)
    return info
