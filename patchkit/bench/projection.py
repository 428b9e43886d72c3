"""What a setup's decode speed would be on another link, and the link it needs.

The model, per token (decode runs one token at a time, and ggml's RPC client waits for
each reply in turn, so nothing on the wire overlaps with compute):

    t(link) = t_compute + round_trips/token x rtt(link) + bytes/token / rate(link)

``t_compute`` comes from the measured run: its time per token minus the wire time of the
path it ran through (the relay on loopback, an emulated link, or a real network whose
bandwidth is unknown: then only its round trips are taken out). Bytes count both ways
(the exchanges alternate, so they do not overlap) and all RPC hosts (their hops run one
after the other).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from patchkit.bench.link import STANDARD_LINKS, Link, fmt_bits

__all__ = [
    "Need",
    "Terms",
    "compute_time",
    "limit",
    "needed_link",
    "project",
    "terms",
]

WITHIN = 0.10  # "within 10 % of the best local setup"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Terms:
    """Seconds per token, split by what takes them."""

    compute: float
    latency: float
    bandwidth: float

    @property
    def total(self) -> float:
        return self.compute + self.latency + self.bandwidth

    @property
    def tok_s(self) -> float:
        return 1.0 / self.total if self.total > 0 else 0.0


def compute_time(
    tok_s: float, round_trips: float, nbytes: float, *, rtt_s: float, rate_bytes_s: float
) -> float:
    """Time per token left when the path's wire time is taken out (never below 0)."""
    wire = round_trips * rtt_s + (nbytes / rate_bytes_s if rate_bytes_s > 0 else 0.0)
    return max(0.0, 1.0 / tok_s - wire)


def terms(t_compute: float, round_trips: float, nbytes: float, link: Link) -> Terms:
    bw = nbytes / link.rate_bytes_s if link.rate_bit_s > 0 else 0.0
    return Terms(compute=t_compute, latency=round_trips * link.rtt_s, bandwidth=bw)


def project(t_compute: float, round_trips: float, nbytes: float, link: Link) -> float:
    """Projected decode tok/s on ``link``."""
    return terms(t_compute, round_trips, nbytes, link).tok_s


def limit(t: Terms) -> str:
    """compute / latency / bandwidth: the largest share of a token's time."""
    shares = {"compute": t.compute, "latency": t.latency, "bandwidth": t.bandwidth}
    return max(shares, key=lambda k: shares[k])


@dataclasses.dataclass(frozen=True, kw_only=True)
class Need:
    """The link a setup needs to come within 10 % of a target tok/s."""

    reachable: bool
    max_rtt_s: float = 0.0  # with unlimited bandwidth (inf: latency does not matter)
    min_rate_bit_s: float = 0.0  # with zero latency (0: bandwidth does not matter)
    first_standard: str = ""  # the slowest standard link that does it, if any
    text: str = ""


def needed_link(
    t_compute: float,
    round_trips: float,
    nbytes: float,
    target_tok_s: float,
    links: Sequence[Link] = STANDARD_LINKS,
    within: float = WITHIN,
) -> Need:
    """What link lets this setup reach (1 - within) x target_tok_s, or why none can."""
    budget = 1.0 / ((1 - within) * target_tok_s)  # seconds per token allowed
    slack = budget - t_compute
    if slack <= 0:
        return Need(
            reachable=False,
            text=f"none: compute alone is {t_compute / (1 / target_tok_s):.2f}x the "
            f"best local time per token",
        )
    max_rtt = slack / round_trips if round_trips > 0 else float("inf")
    min_rate = nbytes * 8 / slack if nbytes > 0 else 0.0
    ok = [lk for lk in links if terms(t_compute, round_trips, nbytes, lk).total <= budget]
    first = min(ok, key=lambda lk: (lk.rate_bit_s, -lk.rtt_s)).name if ok else ""
    parts = []
    if round_trips > 0:
        parts.append(f"rtt ≤ {max_rtt * 1e3:.3g} ms")
    if nbytes > 0:
        parts.append(f"≥ {fmt_bits(min_rate)}")
    text = (" and ".join(parts) + " (each alone)" if len(parts) == 2 else " ".join(parts)) or "any"
    text += f"; {first} does" if first else "; no standard link does"
    return Need(reachable=True, max_rtt_s=max_rtt, min_rate_bit_s=min_rate, first_standard=first, text=text)
