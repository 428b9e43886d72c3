"""The memory model against llama.cpp's own numbers: load the model with the arrangement's
arguments in ``llama-cli`` (one token), read the buffer sizes its load log prints per
device (``model``, ``KV``, ``RS``, ``compute``, ``output`` buffer size = N MiB) and set them
beside the prediction. Where the devices and the file exist: this machine's CPU and RPC
servers, local or on 127.0.0.1.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from patchkit.core.errors import SmokeError, ToolMissing
from patchkit.core.proc import run
from patchkit.plan.arrangement import Arrangement
from patchkit.plan.devices import Device
from patchkit.plan.memory import HOST, DeviceMemory, Memory
from patchkit.plan.planner import Rig

__all__ = ["MIB", "TOLERANCE", "CheckRow", "check_memory", "parse_buffers", "within"]

MIB = 1 << 20
TOLERANCE = (0.05, 64 * MIB)  # within 5 % or 64 MiB

_LINE = re.compile(
    r"^(?P<fn>\w+):\s+(?P<buf>\S+)\s+(?P<kind>model|KV|RS|compute|output) buffer size =\s+(?P<mib>[\d.]+) MiB"
)
_PART = {"model": "model", "KV": "context", "RS": "context", "compute": "compute", "output": "compute"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckRow:
    label: str
    predicted: DeviceMemory
    model: int
    context: int
    compute: int

    @property
    def total(self) -> int:
        return self.model + self.context + self.compute

    @property
    def ok(self) -> bool:
        return within(self.predicted.total, self.total)


def within(predicted: int, measured: int) -> bool:
    rel, absolute = TOLERANCE
    return abs(predicted - measured) <= max(absolute, rel * measured)


def parse_buffers(text: str) -> dict[str, dict[str, int]]:
    """buffer name -> {model, context, compute} bytes from llama.cpp's load log."""
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        part = _PART[m["kind"]]
        d = out.setdefault(m["buf"], {"model": 0, "context": 0, "compute": 0})
        d[part] += round(float(m["mib"]) * MIB)
    return out


def _owner(buf: str, rig: Rig, used: list[Device]) -> str:
    """The device label a buffer belongs to: CPU* -> the host, RPC<i>[ep] -> the i-th device
    of that server, CUDA<n> -> the n-th local GPU."""
    if buf.startswith("CPU"):
        return HOST
    m = re.match(r"RPC(\d+)\[(.+)\]$", buf)
    if m:
        idx, ep = int(m[1]), m[2]
        on = [d for d in rig.devices if d.remote and d.endpoint == ep]
        return on[idx].label if idx < len(on) else buf
    m = re.match(r"CUDA(\d+)", buf)
    if m:
        local = [d for d in rig.devices if not d.remote and d.kind != "cpu"]
        n = int(m[1])
        return local[n].label if n < len(local) else buf
    return buf


def check_memory(
    *,
    bin_dir: Path,
    model: Path,
    arr: Arrangement,
    predicted: Memory,
    rig: Rig,
    n_layer: int,
    timeout: float = 600,
) -> tuple[list[CheckRow], str]:
    """Run llama-cli once with ``arr``'s arguments; each device's measured buffers beside
    the prediction, and the command that ran."""
    cli = bin_dir / "llama-cli"
    if not cli.is_file():
        raise ToolMissing(f"{bin_dir} has no llama-cli", hint="point --bin at a build's bin/ folder")
    argv = arr.command(str(model), n_layer=n_layer, rig=rig.devices)
    argv = [str(cli), *argv[1:], "-n", "1", "-p", "hi", "-st", "--simple-io", "--temp", "0", "--no-warmup"]
    res = run(argv, timeout=timeout, input=b"", merge_stderr=True)
    text = res.stdout if isinstance(res.stdout, str) else ""
    bufs = parse_buffers(text)
    if not bufs:
        tail = " | ".join(text.strip().splitlines()[-3:])[:400]
        raise SmokeError(f"llama-cli printed no buffer sizes (exit {res.returncode}): {tail}")
    used = [*arr.devices, *([arr.ot_device] if arr.ot_device else [])]
    measured: dict[str, dict[str, int]] = {}
    for buf, parts in bufs.items():
        who = _owner(buf, rig, used)
        m = measured.setdefault(who, {"model": 0, "context": 0, "compute": 0})
        for k, v in parts.items():
            m[k] += v
    rows = []
    for p in predicted.devices:
        m = measured.get(p.label, {"model": 0, "context": 0, "compute": 0})
        rows.append(CheckRow(label=p.label, predicted=p, **m))
    return rows, " ".join(argv)
