"""The device table and device specs: names, outright values, remote hosts, refusals."""

from __future__ import annotations

import pytest

from patchkit.bench.link import parse_link
from patchkit.core.errors import ConfigError
from patchkit.plan.devices import load_table, parse_device

GIB = 1 << 30


def test_the_shipped_table_has_the_rig_and_each_row_its_source() -> None:
    t = load_table()
    for name in (
        "rtx3070",
        "p100-16g",
        "p100-12g",
        "gtx1660",
        "rtx3060-12g",
        "rtx3090",
        "rtx4090",
        "a100-40g",
        "h100",
        "h200",
        "cpu",
    ):
        assert name in t
        assert t[name].source.startswith("https://")
    assert t["rtx3070"].bw_gbs == 448 and t["p100-16g"].bw_gbs == 732 and t["gtx1660"].bw_gbs == 192
    assert t["p100-12g"].bw_gbs == 549
    # sm_60 has no dp4a: its efficiency is lower, and the row says why
    assert t["p100-16g"].efficiency < t["rtx3070"].efficiency
    assert "dp4a" in t["p100-16g"].why.lower()


def test_a_table_row_out_of_range_or_without_source() -> None:
    with pytest.raises(ConfigError, match="row bad: bw_gbs = 0 is out of range"):
        load_table('[bad]\nvram = 1\nbw_gbs = 0\nsource = "https://x"\n')
    with pytest.raises(ConfigError, match="row bad: no source"):
        load_table("[bad]\nvram = 1\nbw_gbs = 10\n")
    with pytest.raises(ConfigError, match="unknown key 'speed'"):
        load_table('[bad]\nspeed = 1\nsource = "https://x"\n')


def test_unknown_device_gets_did_you_mean() -> None:
    with pytest.raises(ConfigError, match=r'unknown device .p100-61g. \(did you mean "p100-16g"\?\)'):
        parse_device("p100-61g", load_table(), {})


def test_a_device_given_outright_and_overridden() -> None:
    d = parse_device("vram=8GiB,bw=448GB/s,name=mine,eff=0.5", load_table(), {})
    assert (d.name, d.vram, d.bw_gbs, d.efficiency) == ("mine", 8 * GIB, 448.0, 0.5)
    p = parse_device("p100-16g,eff=0.5", load_table(), {})
    assert p.efficiency == 0.5 and p.bw_gbs == 732
    with pytest.raises(ConfigError, match="eff.* out of range|efficiency = 7.0 is out of range"):
        parse_device("p100-16g,eff=7", load_table(), {})
    with pytest.raises(ConfigError, match="needs vram= and bw="):
        parse_device("vram=8GiB", load_table(), {})
    with pytest.raises(ConfigError, match="not a size"):
        parse_device("vram=lots,bw=1", load_table(), {})


def test_a_remote_device_needs_its_link() -> None:
    links = {"box2": parse_link("1gbe")}
    d = parse_device("p100-16g@box2", load_table(), links)
    assert d.remote and d.endpoint == "box2:50052" and d.link is not None and d.link.rate_bit_s == 1e9
    assert parse_device("gtx1660@box2:6000", load_table(), links).endpoint == "box2:6000"
    with pytest.raises(ConfigError, match="no link to box3") as e:
        parse_device("p100-16g@box3", load_table(), links)
    assert "--link box3=1gbe" in e.value.hint


def test_the_cpu_takes_this_machines_ram() -> None:
    d = parse_device("cpu", load_table(), {}, host_ram=32 * GIB)
    assert d.kind == "cpu" and d.vram == 32 * GIB
    assert parse_device("cpu,ram=64GiB,bw=80", load_table(), {}).vram == 64 * GIB
