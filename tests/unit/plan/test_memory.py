"""Memory per device on synthetic headers: dense GQA, hybrid recurrent, MoE, sliding window."""

from __future__ import annotations

import dataclasses

import pytest

from patchkit.plan.arrangement import CPU, Arrangement, layer_devices
from patchkit.plan.devices import Device
from patchkit.plan.hfconfig import table_from_config
from patchkit.plan.memory import kv_cells, memory
from patchkit.plan.model import ModelShape, shape_of_table
from tests.unit.plan.shapes import dense, hybrid, moe

GIB = 1 << 30


def _shape(cfg: dict, quant: str = "F16", **kv_extra: object) -> ModelShape:
    kv, tensors = table_from_config(cfg, quant)
    kv.update(kv_extra)
    return shape_of_table(kv, tensors, name="t")


def _dev(name: str, gib: float = 8, bw: float = 100, **kw: object) -> Device:
    return Device(name=name, vram=int(gib * GIB), bw_gbs=bw, fp16_tflops=10, fp32_tflops=5, **kw)  # type: ignore[arg-type]


def _one(shape: ModelShape, ctx: int, **kw: object) -> Arrangement:
    return Arrangement(split_mode="layer", devices=(_dev("a"),), shares=(1.0,), ctx=ctx, **kw)  # type: ignore[arg-type]


def test_dense_gqa_kv_is_padded_context_times_k_and_v() -> None:
    s = _shape(dense())
    # 8 layers, K and V each 2 kv heads x 32 = 64 wide, f16; 1000 cells pad to 1024
    mem = memory(s, _one(s, 1000), host_capacity=64 * GIB)
    a = mem.devices[0]
    assert a.context == 8 * 1024 * (64 + 64) * 2
    q8 = memory(s, _one(s, 1000, cache_type="q8_0"), host_capacity=64 * GIB).devices[0]
    assert q8.context == int(8 * 1024 * (64 + 64) * 34 / 32)
    # weights: every block and the output on the device, the token embedding on the host
    blocks = sum(lyr.weight_bytes for lyr in s.layers)
    assert a.model == blocks + s.output_bytes
    assert mem.devices[-1].label == "host"
    assert mem.devices[-1].model == s.token_embd_bytes == 1024 * 256 * 2


def test_tied_embeddings_are_duplicated_on_the_output_device() -> None:
    s = _shape(dense(tie_word_embeddings=True))
    assert s.output_split_bytes == s.token_embd_bytes
    a = memory(s, _one(s, 256), host_capacity=64 * GIB).devices[0]
    assert a.model == sum(lyr.weight_bytes for lyr in s.layers) + s.output_bytes


def test_hybrid_recurrent_state_per_linear_attention_layer() -> None:
    s = _shape(hybrid())
    kinds = [lyr.kind for lyr in s.layers]
    assert kinds == ["recurrent"] * 3 + ["attention"] + ["recurrent"] * 3 + ["attention"]
    rec = s.layers[0]
    # llama_hparams: n_embd_r = (d_conv - 1) * (d_inner + 2 * n_group * d_state), n_embd_s = d_state * d_inner
    d_inner, n_group, d_state = 4 * 32, 2, 32
    assert rec.state_r == 3 * (d_inner + 2 * n_group * d_state)
    assert rec.state_s == d_state * d_inner
    small = memory(s, _one(s, 256), host_capacity=64 * GIB).devices[0].context
    big = memory(s, _one(s, 4096), host_capacity=64 * GIB).devices[0].context
    attn = s.layers[3]
    assert attn.k_width == 2 * 64
    assert small == 6 * rec.state_bytes + 2 * 256 * (attn.k_width + attn.v_width) * 2
    # only the two attention layers grow with the context
    assert big - small == 2 * (4096 - 256) * (attn.k_width + attn.v_width) * 2


def test_moe_reads_only_the_used_experts() -> None:
    s = _shape(moe())
    lyr = s.layers[0]
    assert lyr.expert_bytes == 3 * 256 * 256 * 8 * 2
    assert s.active_bytes(lyr) == lyr.weight_bytes - lyr.expert_bytes + lyr.expert_bytes * 2 / 8
    # all experts are resident
    a = memory(s, _one(s, 256), host_capacity=64 * GIB).devices[0]
    assert a.model >= 4 * lyr.expert_bytes


def test_sliding_window_layers_hold_window_plus_ubatch_cells() -> None:
    pattern = tuple([True, False] * 4)
    s = _shape(
        dense(), **{"llama.attention.sliding_window": 1000, "llama.attention.sliding_window_pattern": pattern}
    )
    assert [lyr.swa for lyr in s.layers] == list(pattern)
    assert kv_cells(s, 32768, swa=True) == 1536  # pad(1000 + 512, 256)
    assert kv_cells(s, 512, swa=True) == 512
    mem = memory(s, _one(s, 32768), host_capacity=64 * GIB).devices[0]
    assert mem.context == 4 * 32768 * 256 + 4 * 1536 * 256


