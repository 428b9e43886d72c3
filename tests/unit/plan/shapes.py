"""Small synthetic model configs (Hugging Face form) for the plan tests."""

from __future__ import annotations

from typing import Any


def dense(**over: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 256,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 512,
        "vocab_size": 1024,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": False,
    }
    return {**cfg, **over}


def hybrid(**over: Any) -> dict[str, Any]:
    text = {
        "hidden_size": 256,
        "num_hidden_layers": 8,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "intermediate_size": 512,
        "vocab_size": 1024,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 32,
        "linear_value_head_dim": 32,
        "linear_conv_kernel_dim": 4,
        "full_attention_interval": 4,
        "max_position_embeddings": 8192,
    }
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "text_config": {**text, **over}}


def moe(**over: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "intermediate_size": 512,
        "moe_intermediate_size": 256,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "vocab_size": 1024,
        "max_position_embeddings": 8192,
    }
    return {**cfg, **over}
