"""Which ggml type each tensor of a model gets under a llama.cpp quantization preset
(``Q5_K_M``…), for model shapes made from a ``config.json``.

A simplified ``src/llama-quant.cpp``: the preset's base type for 2-D weights; ``*_K_M``
give ``attn_v`` and ``ffn_down`` (experts too) Q6_K on the layers ``use_more_bits``
picks (the first and last eighth and every third between); ``output.weight`` Q6_K (Q8_0
for Q8_0, the float type for F16/BF16); 1-D tensors, ``ffn_gate_inp`` (the router) and
``ssm_conv1d`` stay F32; a row that is not whole 256-element super-blocks falls back the
way llama.cpp does (Q4_K→Q5_0, Q5_K→Q5_1, Q6_K→Q8_0). The result is within a few percent
of a real file's size, not byte-exact: a real GGUF, when there is one, is read as it is.
"""

from __future__ import annotations

from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T

from patchkit.core.errors import ConfigError
from patchkit.core.text import did_you_mean

__all__ = ["PRESETS", "check_preset", "tensor_type"]

# preset -> (base type, the "more bits" type for attn_v/ffn_down or None, output type)
PRESETS: dict[str, tuple[T, T | None, T]] = {
    "F32": (T.F32, None, T.F32),
    "F16": (T.F16, None, T.F16),
    "BF16": (T.BF16, None, T.BF16),
    "Q8_0": (T.Q8_0, None, T.Q8_0),
    "Q6_K": (T.Q6_K, None, T.Q6_K),
    "Q5_K_M": (T.Q5_K, T.Q6_K, T.Q6_K),
    "Q5_K_S": (T.Q5_K, None, T.Q6_K),
    "Q4_K_M": (T.Q4_K, T.Q6_K, T.Q6_K),
    "Q4_K_S": (T.Q4_K, None, T.Q6_K),
    "Q4_0": (T.Q4_0, None, T.Q6_K),
    "Q4_1": (T.Q4_1, None, T.Q6_K),
    "Q5_0": (T.Q5_0, None, T.Q6_K),
    "Q3_K_M": (T.Q3_K, T.Q5_K, T.Q6_K),
    "Q2_K": (T.Q2_K, T.Q4_K, T.Q6_K),
}
_FALLBACK = {T.Q2_K: T.Q4_0, T.Q3_K: T.Q4_0, T.Q4_K: T.Q5_0, T.Q5_K: T.Q5_1, T.Q6_K: T.Q8_0}
_KEEP_F32 = ("ffn_gate_inp.", "ssm_conv1d.", "ssm_dt.", "_norm.")


def check_preset(name: str) -> str:
    key = name.strip().upper()
    if key not in PRESETS:
        raise ConfigError(
            f"--quant {name!r} is not a known quantization{did_you_mean(key, PRESETS)}",
            hint="known: " + ", ".join(PRESETS),
        )
    return key


def _use_more_bits(il: int, n_layer: int) -> bool:
    return il < n_layer // 8 or il >= 7 * n_layer // 8 or (il - n_layer // 8) % 3 == 2


def tensor_type(preset: str, name: str, dims: tuple[int, ...], n_layer: int) -> T:
    """The type ``name`` (ggml ``dims``) gets under ``preset``."""
    base, more, output = PRESETS[preset]
    if len(dims) < 2 or name.endswith(".ssm_a") or any(k in name for k in _KEEP_F32):
        return T.F32
    if name == "output.weight":
        t = output
    elif more is not None and name.startswith("blk.") and (".attn_v." in name or ".ffn_down" in name):
        il = int(name.split(".")[1])
        t = more if _use_more_bits(il, n_layer) else base
    else:
        t = base
    block = GGML_QUANT_SIZES[t][0]
    if dims[0] % block:
        t = _FALLBACK.get(t, T.F16)
        if dims[0] % GGML_QUANT_SIZES[t][0]:
            t = T.F16
    return t
