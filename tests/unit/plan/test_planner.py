"""Enumeration, pruning, ranking and refusals of the planner."""

from __future__ import annotations

import itertools

import pytest

from patchkit.bench.link import parse_link
from patchkit.core.errors import ConfigError
from patchkit.plan.devices import load_table, parse_device
from patchkit.plan.hfconfig import table_from_config
from patchkit.plan.model import shape_of_table
from patchkit.plan.planner import ROW_REASON, PlanOptions, Rig, check_ctx, max_ctx, plan
from patchkit.plan.speed import speed
from tests.unit.plan.shapes import dense, hybrid

GIB = 1 << 30


def _rig(*specs: str, ram: int = 64) -> Rig:
    t = load_table()
    links = {"box2": parse_link("1gbe")}
    return Rig(
        devices=tuple(parse_device(s, t, links) for s in specs),
        host=parse_device("cpu", t, {}, host_ram=ram * GIB),
    )


def _big(**over: object):  # ~8.4 GiB of Q8_0 weights
    cfg = dense(
        hidden_size=4096,
        num_hidden_layers=40,
        num_attention_heads=32,
        num_key_value_heads=8,
        intermediate_size=12288,
        vocab_size=32000,
        **over,
    )
    kv, tensors = table_from_config(cfg, "Q8_0")
    return shape_of_table(kv, tensors, name="big")


def test_context_bounds() -> None:
    for bad in (0, 10**12):
        with pytest.raises(ConfigError, match="out of range"):
            check_ctx(bad)
    assert check_ctx(111 * 1024) == 113664


def test_row_is_refused_with_upstreams_reason_and_ranked_last() -> None:
    cands = plan(_big(), _rig("rtx3070", "p100-16g"), PlanOptions(ctx=8192))
    last = cands[-1]
    assert last.arrangement.split_mode == "row" and last.refused and last.why_not == ROW_REASON
    assert all(not c.refused for c in cands[:-1])


def test_tensor_split_refused_for_an_architecture_upstream_does_not_split() -> None:
    kv, tensors = table_from_config(dense(), "F16")
    kv["general.architecture"] = "olmo2"
    kv = {k.replace("llama.", "olmo2."): v for k, v in kv.items()}
    s = shape_of_table(kv, tensors, name="o")
    cands = plan(s, _rig("rtx3070", "p100-16g"), PlanOptions(ctx=4096))
    tensor = [c for c in cands if c.arrangement.split_mode == "tensor"]
    assert tensor and all(c.refused for c in tensor)
    assert "not implemented for architecture 'olmo2'" in tensor[0].why_not


def test_enumeration_covers_subsets_orders_ts_rules_and_cache_types() -> None:
    cands = plan(_big(), _rig("rtx3070", "p100-16g", "p100-16g@box2"), PlanOptions(ctx=8192))
    arrs = [c.arrangement for c in cands if not c.refused]
    layer3 = {
        tuple(d.label for d in a.devices) for a in arrs if a.split_mode == "layer" and len(a.devices) == 3
    }
    assert len(layer3) == 6  # every -dev order of the three
    assert {a.ts_rule for a in arrs if len(a.devices) > 1} == {"memory", "bandwidth", "best"}
    assert {a.cache_type for a in arrs} == {"f16", "q8_0"}
    assert any(a.split_mode == "none" for a in arrs)
    # the -ot hybrid: tensor split locally, whole layers on the remote P100, marked experimental
    hybrids = [a for a in arrs if a.ot_device is not None]
    assert hybrids and all(a.needs_experimental and a.ot_device.remote for a in hybrids)  # type: ignore[union-attr]


