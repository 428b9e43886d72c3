"""bench.projection: the model's arithmetic, with the experiment's numbers."""

from __future__ import annotations

import pytest

from patchkit.bench.link import PRESETS, Link
from patchkit.bench.projection import compute_time, limit, needed_link, project, terms


def test_compute_time_takes_the_path_out() -> None:
    # 10 tok/s = 100 ms/token; 20 round trips at 1 ms and 5 MB at 1 GB/s = 20 + 5 ms on the wire
    assert compute_time(10.0, 20, 5e6, rtt_s=1e-3, rate_bytes_s=1e9) == pytest.approx(0.075)
    assert compute_time(10.0, 20, 5e6, rtt_s=1e-3, rate_bytes_s=0) == pytest.approx(0.080)  # bw unknown
    assert compute_time(10.0, 1000, 0, rtt_s=1e-3, rate_bytes_s=0) == 0.0  # never negative


def test_terms_project_and_limit() -> None:
    t = terms(0.1, 10, 150e6, PRESETS["1gbe"])  # the experiment's ~150 MB/token tensor split
    assert (t.compute, t.latency, t.bandwidth) == pytest.approx((0.1, 10 * 0.3e-3, 150e6 / 125e6))
    assert t.total == pytest.approx(1.303) and limit(t) == "bandwidth"
    assert project(0.1, 10, 150e6, PRESETS["1gbe"]) == pytest.approx(1 / 1.303)
    assert limit(terms(0.1, 1000, 0, PRESETS["1gbe"])) == "latency"  # 300 ms of round trips
    assert limit(terms(0.1, 10, 1e3, PRESETS["10gbe"])) == "compute"
    assert terms(0.1, 10, 1e6, Link(name="x")).total == 0.1  # an ideal link


def test_needed_link() -> None:
    # best local 9.9 tok/s: within 10 % is 1 / (0.9 * 9.9) = 112.2 ms per token
    budget = 1 / (0.9 * 9.9)
    n = needed_link(0.1, 10, 150e6, 9.9)
    assert n.reachable and n.max_rtt_s == pytest.approx((budget - 0.1) / 10)
    assert n.min_rate_bit_s == pytest.approx(150e6 * 8 / (budget - 0.1))  # ~98 Gbit/s
    assert n.first_standard == "" and "no standard link does" in n.text
    small = needed_link(0.1, 4, 2e6, 9.9)  # 2 MB/token: 2.5GbE is enough (7.2 ms), 1GbE not (17.2)
    assert small.first_standard == "2.5gbe" and "2.5gbe does" in small.text
    assert "rtt ≤" in small.text and "Gbit/s" in small.text
    slow = needed_link(0.2, 1, 1, 9.9)
    assert not slow.reachable and "compute alone is 1.98x" in slow.text
    free = needed_link(0.1, 0, 0, 9.9)
    assert free.reachable and free.text.startswith("any")