def test_layer_split_assigns_layers_like_llama_cpp() -> None:
    devs = (_dev("a"), _dev("b"), _dev("c"))
    arr = Arrangement(split_mode="layer", devices=devs, shares=(), ts_values=(3.0, 5.0, 1.0))
    where = layer_devices(arr, 8)  # 9 layers with the output
    assert where == [0, 0, 0, 1, 1, 1, 1, 1, 2]
    spill = dataclasses.replace(arr, cpu_layers=2)
    assert layer_devices(spill, 8)[:2] == [CPU, CPU]
    # counts that sum to the layers land exactly (float32, as llama.cpp computes them)
    counts = (23.0, 40.0, 1.0, 1.0)
    arr4 = Arrangement(split_mode="layer", devices=(*devs, _dev("d")), shares=(), ts_values=counts)
    w = layer_devices(arr4, 64)
    assert [w.count(i) for i in range(4)] == [23, 40, 1, 1]


def test_tensor_split_divides_split_tensors_and_mirrors_the_rest() -> None:
    s = _shape(dense())
    devs = (_dev("a"), _dev("b"))
    arr = Arrangement(split_mode="tensor", devices=devs, shares=(0.25, 0.75), ctx=1024)
    mem = memory(s, arr, host_capacity=64 * GIB)
    a, b = mem.devices[0], mem.devices[1]
    split = sum(lyr.split_bytes for lyr in s.layers) + s.output_split_bytes
    mirrored = sum(lyr.mirrored_bytes for lyr in s.layers) + s.output_other_bytes
    assert mirrored > 0
    assert a.model == pytest.approx(split * 0.25 + mirrored, abs=2)
    assert b.model == pytest.approx(split * 0.75 + mirrored, abs=2)
    full = memory(s, _one(s, 1024), host_capacity=64 * GIB).devices[0].context
    assert a.context + b.context == pytest.approx(full, abs=2)


def test_compute_buffers_match_llama_cpps_on_a_smollm2_shape() -> None:
    """llama.cpp at the pin printed, for SmolLM2-135M at -c 4096 on the CPU: compute buffer
    17.51 MiB; behind one RPC server: the host's 6.26 MiB. The model: the FFN's and the
    residual's activations of a 512-token ubatch plus the F16 KQ mask of the whole cache."""
    cfg = dense(
        hidden_size=576,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        intermediate_size=1536,
        vocab_size=49152,
        tie_word_embeddings=True,
    )
    s = _shape(cfg, "Q8_0")
    cpu = Arrangement(split_mode="none", devices=(), shares=(), ctx=4096)
    host = memory(s, cpu, host_capacity=64 * GIB).devices[-1]
    assert host.compute == 4 * 512 * (3 * 1536 + 4 * 576) + 2 * 512 * 4096
    assert abs(host.compute / 2**20 - 17.51) < 0.05
    remote = memory(s, _one(s, 4096), host_capacity=64 * GIB).devices[-1]
    assert abs(remote.compute / 2**20 - 6.26) < 0.05
    # a tied embedding is not duplicated while the output stays on the host
    assert host.model == sum(lyr.weight_bytes for lyr in s.layers) + s.token_embd_bytes + s.output_other_bytes


def test_the_host_cpu_keeps_a_repacked_copy_of_q4_k_matrices() -> None:
    """llama.cpp's CPU backend (x86, AVX2) copies Q4_0/Q4_K/IQ4_NL matrices into a CPU_REPACK
    buffer beside the mapped file: a Qwen3.5-shaped Q4_K_M hole-GGUF printed CPU_Mapped
    1042 MiB + CPU_REPACK 927 MiB at the pin. Q6_K (the more-bits layers) is not repacked."""
    s = _shape(dense(tie_word_embeddings=True), "Q4_K_M")
    lyr = s.layers[1]  # a layer without the more-bits tensors
    assert lyr.repack_bytes > 0.9 * lyr.weight_bytes
    assert s.layers[0].repack_bytes < s.layers[0].weight_bytes  # attn_v / ffn_down are Q6_K there
    cpu = Arrangement(split_mode="none", devices=(), shares=(), ctx=256)
    host = memory(s, cpu, host_capacity=64 * GIB).devices[-1]
    mapped = sum(x.weight_bytes for x in s.layers) + s.token_embd_bytes + s.output_other_bytes
    assert host.model == mapped + sum(x.repack_bytes for x in s.layers) + s.output_repack_bytes
    assert s.output_repack_bytes == s.token_embd_bytes  # the tied output is a repacked copy
    off = memory(s, dataclasses.replace(cpu, host_repack=False), host_capacity=64 * GIB).devices[-1]
    assert off.model == mapped
    # on a device the weights are what the file says
    one = memory(s, _one(s, 256), host_capacity=64 * GIB)
    assert one.devices[0].model == sum(x.weight_bytes for x in s.layers) + s.output_bytes


