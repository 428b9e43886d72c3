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
from collections.abc import Iterable

from patchkit.plan.arrangement import CPU, Arrangement, layer_devices, ot_index
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
SCHED_COPIES = 4  # GGML_SCHED_MAX_COPIES (ggml/CMakeLists.txt)
N_OUTPUTS = 1  # outputs llama-server reserves per ubatch with -np 1 (n_outputs_max)


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
    extra_ot = arr.ot_device is not None and ot_index(arr) == len(arr.devices)
    n = len(arr.devices) + (1 if extra_ot else 0)
    model = [0.0] * (n + 1)  # index n (== CPU via -1) is the host
    ctxb = [0.0] * (n + 1)
    where = layer_devices(arr, shape.n_layer)
    # a layer's cache lives on its layer's device (llama_kv_cache: model.dev_layer(il)), which
    # -ot in a layer split does not change
    cache_at = layer_devices(arr, shape.n_layer, weights=False) if arr.split_mode == "layer" else where
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
        if d == CPU and arr.host_repack:
            model[CPU] += lyr.repack_bytes
        c = cache_at[lyr.index]
        if lyr.kind == "attention":
            cells = kv_cells(shape, arr.ctx, swa=lyr.swa, ubatch=arr.ubatch)
            spread(c, cells * (lyr.k_width + lyr.v_width) * kvb, 0.0, ctxb)
        else:
            spread(c, lyr.state_bytes * max(1, n_seq), 0.0, ctxb)
    out_dev = where[shape.n_layer]
    # a tied embedding is the same tensor: duplicated only onto another device
    out_split = 0 if shape.tied and out_dev == CPU else shape.output_split_bytes
    if shape.tied and tensor:  # named token_embd.weight: tensor split mirrors it
        spread(out_dev, 0, out_split + shape.output_other_bytes, model)
    else:
        spread(out_dev, out_split, shape.output_other_bytes, model)
    model[CPU] += shape.token_embd_bytes + shape.other_bytes
    if out_dev == CPU and arr.host_repack:
        model[CPU] += shape.output_repack_bytes

    comp = [0.0] * (n + 1)
    for d in busy:
        idx = range(len(shares)) if tensor and d == 0 else [d]
        for i in idx:
            s = shares[i] if tensor and d == 0 else 1.0
            comp[i] = max(comp[i], _block_compute(shape, arr, s, busy[d]))
    for i in range(len(shares)) if tensor and out_dev == 0 else [out_dev]:
        s = shares[i] if tensor and out_dev == 0 else 1.0
        comp[i] = max(comp[i], _output_compute(shape, arr, s))
    # llama.cpp's pipeline parallelism (layer split over several local accelerators, every
    # layer offloaded, no -ot; RPC devices have no events): the scheduler keeps
    # GGML_SCHED_MAX_COPIES = 4 copies of each split's inputs (the hidden state, the masks)
    if pipeline_parallel(arr):
        for d, layers in busy.items():
            if d != CPU:
                extra = F32 * arr.ubatch * shape.n_embd + _masks(shape, arr, layers)
                comp[d] += (SCHED_COPIES - 1) * extra
    # the host gathers the input embeddings of a ubatch and builds the KQ masks
    comp[CPU] = max(
        comp[CPU], F32 * arr.ubatch * shape.n_embd * 2.0 + _masks(shape, arr, range(shape.n_layer))
    )

    devs: list[DeviceMemory] = []
    all_devices = [*arr.devices, *([arr.ot_device] if extra_ot and arr.ot_device is not None else [])]
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


# Activations alive at once inside a block, in units of ubatch x F32: the residual, its
# normed copy, the block input and output, and the FFN's gate, up and their product (or
# the attention's Q/K/V); plus the KQ mask, an F16 input of ``cells x n_ubatch`` for the
# full-attention layers (and one for the sliding-window ones) that the graph is reserved
# with at the whole cache; without flash attention, the F32 scores and their softmax.
def _block_compute(shape: ModelShape, arr: Arrangement, share: float, layers: list[int]) -> float:
    u = arr.ubatch
    q = shape.n_head * shape.head_dim
    if shape.n_expert:
        ff = 3 * (shape.n_ff_exp or shape.n_ff) * shape.n_expert_used + shape.n_expert
    else:
        ff = 3 * shape.n_ff
    act = 4 * shape.n_embd + max(ff * share, 3 * q * share)
    att = [shape.layers[i] for i in layers if shape.layers[i].kind == "attention"]
    if att and not arr.flash_attn:
        act += 2 * shape.n_head * share * _pad(arr.ctx, 256)
    return F32 * u * act + _masks(shape, arr, layers)


def pipeline_parallel(arr: Arrangement) -> bool:
    """Whether llama.cpp runs this arrangement with pipeline parallelism (llama-context.cpp)."""
    return (
        arr.split_mode == "layer"
        and len(arr.devices) > 1
        and arr.cpu_layers == 0
        and arr.ot_device is None
        and all(not d.remote and d.kind != "cpu" for d in arr.devices)
    )


def _masks(shape: ModelShape, arr: Arrangement, layers: Iterable[int]) -> float:
    """The F16 KQ masks (cells x n_ubatch) the attention layers among ``layers`` read."""
    att = [shape.layers[i] for i in layers if shape.layers[i].kind == "attention"]
    mask = 0.0
    if any(not lyr.swa for lyr in att):
        mask += 2.0 * arr.ubatch * _pad(arr.ctx, 256)
    if any(lyr.swa for lyr in att):
        mask += 2.0 * arr.ubatch * kv_cells(shape, arr.ctx, swa=True, ubatch=arr.ubatch)
    return mask


def _output_compute(shape: ModelShape, arr: Arrangement, share: float) -> float:
    """The logits of the outputs a ubatch has (llama-server: one per sequence)."""
    return F32 * (N_OUTPUTS * shape.n_vocab * share + arr.ubatch * 2 * shape.n_embd)
