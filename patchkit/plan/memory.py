"""Memory per device of one arrangement at one context, in llama.cpp's three parts (what
``llama_memory_breakdown_print`` and the load log show): model (weights), context (KV
cache and recurrent state) and compute (the scheduler's buffers), plus the host.

- Weights per the split: each block where ``layer_devices`` puts it; the token embedding
  always on the host (llama.cpp keeps the input layer on the CPU); the output tensor on
  the output layer's device (a tied embedding is duplicated there). Tensor split divides
  what ``llama_meta_device_get_split_state`` splits by the shares and mirrors the rest.
- KV cache: ``n_ctx`` padded to 256 (``llama_context``), per attention layer K and V of
  ``n_embd_k_gqa`` / ``n_embd_v_gqa`` elements per cell in the cache type; a sliding-window
  layer holds ``pad(n_swa + n_ubatch, 256)`` cells at most (``llama_kv_cache_iswa``);
  tensor split divides it by heads.
- Recurrent state: per recurrent layer ``n_embd_r + n_embd_s`` F32 per sequence
  (``llama_memory_recurrent``), divided by tensor split.
- Compute: ggml-alloc reuses memory along the graph, so the buffer is the largest set of
  activations alive at once: a block's (the FFN's hidden activations, or the attention's
  scores without flash attention) or, on the output device, the logits of a whole ubatch
  (``n_ubatch x n_vocab`` F32: llama.cpp reserves for every token an output).
"""

from __future__ import annotations

import dataclasses

from patchkit.plan.arrangement import CPU, Arrangement, layer_devices
from patchkit.plan.model import ModelShape

__all__ = ["CACHE_TYPES", "DeviceMemory", "Memory", "kv_cells", "memory"]

# bytes per element of the KV cache types llama.cpp takes (-ctk/-ctv)
CACHE_TYPES = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q5_1": 24 / 32,
    "q5_0": 22 / 32,
    "q4_1": 20 / 32,
    "q4_0": 18 / 32,
}
F32 = 4
HOST = "host"


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeviceMemory:
    label: str  # the device's label, or "host" for this machine's CPU
    model: int
    context: int
    compute: int
    capacity: int  # bytes it has for buffers (memory minus the driver's overhead)

    @property
    def total(self) -> int:
        return self.model + self.context + self.compute

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity


@dataclasses.dataclass(frozen=True, kw_only=True)
class Memory:
    devices: tuple[DeviceMemory, ...]  # in -dev order, then the -ot device, then the host

    @property
    def fits(self) -> bool:
        return all(d.fits for d in self.devices)

    def over(self) -> list[DeviceMemory]:
        return [d for d in self.devices if not d.fits]


def _pad(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def kv_cells(shape: ModelShape, ctx: int, *, swa: bool, ubatch: int = 512) -> int:
    size = _pad(ctx, 256)
    if swa and shape.n_swa > 0:
        return min(size, _pad(shape.n_swa + ubatch, 256))
    return size


def memory(shape: ModelShape, arr: Arrangement, *, host_capacity: int, n_seq: int = 1) -> Memory:
    """Bytes per device for ``arr`` running ``shape`` at ``arr.ctx``."""
    n = len(arr.devices) + (1 if arr.ot_device is not None else 0)
    model = [0.0] * (n + 1)  # index n (== CPU via -1) is the host
    ctxb = [0.0] * (n + 1)
    where = layer_devices(arr, shape.n_layer)
    kvb = CACHE_TYPES[arr.cache_type]
    tensor = arr.split_mode == "tensor"
    shares = list(arr.shares) if tensor else []
    busy: dict[int, list[int]] = {}

    def spread(il_dev: int, split: float, mirrored: float, target: list[float]) -> None:
        if tensor and il_dev == 0:
            for i, s in enumerate(shares):
                target[i] += split * s + mirrored
        else:
            target[il_dev] += split + mirrored

    for lyr in shape.layers:
        d = where[lyr.index]
        busy.setdefault(d, []).append(lyr.index)
        spread(d, lyr.split_bytes, lyr.mirrored_bytes, model)
        if lyr.kind == "attention":
            cells = kv_cells(shape, arr.ctx, swa=lyr.swa, ubatch=arr.ubatch)
            spread(d, cells * (lyr.k_width + lyr.v_width) * kvb, 0.0, ctxb)
        else:
            spread(d, lyr.state_bytes * max(1, n_seq), 0.0, ctxb)
    out_dev = where[shape.n_layer]
    spread(out_dev, shape.output_split_bytes, shape.output_other_bytes, model)
    model[CPU] += shape.token_embd_bytes + shape.other_bytes

    comp = [0.0] * (n + 1)
    for d in busy:
        idx = range(len(shares)) if tensor and d == 0 else [d]
        for i in idx:
            s = shares[i] if tensor and d == 0 else 1.0
            comp[i] = max(comp[i], _block_compute(shape, arr, s))
    for i in range(len(shares)) if tensor and out_dev == 0 else [out_dev]:
        s = shares[i] if tensor and out_dev == 0 else 1.0
        comp[i] = max(comp[i], _output_compute(shape, arr, s))
    # the host always gathers the input embeddings of a ubatch
    comp[CPU] = max(comp[CPU], F32 * arr.ubatch * shape.n_embd * 2.0)

    devs: list[DeviceMemory] = []
    all_devices = [*arr.devices, *([arr.ot_device] if arr.ot_device is not None else [])]
    for i, dev in enumerate(all_devices):
        devs.append(
            DeviceMemory(
                label=dev.label,
                model=int(model[i]),
                context=int(ctxb[i]),
                compute=int(comp[i]),
                capacity=dev.capacity,
            )
        )
    devs.append(
        DeviceMemory(
            label=HOST,
            model=int(model[CPU]),
            context=int(ctxb[CPU]),
            compute=int(comp[CPU]),
            capacity=host_capacity,
        )
    )
    return Memory(devices=tuple(devs))


# Activations alive at once inside a block, in units of ubatch x F32: the residual and its
# normed copy, Q/K/V and the attention output, the FFN's gate, up and their product.
def _block_compute(shape: ModelShape, arr: Arrangement, share: float) -> float:
    u = arr.ubatch
    n_embd = shape.n_embd
    q = shape.n_head * shape.head_dim
    if shape.n_expert:
        ff = (shape.n_ff_exp or shape.n_ff) * shape.n_expert_used * 3 + shape.n_expert
    else:
        ff = shape.n_ff * 3
    act = 3 * n_embd + max(ff * share, 3 * q * share)
    if not arr.flash_attn:
        cells = _pad(arr.ctx, 256)
        act = max(act, 3 * n_embd + shape.n_head * share * cells * 2)
    return F32 * u * act


def _output_compute(shape: ModelShape, arr: Arrangement, share: float) -> float:
    return F32 * arr.ubatch * (shape.n_vocab * share + 2 * shape.n_embd)
