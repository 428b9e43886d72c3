"""What a bench run says about the network: each setup's per-token wire cost, its decode
speed projected onto the standard links and the link it needs (the model is
``bench.projection``), and projection against emulation (a setup run through an emulated
link, compared with the projection from its twin run without shaping).

Analysis only: ``bench.report`` renders it (bench.md, bench.png), ``patchkit bench``
prints its projection lines.
"""

from __future__ import annotations

import dataclasses

from patchkit.bench.link import PRESETS, STANDARD_LINKS, Link, parse_link
from patchkit.bench.projection import Need, Terms, compute_time, needed_link, terms
from patchkit.bench.result import PointResult
from patchkit.bench.run import BenchReport

__all__ = ["Check", "Network", "Row", "network"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Row:
    """One setup's decode on the wire and what the model makes of it."""

    point: PointResult
    tok_s: float
    mb_per_token: float
    rt_per_token: float
    t_compute: float  # s/token without the wire
    as_run: Terms  # the path it ran through
    projected: dict[str, float]  # standard link name -> tok/s
    at_1gbe: Terms
    need: Need | None  # None: no local setup to compare with

    @property
    def nbytes(self) -> float:
        return self.mb_per_token * 1e6


@dataclasses.dataclass(frozen=True, kw_only=True)
class Check:
    """Projection vs emulation: a setup run at an emulated link, projected from its
    twin run without shaping."""

    point: PointResult
    link: Link
    measured: float
    projected: float
    # the hosts' time per token in this run and in the unshaped one (0: not timed, a
    # bench.json from before the relay timed hosts); the projection again with this run's
    # host time: what the link model alone gets wrong, apart from hosts that got slower or
    # faster between the two runs (a busy machine, another core)
    host_s: float = 0.0
    twin_host_s: float = 0.0
    projected_same_hosts: float = 0.0

    @property
    def error(self) -> float:
        return (self.projected - self.measured) / self.measured

    @property
    def timed(self) -> bool:
        return self.host_s > 0 and self.twin_host_s > 0

    @property
    def error_same_hosts(self) -> float:
        return (self.projected_same_hosts - self.measured) / self.measured


@dataclasses.dataclass(frozen=True, kw_only=True)
class Network:
    rows: tuple[Row, ...]
    best_local: PointResult | None
    checks: tuple[Check, ...]


def _link_of(name: str) -> Link | None:
    try:
        return PRESETS.get(name) or parse_link(name)
    except Exception:  # a bench.json from elsewhere: no projection for it
        return None


def network(report: BenchReport) -> Network:
    """Per-token wire cost of every setup whose decode traffic was counted, and the model."""
    rows: list[Row] = []
    local = [
        p
        for p in report.points
        if p.status == "ok"
        and p.decode is not None
        and (t := p.phase_traffic("decode")) is not None
        and t.counted
        and t.bytes_per_token == 0
        and t.rt_per_token == 0
    ]
    best_local = max(local, key=lambda p: p.decode.median, default=None)  # type: ignore[union-attr]
    for p in report.points:
        t = p.phase_traffic("decode")
        if p.status != "ok" or p.decode is None or t is None or not t.counted:
            continue
        tok_s, rt, nb = p.decode.median, t.rt_per_token, t.bytes_per_token
        tc = compute_time(tok_s, rt, nb, rtt_s=p.path_rtt_s, rate_bytes_s=p.path_bytes_s)
        path = Link(name="as run", rate_bit_s=p.path_bytes_s * 8, rtt_s=p.path_rtt_s)
        need = None
        if best_local is not None and best_local.decode is not None:
            need = needed_link(tc, rt, nb, best_local.decode.median)
        rows.append(
            Row(
                point=p,
                tok_s=tok_s,
                mb_per_token=nb / 1e6,
                rt_per_token=rt,
                t_compute=tc,
                as_run=terms(tc, rt, nb, path),
                projected={lk.name: terms(tc, rt, nb, lk).tok_s for lk in STANDARD_LINKS},
                at_1gbe=terms(tc, rt, nb, PRESETS["1gbe"]),
                need=need,
            )
        )
    checks: list[Check] = []
    by_setup = {_setup_key(r.point): r for r in rows if r.point.link in ("none", "")}
    for r in rows:
        if r.point.link in ("none", ""):
            continue
        twin, link = by_setup.get(_setup_key(r.point)), _link_of(r.point.link)
        if twin is None or link is None:
            continue
        proj = terms(twin.t_compute, twin.rt_per_token, twin.nbytes, link).tok_s
        host, twin_host = _host_s(r.point), _host_s(twin.point)
        same = proj
        if host > 0 and twin_host > 0:
            tc = max(0.0, twin.t_compute + host - twin_host)
            same = terms(tc, twin.rt_per_token, twin.nbytes, link).tok_s
        checks.append(
            Check(
                point=r.point,
                link=link,
                measured=r.tok_s,
                projected=proj,
                host_s=host,
                twin_host_s=twin_host,
                projected_same_hosts=same,
            )
        )
    return Network(rows=tuple(rows), best_local=best_local, checks=tuple(checks))


def _host_s(p: PointResult) -> float:
    t = p.phase_traffic("decode")
    return t.host_s_per_token if t is not None else 0.0


def _setup_key(p: PointResult) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in p.settings if k != "link")
