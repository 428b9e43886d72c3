"""The tiny local GGUF model the smoke stage generates with."""

from __future__ import annotations

from pathlib import Path

from patchkit.smoke.tinymodel import write_tiny_llama


def test_tiny_llama_has_what_llama_cpp_needs(tmp_path: Path) -> None:
    from gguf import GGUFReader

    path = write_tiny_llama(tmp_path / "m.gguf")
    r = GGUFReader(str(path))
    keys = set(r.fields)
    for k in (
        "general.architecture",
        "llama.context_length",
        "llama.embedding_length",
        "llama.block_count",
        "llama.feed_forward_length",
        "llama.attention.head_count",
        "llama.attention.layer_norm_rms_epsilon",
        "tokenizer.ggml.model",
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.merges",
    ):
        assert k in keys, k
    tokens = r.fields["tokenizer.ggml.tokens"]
    n_vocab = len(tokens.data)
    assert 100 <= n_vocab <= 120
    shapes = {t.name: tuple(int(x) for x in t.shape) for t in r.tensors}
    assert shapes["token_embd.weight"] == (64, n_vocab)  # ggml order: ne0 = n_embd
    assert shapes["blk.1.attn_k.weight"] == (64, 32)  # 2 KV heads of 16
    assert shapes["blk.1.ffn_down.weight"] == (128, 64)
    assert len([n for n in shapes if n.startswith("blk.")]) == 2 * 9


def test_tiny_llama_is_deterministic(tmp_path: Path) -> None:
    a = write_tiny_llama(tmp_path / "a.gguf").read_bytes()
    b = write_tiny_llama(tmp_path / "b.gguf").read_bytes()
    assert a == b
    assert write_tiny_llama(tmp_path / "c.gguf", seed=7).read_bytes() != a
