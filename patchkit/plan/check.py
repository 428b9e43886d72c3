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

# "load_tensors:   CPU_Mapped model buffer size =    92.10 MiB", after the log's optional
# timestamp and level ("0.00.495.338 I ")
_LINE = re.compile(
    r"(?:^|\s)(?P<fn>\w+):\s+(?P<buf>\S+)\s+(?P<kind>model|KV|RS|compute|output) buffer size =\s+"
    r"(?P<mib>[\d.]+) MiB"
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
    """buffer name -> {model, context, compute} bytes from llama.cpp's load log: the last
    load it printed (a ``-fit`` dry run before it prints its own first)."""
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        m = _LINE.search(line)
        if not m or m["mib"] == "":
            continue
        if m["fn"] == "load_tensors" and any(d["compute"] for d in out.values()):
            out = {}  # a new load begins
        part = _PART[m["kind"]]
        d = out.setdefault(m["buf"], {"model": 0, "context": 0, "compute": 0})
        d[part] += round(float(m["mib"]) * MIB)
    return out


def _owner(buf: str, rig: Rig, used: list[Device]) -> str:
    """The device label a buffer belongs to: CPU* -> the host, RPC<i>[ep] -> the i-th device
    of that server, CUDA<n> -> the n-th local GPU."""
    if buf.startswith("CPU"):
        return HOST
    if buf.startswith("Meta"):
        return "Meta"
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
    argv = [
        str(cli),
        *argv[1:],
        "-n",
        "1",
        "-p",
        "hi",
        "-st",
        "--simple-io",
        "--temp",
        "0",
        "--no-warmup",
        "-v",
    ]
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
    # a tensor split's meta device prints one member's buffers (its share of an even split)
    meta = measured.pop("Meta", None)
    if meta is not None:
        for d in arr.devices:
            measured[d.label] = dict(meta)
    rows = []
    for p in predicted.devices:
        m = measured.get(p.label, {"model": 0, "context": 0, "compute": 0})
        rows.append(CheckRow(label=p.label, predicted=p, **m))
    return rows, " ".join(argv)
