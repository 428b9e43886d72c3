"""One arrangement of a rig: split mode, the devices in ``-dev`` order with their ``-ts``
shares, layers left on the CPU, an ``-ot`` hybrid, the KV cache type and the context;
where llama.cpp puts each layer under it (``src/llama-model.cpp``, the split points), and
the ``llama-server`` command line that asks for it.
"""

from __future__ import annotations

import dataclasses
import shlex

import numpy as np

from patchkit.plan.devices import Device

__all__ = ["CPU", "Arrangement", "device_names", "layer_devices", "ot_index"]

CPU = -1  # a layer on the host CPU


@dataclasses.dataclass(frozen=True, kw_only=True)
class Arrangement:
    split_mode: str  # "layer" | "tensor" | "none" (everything on the host CPU)
    devices: tuple[Device, ...]  # -dev order (accelerators and RPC devices; not the host CPU)
    shares: tuple[float, ...]  # -ts, normalised (sums to 1)
    ts_values: tuple[float, ...] = ()  # what -ts says (layer counts, GiB, ...): shares come from it
    ts_rule: str = "memory"  # how the shares were chosen: memory | bandwidth | best | even
    cpu_layers: int = 0  # the first layers kept on the host CPU (-ngl = n_layer + 1 - this)
    ot_device: Device | None = None  # -ot: whole layers on a device outside the tensor split
    ot_layers: tuple[int, int] = (0, 0)  # [start, end) of those layers
    cache_type: str = "f16"
    flash_attn: bool = True
    ctx: int = 4096
    ubatch: int = 512
    host_repack: bool = True  # the host CPU repacks its matrices (x86 AVX2, llama.cpp's default)

    @property
    def needs_experimental(self) -> bool:
        """-ot of whole layers beside -sm tensor needs the experimental scheduling patch."""
        return self.split_mode == "tensor" and self.ot_device is not None

    def describe(self) -> str:
        if self.split_mode == "none":
            return "cpu only"
        devs = ",".join(d.label for d in self.devices)
        ts = "/".join(f"{s * 100:.0f}" for s in self.shares)
        parts = [f"{self.split_mode} {devs}"]
        if len(self.devices) > 1:
            parts.append(f"ts {ts} ({self.ts_rule})")
        if self.cpu_layers:
            parts.append(f"{self.cpu_layers} layers on cpu")
        if self.ot_device is not None:
            a, b = self.ot_layers
            blocks = f"blk {a}" if b - a == 1 else f"blk {a}-{b - 1}"
            parts.append(f"-ot {blocks} on {self.ot_device.label}")
        if self.cache_type != "f16":
            parts.append(f"kv {self.cache_type}")
        return ", ".join(parts)

    def command(self, model: str, *, n_layer: int, rig: tuple[Device, ...] = ()) -> list[str]:
        """The llama-server argument list that asks for this arrangement (``rig``: all the
        rig's devices in the order given, which fixes llama.cpp's device names)."""
        used = [*self.devices, *([self.ot_device] if self.ot_device else [])]
        order = [*rig, *(d for d in used if d.label not in {r.label for r in rig})]
        endpoints: list[str] = []
        for d in order:
            if d.remote and d.endpoint not in endpoints and any(u.endpoint == d.endpoint for u in used):
                endpoints.append(d.endpoint)
        names = device_names(order, endpoints)
        argv = ["llama-server", "-m", model, "-c", str(self.ctx), "-np", "1"]
        if endpoints:
            argv += ["--rpc", ",".join(endpoints)]
        if self.split_mode == "none":
            return [*argv, "-ngl", "0", "-fit", "off"]
        argv += ["-dev", ",".join(names[d.label] for d in self.devices)]
        argv += ["-sm", self.split_mode, "-ngl", str(n_layer + 1 - self.cpu_layers)]
        if len(self.devices) > 1:
            argv += ["-ts", ",".join(f"{v:g}" for v in (self.ts_values or self.shares))]
        argv += ["-fa", "on" if self.flash_attn else "off"]
        if self.cache_type != "f16":
            argv += ["-ctk", self.cache_type, "-ctv", self.cache_type]
        if self.ot_device is not None:
            a, b = self.ot_layers
            pattern = "|".join(str(i) for i in range(a, b))
            d = self.ot_device
            target = names[d.label]
            if d.remote:  # the buffer type: the server's own device index and its endpoint
                idx = [x.label for x in order if x.endpoint == d.endpoint].index(d.label)
                target = f"RPC{idx}[{d.endpoint}]"
            argv += ["-ot", f"blk\\.({pattern})\\.={target}"]
        argv += ["-fit", "off"]
        return argv

    def command_line(self, model: str, *, n_layer: int, rig: tuple[Device, ...] = ()) -> str:
        return shlex.join(self.command(model, n_layer=n_layer, rig=rig))