def test_pipeline_parallel_keeps_four_copies_of_each_splits_inputs() -> None:
    s = _shape(dense())
    gpus = (_dev("a"), _dev("b"))
    arr = Arrangement(split_mode="layer", devices=gpus, shares=(), ts_values=(1.0, 1.0), ctx=8192)
    from patchkit.plan.memory import pipeline_parallel

    assert pipeline_parallel(arr)
    pp = memory(s, arr, host_capacity=64 * GIB).devices[0].compute
    remote = dataclasses.replace(arr, devices=(gpus[0], dataclasses.replace(gpus[1], host="box2")))
    assert not pipeline_parallel(remote)  # RPC devices have no events
    plain = memory(s, remote, host_capacity=64 * GIB).devices[0].compute
    assert pp - plain == 3 * (4 * 512 * 256 + 2 * 512 * 8192)


def test_qwen35_27b_config_gives_the_published_shape() -> None:
    """The rig example's config.json (tests/unit/plan/data/qwen3.5-27b): its text model,
    as llama.cpp's converter writes it, has the parameter counts llama.cpp itself prints for
    a Qwen3.5-27B GGUF ("repeating layers ... 24.353 B parameters"; 26.9 B in all)."""
    import json
    import math
    from pathlib import Path

    from patchkit.plan.hfconfig import table_from_config
    from patchkit.plan.model import shape_of_table

    cfg = json.loads((Path(__file__).parent / "data" / "qwen3.5-27b" / "config.json").read_text())
    kv, tensors = table_from_config(cfg, "Q5_K_M", name="qwen3.5-27b")
    blocks = sum(math.prod(t.dims) for t in tensors if t.name.startswith("blk."))
    assert blocks == 24_353_196_544
    assert sum(math.prod(t.dims) for t in tensors) == 26_895_998_464
    shape = shape_of_table(kv, tensors, name="qwen3.5-27b")
    kinds = [lyr.kind for lyr in shape.layers]
    assert kinds.count("attention") == 16 and kinds.count("recurrent") == 48
    assert kinds[3::4] == ["attention"] * 16  # every 4th layer is full attention
    assert shape.n_embd == 5120 and shape.n_vocab == 248_320 and not shape.tied


def test_layer_split_ot_moves_the_weights_and_leaves_the_cache() -> None:
    """-ot in a layer split: the named blocks' weights go to the -ot device, their KV cache
    stays on their layer's device (llama_kv_cache places it by model.dev_layer)."""
    s = _shape(dense())
    plain = _one(s, 4096)
    moved = dataclasses.replace(plain, ot_device=_dev("b"), ot_layers=(2, 4))
    before = memory(s, plain, host_capacity=64 * GIB).devices
    after = memory(s, moved, host_capacity=64 * GIB).devices
    two = s.layers[2].weight_bytes + s.layers[3].weight_bytes
    assert [d.label for d in after] == ["a", "b", "host"]
    assert after[0].model == before[0].model - two and after[1].model == two
    assert after[0].context == before[0].context and after[1].context == 0
    assert after[1].compute > 0
    assert layer_devices(moved, s.n_layer)[2:4] == [1, 1]
    assert layer_devices(moved, s.n_layer, weights=False)[2:4] == [0, 0]


def test_layer_split_ot_onto_one_of_its_own_devices_is_counted_once() -> None:
    """-ot naming a device of the split (the form upstream runs: a target outside -dev
    aborts at load, "pre-allocated tensor ... in a buffer that cannot run the operation"):
    the weights move between the two, each device is one row, the caches stay."""
    s = _shape(dense())
    a, b = _dev("a"), _dev("b")
    plain = Arrangement(split_mode="layer", devices=(a, b), shares=(0.5, 0.5), ts_values=(1.0, 1.0), ctx=4096)
    moved = dataclasses.replace(plain, ot_device=a, ot_layers=(6, 8))  # b's last two blocks
    before = memory(s, plain, host_capacity=64 * GIB).devices
    after = memory(s, moved, host_capacity=64 * GIB).devices
    two = s.layers[6].weight_bytes + s.layers[7].weight_bytes
    assert [d.label for d in after] == ["a", "b", "host"]
    assert after[0].model == before[0].model + two and after[1].model == before[1].model - two
    assert [d.context for d in after] == [d.context for d in before]
