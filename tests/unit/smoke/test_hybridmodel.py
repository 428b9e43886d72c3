"""The tensor-split check's hybrid qwen35 model (smoke.hybridmodel), read back with gguf."""

from __future__ import annotations

from pathlib import Path

from patchkit.smoke.hybridmodel import QWEN35, Qwen35Shape, qwen35_tensors, write_tiny_qwen35


def test_the_file_has_exactly_the_keys_the_qwen35_loader_reads(tmp_path: Path) -> None:
    from gguf import GGUFReader, GGUFValueType

    r = GGUFReader(str(write_tiny_qwen35(tmp_path / "m.gguf")))
    keys = {k: (f.types, f.contents()) for k, f in r.fields.items() if not k.startswith("GGUF.")}
    u32, f32, arr, i32, s = (
        GGUFValueType.UINT32,
        GGUFValueType.FLOAT32,
        GGUFValueType.ARRAY,
        GGUFValueType.INT32,
        GGUFValueType.STRING,
    )
    assert keys["qwen35.attention.layer_norm_rms_epsilon"][0] == [f32]
    assert abs(keys.pop("qwen35.attention.layer_norm_rms_epsilon")[1] - 1e-5) < 1e-9
    assert keys == {
        "general.architecture": ([s], "qwen35"),
        "qwen35.vocab_size": ([u32], 128),
        "qwen35.context_length": ([u32], 128),
        "qwen35.embedding_length": ([u32], 256),
        "qwen35.block_count": ([u32], 2),
        "qwen35.feed_forward_length": ([u32], 384),
        "qwen35.attention.head_count": ([u32], 2),
        "qwen35.attention.head_count_kv": ([u32], 2),
        # an int array: the loader takes int32 or uint32 elements, 4 of them (IMROPE)
        "qwen35.rope.dimension_sections": ([arr, i32], [32, 32, 32, 32]),
        "qwen35.full_attention_interval": ([u32], 2),
        "qwen35.ssm.conv_kernel": ([u32], 4),
        "qwen35.ssm.inner_size": ([u32], 256),
        "qwen35.ssm.state_size": ([u32], 128),
        "qwen35.ssm.time_step_rank": ([u32], 2),
        "qwen35.ssm.group_count": ([u32], 2),
        "tokenizer.ggml.model": ([s], "no_vocab"),
    }


def test_the_tensor_table_is_a_gated_delta_net_layer_then_an_attention_layer(tmp_path: Path) -> None:
    from gguf import GGMLQuantizationType, GGUFReader

    r = GGUFReader(str(write_tiny_qwen35(tmp_path / "m.gguf")))
    table = {t.name: tuple(int(x) for x in t.shape) for t in r.tensors}
    assert {t.tensor_type for t in r.tensors} == {GGMLQuantizationType.F32}
    common = {"attn_norm.weight": (256,), "post_attention_norm.weight": (256,)}
    ffn = {"ffn_gate.weight": (256, 384), "ffn_down.weight": (384, 256), "ffn_up.weight": (256, 384)}
    # ggml's order (ne0 first); conv channels = 2 * (2 k heads * 128) + 2 v heads * 128
    delta_net = {
        "attn_qkv.weight": (256, 768),
        "attn_gate.weight": (256, 256),
        "ssm_conv1d.weight": (4, 768),
        "ssm_dt.bias": (2,),
        "ssm_a": (2,),
        "ssm_beta.weight": (256, 2),
        "ssm_alpha.weight": (256, 2),
        "ssm_norm.weight": (128,),
        "ssm_out.weight": (256, 256),
    }
    attention = {
        "attn_q.weight": (256, 512),  # the query and its gate
        "attn_k.weight": (256, 256),
        "attn_v.weight": (256, 256),
        "attn_output.weight": (256, 256),
        "attn_q_norm.weight": (128,),
        "attn_k_norm.weight": (128,),
    }
    want = {"token_embd.weight": (256, 128), "output_norm.weight": (256,), "output.weight": (256, 128)}
    want |= {f"blk.0.{n}": v for n, v in (common | delta_net | ffn).items()}
    want |= {f"blk.1.{n}": v for n, v in (common | attention | ffn).items()}
    assert table == want == qwen35_tensors()
    assert [QWEN35.recurrent(i) for i in range(4)] == [True, False, True, False]


def test_the_model_is_the_same_bytes_for_the_same_seed(tmp_path: Path) -> None:
    a = write_tiny_qwen35(tmp_path / "a" / "m.gguf").read_bytes()  # its folder is made
    assert write_tiny_qwen35(tmp_path / "b.gguf").read_bytes() == a
    assert write_tiny_qwen35(tmp_path / "c.gguf", seed=7).read_bytes() != a


def test_another_shape_scales_the_table() -> None:
    t = qwen35_tensors(Qwen35Shape(n_layer=4))
    assert "blk.2.ssm_a" in t and "blk.3.attn_q.weight" in t and "blk.3.ssm_a" not in t