def device_names(rig: list[Device], endpoints: list[str]) -> dict[str, str]:
    """llama.cpp's device names: CUDA0.. for local GPUs in the order given, CPU for the
    host; RPC<n> numbered over the devices of the ``--rpc`` servers in order
    (ggml-rpc.cpp), a server's devices in the order the rig lists them."""
    out: dict[str, str] = {}
    n_cuda = 0
    for d in rig:
        if not d.remote:
            out[d.label] = "CPU" if d.kind == "cpu" else f"CUDA{n_cuda}"
            n_cuda += d.kind != "cpu"
    n_rpc = 0
    for ep in endpoints:
        for d in rig:
            if d.remote and d.endpoint == ep:
                out[d.label] = f"RPC{n_rpc}"
                n_rpc += 1
    return out


def layer_devices(arr: Arrangement, n_layer: int, *, weights: bool = True) -> list[int]:
    """For each of the n_layer blocks and then the output layer, the index in
    ``arr.devices`` that holds it (CPU for the host), as llama.cpp's layer split assigns
    them: the last ``-ngl`` of the n_layer + 1 layers are offloaded, each to the device
    whose cumulative ``-ts`` share first exceeds (il - first offloaded) / offloaded.

    With ``-ot`` in a layer split, the blocks it names keep their layer's device (their KV
    cache and recurrent state live there: ``model.dev_layer``) while their weights go to
    the ``-ot`` device: ``weights`` says which of the two is asked for."""
    if arr.split_mode == "none" or not arr.devices:
        return [CPU] * (n_layer + 1)
    if arr.split_mode == "tensor":
        out = [0 if il >= arr.cpu_layers else CPU for il in range(n_layer + 1)]
        if arr.ot_device is not None:
            a, b = arr.ot_layers
            for il in range(a, min(b, n_layer)):
                out[il] = len(arr.devices)  # the -ot device
        return out
    # in float32, as llama.cpp computes them, so a share on a layer boundary lands where it does there
    vals = np.asarray(arr.ts_values or arr.shares, dtype=np.float32)
    splits = np.cumsum(vals, dtype=np.float32)
    splits = splits / splits[-1]
    start = arr.cpu_layers
    act = n_layer + 1 - start
    out = []
    for il in range(n_layer + 1):
        if il < start:
            out.append(CPU)
            continue
        x = np.float32(il - start) / np.float32(act)
        i = int(np.searchsorted(splits, x, side="right"))
        out.append(min(i, len(arr.devices) - 1))
    if arr.ot_device is not None and weights:  # -ot moves the blocks' weights, not their layer
        a, b = arr.ot_layers
        for il in range(a, min(b, n_layer)):
            out[il] = ot_index(arr)
    return out


def ot_index(arr: Arrangement) -> int:
    """Where ``layer_devices`` puts the ``-ot`` device: its place in ``-dev`` when it is one
    of the split's devices (a layer split's ``-ot`` must name one: llama.cpp aborts on a
    weight in a buffer no device of the split can run), else after them."""
    d = arr.ot_device
    labels = [x.label for x in arr.devices]
    return labels.index(d.label) if d is not None and d.label in labels else len(arr.devices)
