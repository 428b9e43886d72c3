"""A rig from the command line: ``--device`` specs, ``--link HOST=SPEC``, ``--rpc
HOST:PORT[=NAME,...]`` (asked for its devices and free memory, its round trip measured)
and the host CPU; and the model from its argument (a GGUF, or a ``config.json`` plus a
quantization preset)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

from patchkit.bench.link import Link, parse_link
from patchkit.core.errors import ConfigError
from patchkit.plan.devices import Device, load_table, parse_device
from patchkit.plan.ggufread import read_header
from patchkit.plan.hfconfig import read_config, table_from_config
from patchkit.plan.model import ModelShape, shape_of, shape_of_table
from patchkit.plan.planner import Rig
from patchkit.rpc.probe import ServerInfo, parse_endpoint, server_info

__all__ = ["build_rig", "load_model", "parse_ctx", "parse_links"]

Probe = Callable[[str, int], ServerInfo]


def parse_ctx(text: str) -> int:
    """``32768`` / ``111K`` / ``1M`` (K = 1024) -> tokens."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmM]?)\s*", text)
    if not m:
        raise ConfigError(f"--ctx {text!r} is not a number of tokens (e.g. 32768, 111K)")
    return int(m[1]) * {"": 1, "k": 1024, "m": 1 << 20}[m[2].lower()]


def parse_links(specs: tuple[str, ...]) -> dict[str, Link]:
    out: dict[str, Link] = {}
    for s in specs:
        host, eq, spec = s.partition("=")
        if not eq or not host.strip() or not spec.strip():
            raise ConfigError(f"--link {s!r} is not HOST=LINK (e.g. box2=1gbe, box2=rate=1gbit,rtt=0.3ms)")
        out[host.strip()] = parse_link(spec)
    return out


def load_model(path: Path, quant: str | None) -> ModelShape:
    if path.suffix == ".json":
        if not quant:
            raise ConfigError(f"{path}: a config.json needs --quant (e.g. --quant Q5_K_M)")
        kv, tensors = table_from_config(read_config(path), quant, name=path.parent.name or path.stem)
        return shape_of_table(kv, tensors, name=f"{path.parent.name or path.stem} {quant.upper()}")
    if quant:
        raise ConfigError("--quant is for a config.json; a GGUF says its own types")
    return shape_of(read_header(path))


def build_rig(
    *,
    devices: tuple[str, ...],
    links: tuple[str, ...],
    rpc: tuple[str, ...],
    host: str,
    host_ram: int,
    host_cores: int = 0,
    probe: Probe | None = None,
) -> Rig:
    table = load_table()
    lk = parse_links(links)
    out: list[Device] = []
    for spec in devices:
        out.append(parse_device(spec, table, lk))
    ask = probe or (lambda h, p: server_info(h, p, timeout=5.0))
    for spec in rpc:
        endpoint, _, kind = spec.partition("=")
        h, port = parse_endpoint(endpoint)
        info = ask(h, port)
        base = parse_device(kind or "cpu", table, {}, host_ram=1)
        link = lk.get(f"{h}:{port}") or lk.get(h)
        if link is None:
            link = Link(name=f"measured rtt {info.rtt.median_s * 1e3:.3g} ms", rtt_s=info.rtt.median_s)
        for d in info.devices:
            out.append(
                dataclasses.replace(
                    base,
                    name=f"{base.name}{d.index}" if len(info.devices) > 1 else base.name,
                    host=f"{h}:{port}",
                    vram=d.free,
                    overhead_mib=0.0,
                    link=link,
                )
            )
    labels = [d.label for d in out]
    dup = next((x for x in labels if labels.count(x) > 1), None)
    if dup:
        raise ConfigError(
            f"device {dup} is given twice",
            hint="two of the same card on one host: name them (p100-16g,name=p100a@box2)",
        )
    hostdev = parse_device(host, table, {}, host_ram=host_ram)
    if hostdev.kind != "cpu":
        hostdev = dataclasses.replace(hostdev, kind="cpu")
    if not hostdev.cores:
        hostdev = dataclasses.replace(hostdev, cores=host_cores)
    return Rig(devices=tuple(out), host=hostdev)
