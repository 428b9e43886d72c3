"""bench.sweep: the sweep product, which options this llama-bench takes (from its real
--help), devices and their order, and the arguments of each point."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.bench.problems import SweepRefused
from patchkit.bench.sweep import (
    Device,
    Point,
    check_supported,
    expand_sweep,
    parse_caps,
    parse_devices,
    parse_sweep,
    point_args,
    resolve_devices,
)
from patchkit.cli.problems import render
from patchkit.core.errors import ConfigError
from tests.fixtures.bench import HELP, older_help
from tests.fixtures.paths import BENCH_DATA

DATA = BENCH_DATA


RIG = [
    Device(name="CUDA0", description="NVIDIA GeForce RTX 3070"),
    Device(name="CUDA1", description="Tesla P100-PCIE-16GB"),
    Device(name="RPC0", description="192.168.1.20:50052"),
    Device(name="RPC1", description="192.168.1.21:50052"),
]


# ---- sweep ------------------------------------------------------------------------------


def test_sweep_is_the_product_first_dimension_outermost() -> None:
    dims = parse_sweep(["sm=layer,tensor", "dev-order=auto,remote-first", "p=512"])
    points = expand_sweep(dims)
    assert [p.settings for p in points] == [
        (("sm", "layer"), ("dev-order", "auto"), ("p", "512")),
        (("sm", "layer"), ("dev-order", "remote-first"), ("p", "512")),
        (("sm", "tensor"), ("dev-order", "auto"), ("p", "512")),
        (("sm", "tensor"), ("dev-order", "remote-first"), ("p", "512")),
    ]
    # labels name only what varies; a one-value dimension is a fixed setting
    assert [p.label for p in points] == [
        "sm=layer dev-order=auto",
        "sm=layer dev-order=remote-first",
        "sm=tensor dev-order=auto",
        "sm=tensor dev-order=remote-first",
    ]


def test_sweep_aliases_repeats_and_no_sweep() -> None:
    dims = parse_sweep(["split-mode=layer", "sm=tensor,layer", "d=0,4096", "ts=3/1,0.6/0.4"])
    assert [(d.key, d.values) for d in dims] == [
        ("sm", ("layer", "tensor")),
        ("depth", ("0", "4096")),
        ("ts", ("3/1", "0.6/0.4")),
    ]
    assert len(expand_sweep(dims)) == 8
    only = expand_sweep(parse_sweep([]))
    assert len(only) == 1 and only[0].label == "default" and only[0].settings == ()


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ("sm", "is not KEY=VALUE"),
        ("smm=layer", 'unknown key (did you mean "sm"?)'),
        ("ts=3:1", "is not a split like 3/1"),
        ("b=big", "is not a whole number"),
        ("dev-order=remote_first", 'did you mean "remote-first"'),
        ("sm=layer,,tensor", "empty value"),
        ("dev=RPC0;rm -rf", "characters llama-bench does not take"),
    ],
)
def test_sweep_errors_are_one_line(spec: str, text: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_sweep([spec])
    said = render(e.value)[0]  # a malformed one is a problem the CLI words
    assert text in said and "\n" not in said
    if e.value.problem is not None:
        assert e.value.problem == SweepRefused(found="syntax", spec=spec)


# ---- which options this llama-bench takes ------------------------------------------------


def test_caps_of_the_real_help() -> None:
    caps = parse_caps(HELP)
    for flag in (
        "-m",
        "-p",
        "-n",
        "-r",
        "-o",
        "-sm",
        "-dev",
        "-ts",
        "-ot",
        "-rpc",
        "-fitt",
        "--list-devices",
        "-d",
        "-b",
        "-ub",
        "-fa",
    ):
        assert caps.has(flag), flag
    assert not caps.has("-fit")  # llama-bench has only -fitt/-fitc, off by default
    assert caps.allowed("-sm") == ("none", "layer", "row", "tensor")
    assert caps.allowed("--split-mode") == caps.allowed("-sm")
    assert caps.allowed("-fa") == ("on", "off", "auto")
    assert caps.output_format == "jsonl"
    check_supported(
        parse_sweep(
            ["sm=layer,tensor", "dev=local", "dev-order=remote-first", "ts=3/1", "depth=0,512", "fa=on,off"]
        ),
        caps,
    )


def test_older_versions_refuse_what_they_cannot_do() -> None:
    caps = parse_caps(older_help(HELP, tensor=False))
    check_supported(parse_sweep(["sm=layer,row"]), caps)
    with pytest.raises(ConfigError) as e:
        check_supported(parse_sweep(["sm=layer,tensor"]), caps)
    assert e.value.message == "--sweep sm=tensor: this llama-bench takes -sm none|layer|row"
    assert "d6f303004" in e.value.hint
    caps = parse_caps(older_help(HELP, dev=False, jsonl=False))
    assert caps.output_format == "json"
    for spec in ("dev=RPC0", "dev-order=remote-first"):
        with pytest.raises(ConfigError) as e:
            check_supported(parse_sweep([spec]), caps)
        assert e.value.problem == SweepRefused(found="no-option", key=spec.partition("=")[0], flag="-dev")
    assert not parse_caps(older_help(HELP, rpc=False)).has("-rpc")
    with pytest.raises(ConfigError, match="not a llama-bench"):
        parse_caps("usage: something else\n  -x  whatever\n")


# ---- devices -----------------------------------------------------------------------------


def test_list_devices_of_the_real_binary() -> None:
    devs = parse_devices((DATA / "list-devices-2rpc-82bb485.txt").read_text())
    assert [d.name for d in devs] == ["RPC0", "RPC1"]
    assert all(d.remote and d.description.startswith("127.0.0.1:") and d.total_mib > 0 for d in devs)
    assert parse_devices((DATA / "list-devices-none-82bb485.txt").read_text()) == []
    with pytest.raises(ConfigError, match="no 'Available devices:'"):
        parse_devices("error: failed to connect\n")


@pytest.mark.parametrize(
    ("dev", "order", "want"),
    [
        ("auto", "auto", "auto"),  # llama's own choice (RPC first, at this version)
        ("auto", "remote-first", "RPC0/RPC1/CUDA0/CUDA1"),
        ("auto", "local-first", "CUDA0/CUDA1/RPC0/RPC1"),
        ("all", "auto", "CUDA0/CUDA1/RPC0/RPC1"),
        ("local", "auto", "CUDA0/CUDA1"),
        ("remote", "auto", "RPC0/RPC1"),
        ("none", "remote-first", "none"),
        ("CUDA1/RPC0", "remote-first", "RPC0/CUDA1"),
        ("local/RPC1", "remote-first", "RPC1/CUDA0/CUDA1"),
        ("RPC1/RPC0", "auto", "RPC1/RPC0"),
        ("RPC0/local/RPC0", "auto", "RPC0/CUDA0/CUDA1"),
    ],
)
def test_device_sets_and_order(dev: str, order: str, want: str) -> None:
    assert resolve_devices(dev, order, RIG) == want


def test_device_sets_on_a_cpu_only_machine_and_unknown_names() -> None:
    assert resolve_devices("local", "auto", []) == "none"
    with pytest.raises(ConfigError) as e:
        resolve_devices("CUDO0", "auto", RIG)
    assert "no device 'CUDO0' (did you mean \"CUDA0\"?)" in e.value.message
    assert "CUDA0, CUDA1, RPC0, RPC1" in e.value.hint


def test_point_args_map_every_dimension() -> None:
    caps = parse_caps(HELP)
    p = Point(
        settings=(
            ("sm", "tensor"),
            ("dev", "local/RPC0"),
            ("dev-order", "remote-first"),
            ("ts", "1/3/1"),
            ("depth", "4096"),
            ("b", "512"),
            ("ub", "128"),
            ("fa", "on"),
        )
    )
    assert point_args(p, caps, RIG) == (
        "-sm",
        "tensor",
        "-dev",
        "RPC0/CUDA0/CUDA1",
        "-ts",
        "1/3/1",
        "-d",
        "4096",
        "-b",
        "512",
        "-ub",
        "128",
        "-fa",
        "on",
    )
    # dev-order without dev reorders every device; dev=auto with auto order passes no -dev
    assert point_args(Point(settings=(("dev-order", "remote-first"),)), caps, RIG) == (
        "-dev",
        "RPC0/RPC1/CUDA0/CUDA1",
    )
    assert point_args(Point(settings=(("dev", "auto"), ("sm", "layer"))), caps, RIG) == ("-sm", "layer")


def test_a_sweep_of_8_million_setups_is_refused_before_it_is_expanded() -> None:
    """Three 200-value sweeps made 8 million setups (4 GB, no refusal at
    90 s). The setups are counted before anything is expanded."""
    import time
    import tracemalloc

    from patchkit.bench.sweep import MAX_SETUPS, Dimension, count_setups

    specs = [
        "p=" + ",".join(str(i) for i in range(200)),
        "n=" + ",".join(str(i) for i in range(200)),
        "b=" + ",".join(str(i) for i in range(1, 201)),
    ]
    start = time.monotonic()
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as e:
            parse_sweep(specs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - start < 5 and peak < 16 << 20
    assert e.value.message == (
        "--sweep makes 8,000,000 setups (200 x 200 x 200), more than 1,000: each is one llama-bench run"
    )
    assert "split the sweep" in (e.value.hint or "")
    # one key alone, and the engine's own expansion, refuse the same way
    with pytest.raises(ConfigError, match="makes 1,001 setups .p alone."):
        parse_sweep(["p=" + ",".join(str(i) for i in range(MAX_SETUPS + 1))])
    dims = tuple(Dimension(key=k, values=tuple(str(i) for i in range(200))) for k in ("p", "n", "b"))
    with pytest.raises(ConfigError, match="8,000,000 setups"):
        expand_sweep(dims)
    # the cap itself is allowed: 10 x 10 x 10
    ok = parse_sweep([f"{k}=" + ",".join(str(i) for i in range(10)) for k in ("p", "n", "b")])
    assert count_setups(ok) == MAX_SETUPS == len(expand_sweep(ok))


def test_cli_refuses_a_huge_sweep_before_reading_the_build(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from patchkit.cli import main

    many = ",".join(str(i) for i in range(200))
    sweeps = ["--sweep", f"p={many}", "--sweep", f"n={many}", "--sweep", f"b={many}"]
    args = ["bench", str(tmp_path / "o"), "-m", str(tmp_path / "m.gguf"), "--build", str(tmp_path / "nope")]
    r = CliRunner().invoke(main, [*args, *sweeps])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "--sweep makes 8,000,000 setups (200 x 200 x 200), more than 1,000" in r.output
    assert not (tmp_path / "o").exists()