def test_ranking_puts_fitting_fast_arrangements_first() -> None:
    cands = plan(_big(), _rig("rtx3070", "p100-16g"), PlanOptions(ctx=8192))
    ok = [c for c in cands if not c.refused]
    fits = [c.fits for c in ok]
    assert fits == sorted(fits, reverse=True)  # all that fit come first
    fitting = [c.speed.decode_tps for c in ok if c.fits]  # type: ignore[union-attr]
    assert all(b <= a * 1.02 for a, b in itertools.pairwise(fitting))  # ties within 1 % go by context
    # ~8.3 GiB of weights do not fit the 3070 alone, and that says why
    alone = next(
        c
        for c in ok
        if [d.name for d in c.arrangement.devices] == ["rtx3070"] and c.arrangement.cpu_layers == 0
    )
    assert not alone.fits and "rtx3070 needs" in alone.why_not
    # ... but it does with the first layers on the CPU
    assert any(c.fits and c.arrangement.cpu_layers > 0 for c in ok if len(c.arrangement.devices) == 1)


def test_max_ctx_is_the_largest_fitting_context() -> None:
    s = _big(max_position_embeddings=1 << 20)
    rig = _rig("p100-16g")
    cands = plan(s, rig, PlanOptions(ctx=4096, cache_types=("f16",), modes=("layer",)))
    c = next(c for c in cands if [d.name for d in c.arrangement.devices] == ["p100-16g"] and c.fits)
    from dataclasses import replace

    from patchkit.plan.memory import memory

    fits = lambda n: memory(s, replace(c.arrangement, ctx=n), host_capacity=rig.host.capacity).fits  # noqa: E731
    assert c.max_ctx > 4096 and c.max_ctx % 256 == 0
    assert fits(c.max_ctx) and not fits(c.max_ctx + 256)
    assert max_ctx(s, c.arrangement, rig.host, limit=1024) == 1024  # capped by the limit
    trained = _big()  # 8192 trained: no more is offered
    cands = plan(trained, rig, PlanOptions(ctx=4096, cache_types=("f16",), modes=("layer",)))
    assert max(c.max_ctx for c in cands) == 8192


def test_remote_last_pays_for_the_logits_on_the_link() -> None:
    s = _big()
    rig = _rig("p100-16g", "p100-16g@box2")
    cands = plan(s, rig, PlanOptions(ctx=8192, cache_types=("f16",), modes=("layer",)))
    two = [c for c in cands if len(c.arrangement.devices) == 2 and c.arrangement.ts_rule == "memory"]
    first = next(c for c in two if c.arrangement.devices[0].remote)
    last = next(c for c in two if c.arrangement.devices[-1].remote)
    assert last.speed.link_mb_per_token > first.speed.link_mb_per_token + 0.1  # type: ignore[union-attr]
    assert first.speed.round_trips_per_token >= 1  # type: ignore[union-attr]


def test_tensor_split_over_rpc_pays_round_trips_per_layer() -> None:
    s = _big()
    rig = _rig("p100-16g", "p100-16g@box2")
    cands = plan(s, rig, PlanOptions(ctx=8192, cache_types=("f16",), modes=("tensor",)))
    t = next(c for c in cands if c.arrangement.split_mode == "tensor" and len(c.arrangement.devices) == 2)
    # two all-reduces per layer, each a GET from the remote device
    assert t.speed.round_trips_per_token >= 2 * s.n_layer  # type: ignore[union-attr]
    assert t.speed.bottleneck == "link box2"  # type: ignore[union-attr]


def test_kv_read_grows_decode_time_with_context() -> None:
    s = shape_of_table(*table_from_config(hybrid(), "Q8_0"), name="h")
    rig = _rig("rtx3070")
    arr = next(c.arrangement for c in plan(s, rig, PlanOptions(ctx=8192)) if c.arrangement.devices)
    assert (
        speed(s, arr, host=rig.host, at_ctx=256).decode_tps
        > speed(s, arr, host=rig.host, at_ctx=8192).decode_tps
    )


