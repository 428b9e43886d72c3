"""A model *shape* from a Hugging Face ``config.json`` and a quantization preset: the
metadata and tensor table llama.cpp's converter would write (names and dimensions as the
loaders at the pin create them: ``src/models/*.cpp``), and the hole-GGUF of it.

The hole-GGUF is the header and tensor table written with ``gguf``, then the file
extended to its full size with ``truncate`` (a sparse file: it costs no disk), so
llama.cpp's own dry load reads it as it would the real file. Its vocabulary is synthetic
(byte-level ASCII plus filler tokens, ``vocab_size`` of them), enough to load and run.

Architectures: ``llama`` (Llama, Mistral), ``qwen2``, ``qwen3`` (dense GQA), ``qwen3moe``
(MoE), ``qwen35`` (Qwen3.5: gated delta net layers with a full attention layer every
``full_attention_interval``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gguf import GGMLQuantizationType

from patchkit.core.errors import ConfigError
from patchkit.plan.ggufread import TensorInfo, tensor_nbytes
from patchkit.plan.quant import check_preset, tensor_type

__all__ = ["ARCHS", "Table", "read_config", "table_from_config", "write_hole_gguf"]

MAX_CONFIG = 1 << 20
ALIGN = 32

ARCHS = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3moe",
    "Qwen3_5ForConditionalGeneration": "qwen35",
    "Qwen3_5ForCausalLM": "qwen35",
}

Table = tuple[dict[str, Any], tuple[TensorInfo, ...]]


def read_config(path: Path) -> dict[str, Any]:
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG:
            raise ConfigError(f"{path}: {size} bytes is not a config.json (at most 1 MiB)")
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not JSON: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config.json holds an object, not {type(data).__name__}")
    return data


def _get(cfg: Mapping[str, Any], key: str, default: Any = None) -> int:
    v = cfg.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v > 1 << 24:
        raise ConfigError(f"config.json: {key} must be a positive integer up to 2^24, not {v!r}")
    return v


def table_from_config(cfg: Mapping[str, Any], quant: str, *, name: str = "model") -> Table:
    """The metadata and tensor table of ``cfg`` quantized with ``quant``."""
    preset = check_preset(quant)
    archs = cfg.get("architectures") or []
    known = [a for a in archs if isinstance(a, str) and a in ARCHS] if isinstance(archs, list) else []
    hf = known[0] if known else None
    if hf is None:
        raise ConfigError(
            f"config.json: architectures {archs!r}: none is known here",
            hint="known: " + ", ".join(sorted(ARCHS)) + " (or plan a real GGUF)",
        )
    arch = ARCHS[hf]
    text = cfg.get("text_config")
    c: Mapping[str, Any] = {**cfg, **text} if isinstance(text, dict) else cfg
    n_layer = _get(c, "num_hidden_layers")
    if n_layer > 4096:
        raise ConfigError(f"config.json: num_hidden_layers {n_layer} is out of range")
    n_embd = _get(c, "hidden_size")
    n_head = _get(c, "num_attention_heads")
    n_head_kv = _get(c, "num_key_value_heads", n_head)
    head_dim = _get(c, "head_dim", n_embd // n_head)
    n_ff = _get(c, "intermediate_size")
    n_vocab = _get(c, "vocab_size")
    n_ctx = _get(c, "max_position_embeddings", 4096)
    a = arch + "."
    kv: dict[str, Any] = {
        "general.architecture": arch,
        "general.name": name,
        a + "context_length": n_ctx,
        a + "embedding_length": n_embd,
        a + "block_count": n_layer,
        a + "feed_forward_length": n_ff,
        a + "attention.head_count": n_head,
        a + "attention.head_count_kv": n_head_kv,
        a + "attention.key_length": head_dim,
        a + "attention.value_length": head_dim,
        a + "attention.layer_norm_rms_epsilon": float(c.get("rms_norm_eps", 1e-6)),
        a + "rope.freq_base": float(c.get("rope_theta", 10000.0)),
    }
    t: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (n_embd, n_vocab))]
    t.append(("output_norm.weight", (n_embd,)))
    if not c.get("tie_word_embeddings", False):
        t.append(("output.weight", (n_embd, n_vocab)))
    q, kvw = head_dim * n_head, head_dim * n_head_kv
    recurrent: set[int] = set()
    if arch == "qwen35":
        interval = _get(c, "full_attention_interval", 4)
        recurrent = {il for il in range(n_layer) if (il + 1) % interval}
        hk, hv = _get(c, "linear_key_head_dim"), _get(c, "linear_value_head_dim")
        nk, nv = _get(c, "linear_num_key_heads"), _get(c, "linear_num_value_heads")
        if hk != hv:
            raise ConfigError("config.json: qwen35 needs linear_key_head_dim == linear_value_head_dim")
        d_conv = _get(c, "linear_conv_kernel_dim", 4)
        rope = c.get("rope_parameters") if isinstance(c.get("rope_parameters"), dict) else c
        partial = float(rope.get("partial_rotary_factor", 0.25)) if isinstance(rope, dict) else 0.25
        kv |= {
            a + "ssm.conv_kernel": d_conv,
            a + "ssm.state_size": hk,
            a + "ssm.group_count": nk,
            a + "ssm.time_step_rank": nv,
            a + "ssm.inner_size": hv * nv,
            a + "full_attention_interval": interval,
            a + "rope.dimension_count": int(head_dim * partial),
            a + "rope.dimension_sections": (11, 11, 10, 0),
        }
    if arch == "qwen3moe":
        n_exp, n_used = _get(c, "num_experts"), _get(c, "num_experts_per_tok")
        n_ff_exp = _get(c, "moe_intermediate_size")
        kv |= {a + "expert_count": n_exp, a + "expert_used_count": n_used}
        kv[a + "expert_feed_forward_length"] = n_ff_exp
    for il in range(n_layer):
        p = f"blk.{il}."
        t.append((p + "attn_norm.weight", (n_embd,)))
        if il in recurrent:
            key_dim, value_dim = hk * nk, hv * nv
            t += [
                (p + "attn_qkv.weight", (n_embd, 2 * key_dim + value_dim)),
                (p + "attn_gate.weight", (n_embd, value_dim)),
                (p + "ssm_conv1d.weight", (d_conv, 2 * key_dim + value_dim)),
                (p + "ssm_dt.bias", (nv,)),
                (p + "ssm_a", (nv,)),
                (p + "ssm_beta.weight", (n_embd, nv)),
                (p + "ssm_alpha.weight", (n_embd, nv)),
                (p + "ssm_norm.weight", (hv,)),
                (p + "ssm_out.weight", (value_dim, n_embd)),
            ]
        else:
            t.append((p + "attn_q.weight", (n_embd, q * 2 if arch == "qwen35" else q)))
            t += [(p + "attn_k.weight", (n_embd, kvw)), (p + "attn_v.weight", (n_embd, kvw))]
            t.append((p + "attn_output.weight", (q, n_embd)))
            if arch == "qwen2":
                t += [(p + "attn_q.bias", (q,)), (p + "attn_k.bias", (kvw,)), (p + "attn_v.bias", (kvw,))]
            if arch in ("qwen3", "qwen3moe", "qwen35"):
                t += [(p + "attn_q_norm.weight", (head_dim,)), (p + "attn_k_norm.weight", (head_dim,))]
        t.append((p + ("post_attention_norm.weight" if arch == "qwen35" else "ffn_norm.weight"), (n_embd,)))
        if arch == "qwen3moe":
            t += [
                (p + "ffn_gate_inp.weight", (n_embd, n_exp)),
                (p + "ffn_gate_exps.weight", (n_embd, n_ff_exp, n_exp)),
                (p + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_exp)),
                (p + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_exp)),
            ]
        else:
            t += [
                (p + "ffn_gate.weight", (n_embd, n_ff)),
                (p + "ffn_down.weight", (n_ff, n_embd)),
                (p + "ffn_up.weight", (n_embd, n_ff)),
            ]
    tensors: list[TensorInfo] = []
    offset = 0
    for tname, dims in t:
        ttype = tensor_type(preset, tname, dims, n_layer)
        nbytes = tensor_nbytes(dims, ttype)
        tensors.append(TensorInfo(name=tname, dims=dims, type=int(ttype), offset=offset, nbytes=nbytes))
        offset += (nbytes + ALIGN - 1) // ALIGN * ALIGN
    kv["tokenizer.ggml.tokens"] = _vocab(n_vocab)
    return kv, tuple(tensors)


def _vocab(n: int) -> tuple[str, ...]:
    """A byte-level gpt2 vocabulary of ``n`` tokens: printable ASCII (space as U+0120,
    newline as U+010A), then fillers."""
    base = [chr(c) for c in range(0x21, 0x7F)] + ["\u0120", "\u010a"]
    if n < len(base):
        raise ConfigError(f"config.json: vocab_size {n} is below the {len(base)} byte tokens a shape needs")
    return tuple(base + [f"<|x{i}|>" for i in range(n - len(base))])


def write_hole_gguf(kv: Mapping[str, Any], tensors: tuple[TensorInfo, ...], dest: Path) -> int:
    """Write the header and tensor table, then extend the file to its full size (a hole).
    Returns the file's apparent size. Written beside ``dest`` and renamed: never half written."""
    import numpy as np
    from gguf import GGUFWriter

    arch = kv["general.architecture"]
    tmp = dest.with_name(f".{dest.name}.partial")
    w = GGUFWriter(str(tmp), arch)
    for key, value in kv.items():
        if key == "general.architecture":
            continue
        if key == "tokenizer.ggml.tokens":
            w.add_tokenizer_model("gpt2")
            w.add_tokenizer_pre("default")
            w.add_token_list(list(value))
            w.add_token_merges(["\u0120 t"])
            w.add_bos_token_id(0)
            w.add_eos_token_id(1)
            w.add_add_bos_token(False)
        elif isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, tuple):
            w.add_array(key, list(value))
    for t in tensors:
        shape = tuple(reversed(t.dims))  # gguf takes numpy order
        qtype = GGMLQuantizationType(t.type)
        w.add_tensor_info(t.name, shape, np.dtype(np.float32), t.nbytes, raw_dtype=qtype)
    try:
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        w.close()
        head = tmp.stat().st_size
        data_start = (head + ALIGN - 1) // ALIGN * ALIGN
        last = max(tensors, key=lambda x: x.offset)
        size = data_start + last.offset + last.nbytes
        os.truncate(tmp, size)
        tmp.replace(dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return size
