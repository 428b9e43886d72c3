"""A tiny random qwen35 GGUF (gated delta net + full attention): the tensor-split check's model.

The seed's failure needs a hybrid (recurrent) model: its recurrent state is viewed with zero
rows in tensor split. Upstream's ``test-llama-archs -a qwen35`` writes one, but only where it
can create a model in memory first, which it cannot in a ``GGML_BACKEND_DL`` build (it never
loads the backends: "failed to create llama model"). So the smoke writes its own, with the
``gguf`` package, with the shapes ``test-llama-archs`` uses at the pin (tests/test-llama-archs.cpp
``get_gguf_ctx``) and exactly the keys and tensors the qwen35 loader reads
(src/llama-model.cpp ``load_hparams``, src/models/qwen35.cpp): 2 layers, layer 0 a gated
delta net (``full_attention_interval`` 2), layer 1 full attention; n_embd 256, 2 heads of 128,
n_ff 384, no vocabulary (``no_vocab`` with 128 dummy tokens: llama-bench needs none). Every
tensor is F32, normal(0, 0.01), seeded: the same bytes on every run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["QWEN35", "Qwen35Shape", "qwen35_keys", "qwen35_tensors", "write_tiny_qwen35"]


@dataclass(frozen=True, kw_only=True)
class Qwen35Shape:
    """The hyperparameters of the tiny model (test-llama-archs' values for qwen35)."""

    n_vocab: int = 128
    n_ctx: int = 128
    n_embd: int = 256
    n_head: int = 2
    n_ff: int = 384
    n_layer: int = 2
    full_attention_interval: int = 2  # every 2nd layer attends; the others are recurrent
    ssm_conv_kernel: int = 4
    ssm_inner_size: int = 256
    ssm_state_size: int = 128  # the gated delta net's head size (k and v)
    ssm_group_count: int = 2  # its k heads
    ssm_time_step_rank: int = 2  # its v heads
    rms_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def recurrent(self, il: int) -> bool:
        """Whether layer ``il`` is a gated delta net layer (the loader's default rule)."""
        return (il + 1) % self.full_attention_interval != 0


QWEN35 = Qwen35Shape()

# a key's value: (GGUF scalar type or "array", value)
KeyValue = tuple[str, int | float | str | list[int]]


def qwen35_keys(s: Qwen35Shape = QWEN35) -> dict[str, KeyValue]:
    """The metadata the loader needs (``general.architecture`` aside, which the writer adds)."""
    a = "qwen35."
    quarter = s.head_dim // 4
    return {
        a + "vocab_size": ("uint32", s.n_vocab),
        a + "context_length": ("uint32", s.n_ctx),
        a + "embedding_length": ("uint32", s.n_embd),
        a + "block_count": ("uint32", s.n_layer),
        a + "feed_forward_length": ("uint32", s.n_ff),
        a + "attention.head_count": ("uint32", s.n_head),
        a + "attention.head_count_kv": ("uint32", s.n_head),
        a + "attention.layer_norm_rms_epsilon": ("float32", s.rms_eps),
        a + "rope.dimension_sections": ("array", [quarter] * 4),
        a + "full_attention_interval": ("uint32", s.full_attention_interval),
        a + "ssm.conv_kernel": ("uint32", s.ssm_conv_kernel),
        a + "ssm.inner_size": ("uint32", s.ssm_inner_size),
        a + "ssm.state_size": ("uint32", s.ssm_state_size),
        a + "ssm.time_step_rank": ("uint32", s.ssm_time_step_rank),
        a + "ssm.group_count": ("uint32", s.ssm_group_count),
        "tokenizer.ggml.model": ("string", "no_vocab"),
    }


def qwen35_tensors(s: Qwen35Shape = QWEN35) -> dict[str, tuple[int, ...]]:
    """Every tensor's name and its dimensions in ggml's order (``ne``: fastest first), as
    ``llama_model_qwen35::load_arch_tensors`` creates them."""
    key_dim = s.ssm_state_size * s.ssm_group_count
    value_dim = s.ssm_state_size * s.ssm_time_step_rank
    q_dim = s.head_dim * s.n_head
    t: dict[str, tuple[int, ...]] = {
        "token_embd.weight": (s.n_embd, s.n_vocab),
        "output_norm.weight": (s.n_embd,),
        "output.weight": (s.n_embd, s.n_vocab),
    }
    for il in range(s.n_layer):
        p = f"blk.{il}."
        t[p + "attn_norm.weight"] = (s.n_embd,)
        t[p + "post_attention_norm.weight"] = (s.n_embd,)
        if s.recurrent(il):
            t[p + "attn_qkv.weight"] = (s.n_embd, key_dim * 2 + value_dim)
            t[p + "attn_gate.weight"] = (s.n_embd, value_dim)
            t[p + "ssm_conv1d.weight"] = (s.ssm_conv_kernel, key_dim * 2 + value_dim)
            t[p + "ssm_dt.bias"] = (s.ssm_time_step_rank,)
            t[p + "ssm_a"] = (s.ssm_time_step_rank,)
            t[p + "ssm_beta.weight"] = (s.n_embd, s.ssm_time_step_rank)
            t[p + "ssm_alpha.weight"] = (s.n_embd, s.ssm_time_step_rank)
            t[p + "ssm_norm.weight"] = (s.ssm_state_size,)
            t[p + "ssm_out.weight"] = (value_dim, s.n_embd)
        else:
            t[p + "attn_q.weight"] = (s.n_embd, q_dim * 2)  # the query and its gate
            t[p + "attn_k.weight"] = (s.n_embd, s.head_dim * s.n_head)
            t[p + "attn_v.weight"] = (s.n_embd, s.head_dim * s.n_head)
            t[p + "attn_output.weight"] = (q_dim, s.n_embd)
            t[p + "attn_q_norm.weight"] = (s.head_dim,)
            t[p + "attn_k_norm.weight"] = (s.head_dim,)
        t[p + "ffn_gate.weight"] = (s.n_embd, s.n_ff)
        t[p + "ffn_down.weight"] = (s.n_ff, s.n_embd)
        t[p + "ffn_up.weight"] = (s.n_embd, s.n_ff)
    return t


def write_tiny_qwen35(path: Path, *, seed: int = 42, shape: Qwen35Shape = QWEN35) -> Path:
    """Write the model to ``path`` (its folder made); the same ``seed`` gives the same bytes."""
    import numpy as np
    from gguf import GGUFWriter

    path.parent.mkdir(parents=True, exist_ok=True)
    w = GGUFWriter(str(path), "qwen35")
    for key, (kind, value) in qwen35_keys(shape).items():
        if kind == "uint32":
            assert isinstance(value, int)
            w.add_uint32(key, value)
        elif kind == "float32":
            assert isinstance(value, float)
            w.add_float32(key, value)
        elif kind == "string":
            assert isinstance(value, str)
            w.add_string(key, value)
        else:
            assert isinstance(value, list)
            w.add_array(key, value)
    rng = np.random.default_rng(seed)
    for name, ne in qwen35_tensors(shape).items():
        # numpy's shape is ggml's ne reversed (the slowest dimension first)
        data = (rng.standard_normal(tuple(reversed(ne))) * 0.01).astype(np.float32)
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