def test_the_command_line_names_devices_like_llama_cpp() -> None:
    rig = _rig("rtx3070", "p100-16g", "p100-16g@box2", "gtx1660@box2")
    s = _big()
    cands = plan(s, rig, PlanOptions(ctx=8192, cache_types=("q8_0",)))
    c = next(c for c in cands if len(c.arrangement.devices) == 4 and c.arrangement.split_mode == "layer")
    argv = c.arrangement.command("m.gguf", n_layer=s.n_layer, rig=rig.devices)
    assert argv[:2] == ["llama-server", "-m"]
    assert argv[argv.index("--rpc") + 1] == "box2:50052"
    names = argv[argv.index("-dev") + 1].split(",")
    assert sorted(names) == ["CUDA0", "CUDA1", "RPC0", "RPC1"]
    assert argv[argv.index("-ctk") + 1] == "q8_0" and "-ts" in argv and argv[argv.index("-sm") + 1] == "layer"
    h = next(c for c in cands if c.arrangement.ot_device is not None)
    hargv = h.arrangement.command("m.gguf", n_layer=s.n_layer, rig=rig.devices)
    assert any(x.endswith("=RPC0[box2:50052]") or x.endswith("=RPC1[box2:50052]") for x in hargv)


def test_learning_a_device_reproduces_its_measurement() -> None:
    from dataclasses import replace

    from patchkit.plan.arrangement import Arrangement
    from patchkit.plan.measure import Measured, learn_device

    s = _big()
    rig = _rig("p100-16g@box2")
    arr = Arrangement(split_mode="layer", devices=rig.devices, shares=(1.0,), ctx=4096)
    m = Measured(decode_tps=9.0, prompt_tps=300.0, argv=())
    bw, tf = learn_device(s, arr, rig.host, m)
    dev = replace(rig.devices[0], calibrated_bw_gbs=bw, fp16_tflops=tf / 0.35)
    sp = speed(s, replace(arr, devices=(dev,)), host=rig.host)
    assert abs(sp.decode_tps - 9.0) < 1e-6 and abs(sp.prompt_tps - 300.0) < 1e-6
    # the wire stays the link's: a slower link leaves less time to the device, a higher bandwidth
    assert bw > 0 and bw < rig.devices[0].bw_gbs


def test_bench_rate_is_the_median_of_the_repetitions() -> None:
    import json

    from patchkit.plan.measure import parse_bench

    rows = [
        {"n_prompt": 512, "n_gen": 0, "avg_ts": 90.0, "samples_ts": [100.0, 40.0, 101.0, 99.0, 110.0]},
        {"n_prompt": 0, "n_gen": 64, "avg_ts": 7.0},  # no samples: llama-bench's mean
    ]
    m = parse_bench(json.dumps(rows), ["llama-bench"])
    assert m.prompt_tps == 100.0 and m.decode_tps == 7.0  # one slow repetition does not move it


def test_cpu_devices_on_one_machine_take_turns_in_a_tensor_split() -> None:
    """Three one-thread CPU servers on a two-core box cannot all compute at once; on three
    boxes they can. Links without cost: only the compute differs."""
    from dataclasses import replace

    from patchkit.bench.link import Link
    from patchkit.plan.arrangement import Arrangement

    s = _big()
    t = load_table()
    free = Link(name="none")
    host = replace(parse_device("cpu", t, {}, host_ram=64 * GIB), cores=2)

    def servers(hosts: list[str]) -> Arrangement:
        devs = tuple(
            replace(t["cpu"], name="cpu", vram=64 * GIB, host=h, link=free, threads=1, cores=2) for h in hosts
        )
        return Arrangement(split_mode="tensor", devices=devs, shares=(1 / 3,) * 3, ctx=4096)

    same = speed(s, servers(["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]), host=host)
    apart = speed(s, servers(["a:1", "b:1", "c:1"]), host=host)
    assert same.decode_tps < apart.decode_tps * 0.75  # 3 x 1 thread over 2 cores: 1.5 x the compute
    assert same.prompt_tps < apart.prompt_tps * 0.75
    two = speed(s, replace(servers(["127.0.0.1:1", "127.0.0.1:2", "c:1"]), shares=(0.5, 0.5, 0.0)), host=host)
    assert two.decode_tps > same.decode_tps  # two one-thread servers fit the two cores
