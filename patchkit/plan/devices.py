"""The devices of a rig: the shipped table (``devices.toml``, each row with its public
source), devices given outright (``vram=8GiB,bw=448GB/s,...``), the CPU, and a device
behind RPC (``NAME@HOST``, with the link to HOST from ``--link HOST=1gbe``).

Every number is range-checked, the table's rows as well as the user's: a row out of range
is one line naming it.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from importlib import resources
from typing import Any

from patchkit.bench.link import Link
from patchkit.core.errors import ConfigError
from patchkit.core.text import did_you_mean

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = ["RPC_PORT", "Device", "load_table", "parse_device", "parse_size_text"]

RPC_PORT = 50052  # ggml-rpc-server's default port
GIB = 1 << 30
MIB = 1 << 20

# key -> (low, high) accepted
_RANGES: dict[str, tuple[float, float]] = {
    "vram": (0, 16 * (1 << 40)),
    "bw_gbs": (0.1, 100_000),
    "fp16_tflops": (0.001, 10_000),
    "fp32_tflops": (0.001, 10_000),
    "efficiency": (0.01, 1.0),
    "overhead_mib": (0, 65536),
    "cores": (1, 4096),
    "threads": (1, 4096),
}
_ALIASES = {
    "bw": "bw_gbs",
    "fp16": "fp16_tflops",
    "fp32": "fp32_tflops",
    "eff": "efficiency",
    "overhead": "overhead_mib",
    "ram": "vram",
    "mem": "vram",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Device:
    """One device of the rig, where it is, and what the models assume of it."""

    name: str  # the table's name, or what the user called it
    host: str = ""  # "" for this machine; else the RPC host (HOST or HOST:PORT)
    kind: str = "gpu"  # "gpu" | "cpu"
    vram: int = 0  # bytes usable for buffers (RPC: what the server reports free)
    bw_gbs: float = 0.0
    fp16_tflops: float = 0.0
    fp32_tflops: float = 0.0
    cc: str = ""
    efficiency: float = 0.7
    overhead_mib: float = 0.0
    why: str = ""
    source: str = ""
    link: Link | None = None  # the link to ``host``
    calibrated_bw_gbs: float = 0.0  # measured effective bandwidth (0: none)
    graph_cost_s: float = 0.0  # measured fixed cost of one graph (0: the kind's default)
    hop_cost_s: float = 0.0  # measured fixed cost per token in a layer split (0: the default)
    cores: int = 0  # a CPU device: its machine's cores (0: unknown)
    threads: int = 0  # a CPU device: the threads it computes with (0: all the cores)

    @property
    def remote(self) -> bool:
        return bool(self.host)

    @property
    def label(self) -> str:
        return f"{self.name}@{self.host}" if self.host else self.name

    @property
    def endpoint(self) -> str:
        if not self.host:
            return ""
        return self.host if re.search(r":\d+$", self.host) else f"{self.host}:{RPC_PORT}"

    @property
    def machine(self) -> str:
        """The machine it computes on: "" for this one (a loopback RPC server included)."""
        if not self.host:
            return ""
        name = re.sub(r":\d+$", "", self.host).strip("[]")
        return "" if name in ("127.0.0.1", "localhost", "::1") else name

    @property
    def effective_bw(self) -> float:
        """Bytes/s the decode kernels read at: measured, else bandwidth x efficiency."""
        if self.calibrated_bw_gbs > 0:
            return self.calibrated_bw_gbs * 1e9
        return self.bw_gbs * 1e9 * self.efficiency

    @property
    def capacity(self) -> int:
        """Bytes for llama.cpp's buffers: memory minus the driver's own overhead."""
        return max(0, self.vram - int(self.overhead_mib * MIB))


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*(b|kib|mib|gib|tib|kb|mb|gb|tb)?$", re.I)
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
}


def parse_size_text(text: str, what: str) -> int:
    """``8GiB`` / ``16GB`` / ``8589934592`` -> bytes (GB is decimal, GiB binary)."""
    m = _SIZE.match(text.strip())
    if not m:
        raise ConfigError(f"{what}: {text!r} is not a size (e.g. 8GiB, 16GB, 12288MiB)")
    return int(float(m[1]) * _SIZE_UNITS[(m[2] or "").lower()])


def _number(key: str, text: str, what: str) -> float:
    if key == "vram":
        return float(parse_size_text(text, what))
    if key == "overhead_mib":
        return parse_size_text(text, what) / MIB if re.search(r"[a-z]", text, re.I) else float(text)
    t = re.sub(r"\s*(gb/s|gbs|tflops|tf)$", "", text.strip(), flags=re.I)
    try:
        return float(t)
    except ValueError:
        raise ConfigError(f"{what}: {key}={text!r} is not a number") from None


def _checked(fields: dict[str, Any], what: str) -> dict[str, Any]:
    for key, (lo, hi) in _RANGES.items():
        if key not in fields:
            continue
        v = fields[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi or v != v:
            raise ConfigError(f"{what}: {key} = {v!r} is out of range ({lo:g} to {hi:g})")
    return fields


_TABLE_KEYS = {
    *("vram", "bw_gbs", "fp16_tflops", "fp32_tflops", "cc", "efficiency", "overhead_mib", "why", "source")
}


def load_table(text: str | None = None) -> dict[str, Device]:
    """The shipped device table (or ``text``, a table in the same form), every row checked."""
    if text is None:
        text = resources.files("patchkit.plan").joinpath("devices.toml").read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"device table: {e}") from None
    out: dict[str, Device] = {}
    for name, row in data.items():
        if not isinstance(row, dict):
            raise ConfigError(f"device table: {name} is not a table")
        unknown = set(row) - _TABLE_KEYS
        if unknown:
            raise ConfigError(f"device table row {name}: unknown key {sorted(unknown)[0]!r}")
        if not row.get("source"):
            raise ConfigError(f"device table row {name}: no source (each row names its public source)")
        fields = _checked(dict(row), f"device table row {name}")
        out[name] = Device(name=name, kind="cpu" if name == "cpu" else "gpu", **fields)
    return out


def parse_device(spec: str, table: dict[str, Device], links: dict[str, Link], *, host_ram: int = 0) -> Device:
    """``rtx3070`` / ``p100-16g@box2`` / ``vram=8GiB,bw=448GB/s,name=mine`` /
    ``p100-16g,eff=0.5@box2`` -> a Device (a remote one carries its host's link)."""
    what = f"--device {spec!r}"
    body, _, host = spec.strip().rpartition("@") if "@" in spec else (spec.strip(), "", "")
    parts = [p.strip() for p in body.split(",") if p.strip()]
    if not parts:
        raise ConfigError(f"{what}: empty")
    base: Device | None = None
    if "=" not in parts[0]:
        name = parts.pop(0).lower()
        if name not in table:
            raise ConfigError(
                f"{what}: unknown device {name!r}{did_you_mean(name, table)}",
                hint="known: " + ", ".join(sorted(table)) + "; or give it outright: vram=8GiB,bw=448GB/s",
            )
        base = table[name]
    fields: dict[str, Any] = {}
    for p in parts:
        key, eq, value = p.partition("=")
        key = _ALIASES.get(key.strip().lower(), key.strip().lower())
        if not eq or key not in (*_RANGES, "name", "cc", "kind"):
            raise ConfigError(
                f"{what}: {p!r} is not key=value with a known key"
                f"{did_you_mean(key, [*_RANGES, *_ALIASES, 'name', 'cc', 'kind'])}",
                hint="keys: name, vram, bw (GB/s), fp16, fp32 (TFLOPS), eff (0-1), overhead (MiB), cc, kind, "
                "cores, threads",
            )
        if key in ("name", "cc", "kind"):
            fields[key] = value.strip()
        else:
            fields[key] = _number(key, value, what)
            if key in ("cores", "threads"):
                if fields[key] != int(fields[key]):
                    raise ConfigError(f"{what}: {key}={value!r} is not a whole number")
                fields[key] = int(fields[key])
    if fields.get("kind", "gpu") not in ("gpu", "cpu"):
        raise ConfigError(f"{what}: kind must be gpu or cpu")
    if base is None:
        for need in ("vram", "bw_gbs"):
            if need not in fields:
                raise ConfigError(f"{what}: a device given outright needs vram= and bw=")
        fields.setdefault("name", "custom")
        fields.setdefault("fp16_tflops", 10.0)
        fields.setdefault("fp32_tflops", 5.0)
        fields.setdefault("why", "given outright")
        dev = Device(**_checked(fields, what))
    else:
        dev = dataclasses.replace(base, **_checked(fields, what))
    if dev.kind == "cpu" and dev.vram == 0 and not host:
        dev = dataclasses.replace(dev, vram=host_ram)
    if dev.vram <= 0:
        raise ConfigError(f"{what}: no memory size (give ram=/vram=)")
    if host:
        if not re.fullmatch(r"[A-Za-z0-9._-]+(:\d{1,5})?|\[[0-9A-Fa-f:.%\w]+\]:\d{1,5}", host):
            raise ConfigError(f"{what}: {host!r} is not a host name or HOST:PORT")
        hostname = re.sub(r":\d+$", "", host)
        link = links.get(host) or links.get(hostname)
        if link is None:
            raise ConfigError(
                f"{what}: no link to {hostname}",
                hint=f"say how it is reached: --link {hostname}=1gbe (2.5gbe, 10gbe, rate=1gbit,rtt=0.3ms)",
            )
        dev = dataclasses.replace(dev, host=host, link=link)
    return dev
