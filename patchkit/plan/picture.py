"""The plan's picture: for the top arrangements, each device's memory (model, context,
compute stacked) against its capacity, and the predicted decode tok/s beside them."""

from __future__ import annotations

import io

from patchkit.plan.report import PlanArrangement, PlanReport

__all__ = ["render_png"]

GIB = 1 << 30
DPI = 110


def render_png(rep: PlanReport, *, top: int = 8) -> bytes:
    """PNG bytes (Agg, no display needed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows: list[PlanArrangement] = [a for a in rep.arrangements if a.devices or a.split_mode == "none"]
    rows = [a for a in rows if a.command][:top]
    fig = Figure(figsize=(12, 1.2 + 0.9 * max(1, len(rows))))
    FigureCanvasAgg(fig)
    ax, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 1]}, sharey=True)
    colours = {"model": "#4c72b0", "context": "#dd8452", "compute": "#55a868"}
    labels: list[str] = []
    y = 0.0
    ticks: list[float] = []
    for a in rows:
        mems = [(d.name + (f"@{d.host}" if d.host else ""), d.memory) for d in a.devices]
        mems.append(("host", a.host_memory))
        n = len(mems)
        h = 0.8 / n
        for j, (name, m) in enumerate(mems):
            if m is None:
                continue
            yy = y + j * h
            left = 0.0
            for part in ("model", "context", "compute"):
                v = getattr(m, part) / GIB
                ax.barh(yy, v, height=h * 0.9, left=left, color=colours[part])
                left += v
            cap = m.capacity / GIB
            ax.plot(
                [cap, cap], [yy - h * 0.45, yy + h * 0.45], color="red" if m.total > m.capacity else "black"
            )
            ax.text(left + 0.1, yy, name, va="center", fontsize=7)
        ticks.append(y + 0.4 - h / 2)
        labels.append(("✓ " if a.fits else "✕ ") + a.description[:48])
        ax2.barh(y + 0.4 - h / 2, a.decode_tps, height=0.6, color="#8172b3" if a.calibrated else "#bbbbbb")
        ax2.text(a.decode_tps, y + 0.4 - h / 2, f" {a.decode_tps:.1f}", va="center", fontsize=7)
        y += 1.0
    # the axis spans the devices (a host's RAM would dwarf them); a longer bar runs off it
    span = [m.capacity for a in rows for d in a.devices if (m := d.memory) is not None]
    span += [m.total for a in rows for d in a.devices if (m := d.memory) is not None]
    if span:
        ax.set_xlim(0, max(span) / GIB * 1.15)
    ax.set_yticks(ticks, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("GiB per device (bar: model | context | compute; tick: capacity)")
    ax2.set_xlabel("decode tok/s (grey: uncalibrated)")
    ax.set_title(f"{rep.model.name} at {rep.ctx} context", loc="left", fontsize=9)
    handles = [ax.barh(0, 0, color=c, label=k) for k, c in colours.items()]
    ax.legend(handles=handles, loc="lower right", fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()
