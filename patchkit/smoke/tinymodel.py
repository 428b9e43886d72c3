"""Tiny llama-architecture GGUF models, written locally (no downloads).

Two layers, n_embd 64, 4 heads (2 KV heads), n_ff 128 and a ~110-token ASCII
gpt2-style byte-level vocabulary: enough for llama.cpp to load the model and
generate deterministic greedy tokens on CPU, through RPC, or under wine.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["write_tiny_llama"]


def _byte_unicode(c: str) -> str:
    """gpt2 byte-level encoding for the ASCII characters we use."""
    if c == " ":
        return "\u0120"
    if c == "\n":
        return "\u010a"
    return c


def write_tiny_llama(path: Path, *, seed: int = 42, n_layer: int = 2) -> Path:
    import numpy as np
    from gguf import GGUFWriter

    n_embd, n_head, n_head_kv, n_ff = 64, 4, 2, 128
    head_dim = n_embd // n_head
    chars = [chr(c) for c in range(0x21, 0x7F)] + [" ", "\n"]
    tokens = [_byte_unicode(c) for c in chars]
    merge_pairs = [
        ("\u0120", "t"),
        ("h", "e"),
        ("\u0120t", "he"),
        ("i", "n"),
        ("\u0120", "a"),
        ("e", "r"),
        ("o", "n"),
        ("\u0120", "s"),
        ("r", "e"),
        ("a", "t"),
    ]
    merges = []
    for a, b in merge_pairs:
        merges.append(f"{a} {b}")
        tokens.append(a + b)
    n_vocab = len(tokens)

    path.parent.mkdir(parents=True, exist_ok=True)
    w = GGUFWriter(str(path), "llama")
    w.add_name("patchkit-tiny-llama")
    w.add_context_length(256)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(head_dim)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("!"))
    w.add_eos_token_id(tokens.index("~"))
    w.add_add_bos_token(False)

    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int, scale: float = 0.08) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    w.add_tensor("token_embd.weight", mat(n_vocab, n_embd, 0.5))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.add_tensor("output.weight", mat(n_vocab, n_embd, 0.3))
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "attn_k.weight", mat(n_head_kv * head_dim, n_embd))
        w.add_tensor(p + "attn_v.weight", mat(n_head_kv * head_dim, n_embd))
        w.add_tensor(p + "attn_output.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", mat(n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
