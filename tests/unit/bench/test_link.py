"""bench.link: parsing --link, and shaping on loopback (bounded checks, no tight timing)."""

from __future__ import annotations

import pytest

from patchkit.bench.link import PRESETS, calibrate, measure_path, parse_link
from patchkit.bench.relay import Shaping
from patchkit.bench.sweep import parse_sweep
from patchkit.core.errors import ConfigError


def test_parse_link() -> None:
    assert parse_link("1GbE") is PRESETS["1gbe"]
    assert parse_link("none").shaped is False
    lk = parse_link("rate=1gbit,rtt=0.3ms")
    assert (lk.rate_bit_s, lk.rtt_s, lk.name) == (1e9, 0.3e-3, "rate=1gbit+rtt=0.3ms")
    assert parse_link("rate=100mbit+rtt=50us").rtt_s == pytest.approx(50e-6)
    assert parse_link("rtt=2ms").rate_bit_s == 0  # unlimited bandwidth
    assert parse_link("rate=2.5gbit").describe() == "2.5 Gbit/s"
    for bad, msg in (
        ("1gbx", 'did you mean "1gbe"'),
        ("rate=fast", "not like 1gbit"),
        ("rtt=3", "not like 0.3ms"),
        ("speed=1gbit", "unknown key 'speed'"),
        ("rate=1gbit,rate=2gbit", "given twice"),
        ("rate=0gbit", "above 0"),
    ):
        with pytest.raises(ConfigError, match=msg):
            parse_link(bad)


def test_link_is_a_sweep_key_and_keeps_its_commas_together() -> None:
    (d,) = parse_sweep(["link=none,1gbe,rate=1gbit,rtt=0.3ms,rate=100mbit+rtt=1ms"])
    assert d.values == ("none", "1gbe", "rate=1gbit+rtt=0.3ms", "rate=100mbit+rtt=1ms")
    with pytest.raises(ConfigError, match="not a known link"):
        parse_sweep(["link=fast"])


def test_added_latency_is_there_and_bounded() -> None:
    """A 2 ms delay each way: a round trip can never be shorter than 4 ms."""
    bare = measure_path(Shaping(), pings=5, bulk_bytes=0)
    slow = measure_path(Shaping(delay_s=2e-3), pings=5, bulk_bytes=0, deadline_s=30)
    assert 4e-3 <= slow.rtt_s < 4e-3 + bare.rtt_s + 0.2  # generous: a busy machine


def test_bandwidth_limit_holds_each_way() -> None:
    """40 Mbit/s = 5 MB/s: 1 MiB cannot go faster; a busy machine may make it slower."""
    got = measure_path(Shaping(rate_bytes_s=5e6), pings=3, bulk_bytes=1 << 20, deadline_s=30)
    for v in (got.up_bytes_s, got.down_bytes_s):
        assert 5e6 / 5 < v <= 5e6 * 1.1


def test_calibrate_refuses_what_it_cannot_hold() -> None:
    base = measure_path(Shaping(), pings=5, bulk_bytes=1 << 20)
    with pytest.raises(ConfigError, match="cannot emulate a link that fast") as e:
        calibrate(parse_link("rate=1gbit,rtt=1us"), base=base)
    assert "relay alone takes" in e.value.message
    with pytest.raises(ConfigError, match="did not hold within 10%") as e:
        calibrate(parse_link("rate=1000gbit"), base=base)  # 125 GB/s through Python: no
    assert "instead of 1e+03 Gbit/s" in e.value.message
    none = calibrate(parse_link("none"), base=base)
    assert none.shaping == Shaping() and none.measured is base
