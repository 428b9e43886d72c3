"""What the memory and speed models need of a model: per-layer weights (which of them a
tensor split divides, which it mirrors, which are experts), the attention layers' K/V
widths (and which are sliding-window), the recurrent layers' state, and the input/output
tensors — taken from a GGUF's header and tensor table (``ggufread``) or from a shape
written for a ``config.json`` (``hfconfig``).

Layer kinds are read off the tensors themselves (a block with ``ssm_*`` tensors is
recurrent, one with ``attn_k``/``attn_qkv`` is attention), so hybrids need no per-arch
list; the widths come from the metadata llama.cpp reads (``attention.head_count_kv``,
``attention.key_length``, ``ssm.*``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

from patchkit.plan.ggufread import ArrayInfo, GgufError, GgufHeader, TensorInfo

__all__ = ["Layer", "ModelShape", "shape_of", "shape_of_table"]

F32 = 4

# llama_hparams::set_swa_pattern(n): layer il is sliding-window when il % n < n - 1
SWA_PATTERN = {"gemma2": 2, "gemma3": 6, "gpt-oss": 2, "cohere2": 4, "exaone4": 4}

# what llama_meta_device_get_split_state (src/llama-model.cpp) divides among the devices of
# a tensor split; every other tensor of a block is mirrored on each of them
_SPLIT = re.compile(
    r"blk\.\d+\.(attn_(q|k|v|qkv|output|gate)|ssm_(dt|a|alpha|beta|ba|conv1d|out)"
    r"|ffn_(up|gate|down|gate_up)(_exps)?)(\.weight|\.bias)?$"
)
_EXPERT = re.compile(r"blk\.\d+\.ffn_\w+_exps\.")
_BLOCK = re.compile(r"blk\.(\d+)\.")

# architectures llama.cpp's tensor split does not implement (llm_arch_supports_sm_tensor,
# src/llama-arch.cpp at the pin)
NO_TENSOR_SPLIT = frozenset(
    (
        *("grok", "mpt", "plamo2", "minicpm3", "gemma3n", "mamba", "mamba2", "jamba", "falcon-h1"),
        *("olmo2", "olmoe", "deepseek2", "deepseek32", "deepseek4", "glm-dsa", "bitnet", "t5"),
        *("nemotron_h", "nemotron_h_moe", "granitehybrid", "minimax-01", "minimax-m2", "minimax-m3"),
        *("mistral4", "kimi-linear", "bailingmoe3", "kimi-k3", "qwen3tts"),
    )
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Layer:
    index: int
    kind: str  # "attention" | "recurrent"
    weight_bytes: int
    split_bytes: int  # the part a tensor split divides
    expert_bytes: int  # all experts' weights (included in weight_bytes)
    repack_bytes: int = 0  # what the CPU backend copies into its repacked layout (see REPACK)
    params: int = 0  # weight elements (a token's matmul FLOPs are 2 x the active ones)
    expert_params: int = 0
    k_width: int = 0  # n_embd_k_gqa: K elements per cell
    v_width: int = 0
    swa: bool = False
    state_r: int = 0  # recurrent conv state elements per sequence (n_embd_r)
    state_s: int = 0  # recurrent ssm state elements per sequence (n_embd_s)

    @property
    def mirrored_bytes(self) -> int:
        return self.weight_bytes - self.split_bytes

    @property
    def state_bytes(self) -> int:
        return (self.state_r + self.state_s) * F32


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelShape:
    name: str
    arch: str
    n_embd: int
    n_vocab: int
    n_head: int
    n_ctx_train: int
    n_swa: int
    n_expert: int
    n_expert_used: int
    n_ff: int
    n_ff_exp: int
    head_dim: int
    layers: tuple[Layer, ...]
    token_embd_bytes: int  # always on the CPU (llama.cpp keeps the input layer there)
    output_bytes: int  # output.weight, or the tied embedding's duplicate on the output device
    output_split_bytes: int
    output_other_bytes: int  # output_norm etc. (mirrored)
    other_bytes: int  # tensors outside blocks and not input/output (rope freqs...)
    file_bytes: int
    tied: bool = False  # the output is the token embedding (no output.weight)
    output_repack_bytes: int = 0

    @property
    def n_layer(self) -> int:
        return len(self.layers)

    @property
    def weight_bytes(self) -> int:
        return sum(lyr.weight_bytes for lyr in self.layers) + self.token_embd_bytes + self.output_bytes

    @property
    def tensor_split_ok(self) -> bool:
        return self.arch not in NO_TENSOR_SPLIT

    @property
    def recurrent(self) -> bool:
        return any(lyr.kind == "recurrent" for lyr in self.layers)

    @property
    def output_params(self) -> int:
        return self.n_embd * self.n_vocab

    def active_params(self, layer: Layer) -> float:
        if self.n_expert > 0 and layer.expert_params:
            frac = self.n_expert_used / self.n_expert
            return layer.params - layer.expert_params + layer.expert_params * frac
        return float(layer.params)

    def active_bytes(self, layer: Layer) -> float:
        """Weights one token reads in ``layer`` (experts: only the used ones)."""
        if self.n_expert > 0 and layer.expert_bytes:
            frac = self.n_expert_used / self.n_expert
            return layer.weight_bytes - layer.expert_bytes + layer.expert_bytes * frac
        return float(layer.weight_bytes)


# ggml-cpu's repack (ggml/src/ggml-cpu/repack.cpp, x86 with AVX2): matrices of these types
# whose row count is a multiple of 8 get a second, interleaved copy in a CPU_REPACK buffer
# when they live on the host CPU (the mapped file stays mapped too)
REPACK_TYPES = frozenset({2, 12, 20, 39})  # Q4_0, Q4_K, IQ4_NL, MXFP4


def _repacked(t: TensorInfo) -> bool:
    return (
        t.type in REPACK_TYPES and len(t.dims) >= 2 and t.dims[1] % 8 == 0 and t.name != "token_embd.weight"
    )


def _elems(t: TensorInfo) -> int:
    n = 1
    for d in t.dims:
        n *= d
    return n


def _int(kv: Mapping[str, Any], key: str, default: int | None = None) -> int:
    v = kv.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        if default is None:
            raise GgufError(f"the model lacks the integer key {key!r}")
        return default
    return v


def _per_layer(kv: Mapping[str, Any], key: str, n: int, default: int) -> list[int]:
    v = kv.get(key, default)
    if isinstance(v, tuple) and all(isinstance(x, int) for x in v):
        if len(v) != n:
            raise GgufError(f"{key} has {len(v)} entries for {n} layers")
        return [int(x) for x in v]
    if isinstance(v, ArrayInfo):
        raise GgufError(f"{key} has {v.count} entries for {n} layers")
    return [v if isinstance(v, int) and not isinstance(v, bool) else default] * n


def shape_of(header: GgufHeader) -> ModelShape:
    return shape_of_table(
        header.kv, header.tensors, name=header.path.name, file_bytes=header.file_size - header.data_offset
    )


def shape_of_table(
    kv: Mapping[str, Any], tensors: Iterable[TensorInfo], *, name: str, file_bytes: int = 0
) -> ModelShape:
    """The shape of a model from its metadata and tensor table (a header's, or one made
    for a ``config.json``)."""
    arch = kv.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise GgufError(f"{name}: no general.architecture key")
    a = f"{arch}."
    n_layer = _int(kv, a + "block_count")
    if not 1 <= n_layer <= 4096:
        raise GgufError(f"{name}: block_count {n_layer} is out of range (1 to 4096)")
    n_embd = _int(kv, a + "embedding_length")
    n_head = _per_layer(kv, a + "attention.head_count", n_layer, 0)
    n_head_kv = _per_layer(kv, a + "attention.head_count_kv", n_layer, 0)
    head0 = max(n_head) if n_head else 0
    if head0 <= 0:
        raise GgufError(f"{name}: {a}attention.head_count is missing or 0")
    n_head_kv = [h if h > 0 else n_head[i] for i, h in enumerate(n_head_kv)]
    key_len = _int(kv, a + "attention.key_length", n_embd // head0)
    val_len = _int(kv, a + "attention.value_length", key_len)
    n_ff_l = _per_layer(kv, a + "feed_forward_length", n_layer, 0)
    n_swa = _int(kv, a + "attention.sliding_window", 0)
    pattern = kv.get(a + "attention.sliding_window_pattern")
    swa_period = SWA_PATTERN.get(arch, 0)
    d_conv = _int(kv, a + "ssm.conv_kernel", 0)
    d_inner = _int(kv, a + "ssm.inner_size", 0)
    d_state = _int(kv, a + "ssm.state_size", 0)
    n_group = _int(kv, a + "ssm.group_count", 0)
    n_expert = _int(kv, a + "expert_count", 0)
    n_expert_used = _int(kv, a + "expert_used_count", 0)
    nextn = _int(kv, a + "nextn_predict_layers", 0)

    per: dict[int, list[TensorInfo]] = {}
    tok = out = out_split = out_other = other = out_repack = tok_repack = 0
    vocab = 0
    for t in tensors:
        m = _BLOCK.match(t.name)
        if m:
            il = int(m[1])
            if il >= n_layer:
                raise GgufError(f"{name}: tensor {t.name!r} is past block_count {n_layer}")
            per.setdefault(il, []).append(t)
        elif t.name == "token_embd.weight":
            tok = t.nbytes
            tok_repack = t.nbytes if _repacked(dataclasses.replace(t, name="output.weight")) else 0
            vocab = t.dims[1] if len(t.dims) > 1 else 0
        elif t.name == "output.weight":
            out, out_split = out + t.nbytes, out_split + t.nbytes
            out_repack = t.nbytes if _repacked(t) else 0
        elif t.name.startswith("output"):
            out_other += t.nbytes
        else:
            other += t.nbytes
    if not tok:
        raise GgufError(f"{name}: no token_embd.weight tensor")
    tied = not out_split
    if tied:  # llama.cpp duplicates token_embd onto the output device (or its repacked copy)
        out, out_split, out_repack = out + tok, out_split + tok, tok_repack
    out += out_other

    layers = []
    for il in range(n_layer):
        ts = per.get(il, [])
        names = {t.name[len(f"blk.{il}.") :].split(".")[0] for t in ts}
        recurrent = any(n.startswith("ssm_") for n in names)
        kind = "recurrent" if recurrent else "attention"
        if il >= n_layer - nextn:
            kind = "attention"
        if isinstance(pattern, tuple) and len(pattern) == n_layer:
            swa = bool(pattern[il])
        else:
            swa = n_swa > 0 and swa_period > 0 and il % swa_period < swa_period - 1
        layers.append(
            Layer(
                index=il,
                kind=kind,
                weight_bytes=sum(t.nbytes for t in ts),
                split_bytes=sum(t.nbytes for t in ts if _SPLIT.match(t.name)),
                expert_bytes=sum(t.nbytes for t in ts if _EXPERT.match(t.name)),
                repack_bytes=sum(t.nbytes for t in ts if _repacked(t)),
                params=sum(_elems(t) for t in ts),
                expert_params=sum(_elems(t) for t in ts if _EXPERT.match(t.name)),
                k_width=key_len * n_head_kv[il] if kind == "attention" else 0,
                v_width=val_len * n_head_kv[il] if kind == "attention" else 0,
                swa=swa and kind == "attention",
                state_r=(d_conv - 1) * (d_inner + 2 * n_group * d_state) if recurrent and d_conv else 0,
                state_s=d_state * d_inner if recurrent else 0,
            )
        )
    vocab_kv = kv.get("tokenizer.ggml.tokens")
    if isinstance(vocab_kv, (tuple, ArrayInfo)):
        vocab = len(vocab_kv) if isinstance(vocab_kv, tuple) else vocab_kv.count
    return ModelShape(
        name=name,
        arch=arch,
        n_embd=n_embd,
        n_vocab=vocab,
        n_head=head0,
        n_ctx_train=_int(kv, a + "context_length", 4096),
        n_swa=n_swa,
        n_expert=n_expert,
        n_expert_used=n_expert_used,
        n_ff=max(n_ff_l) if n_ff_l else 0,
        n_ff_exp=_int(kv, a + "expert_feed_forward_length", 0),
        head_dim=key_len,
        layers=tuple(layers),
        token_embd_bytes=tok,
        output_bytes=out,
        output_split_bytes=out_split,
        output_other_bytes=out_other,
        other_bytes=other,
        file_bytes=file_bytes,
        tied=tied,
        output_repack_bytes=out_repack,
    )
