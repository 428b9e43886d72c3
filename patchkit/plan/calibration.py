"""Calibration: each device's effective decode bandwidth (and prompt FLOP/s) and each
link's round trip, learned from measurements and kept in the cache
(``<cache>/plan/calibration.json``), applied to a rig's devices by their label
(``NAME`` or ``NAME@HOST``).

A measured decode time per token ``t`` of a device holding ``B`` bytes of reads over
``L`` layers gives its effective bandwidth ``B / (t - L x layer cost)``; prompt tok/s
gives FLOP/s the same way. Numbers that came from no measurement stay marked
uncalibrated in the table.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from patchkit.core.errors import ConfigError
from patchkit.core.record import Record, RecordError, decode
from patchkit.plan.devices import Device

__all__ = ["Calibration", "DeviceCal", "LinkCal", "apply", "calibration_path", "load", "save", "solve_bw"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeviceCal(Record):
    bw_gbs: float  # effective bytes/s / 1e9 its decode reads at
    pp_tflops: float = 0.0  # effective prompt FLOP/s / 1e12 (0: not measured)
    hop_cost_s: float = 0.0  # fixed seconds per token in a layer split (0: not measured)
    source: str = ""  # what measured it (a bench.json, `plan --calibrate`, `plan --verify`)
    when: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinkCal(Record):
    rtt_s: float  # a small message's measured round trip to the host
    source: str = ""
    when: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Calibration(Record):
    schema: int = 1
    devices: dict[str, DeviceCal] = dataclasses.field(default_factory=dict)
    links: dict[str, LinkCal] = dataclasses.field(default_factory=dict)  # by endpoint (HOST:PORT)


def calibration_path(cache: Path) -> Path:
    return cache / "plan" / "calibration.json"


def load(path: Path) -> Calibration:
    if not path.exists():
        return Calibration()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return decode(Calibration, data)
    except (OSError, ValueError, RecordError) as e:
        raise ConfigError(
            f"{path}: not a calibration file: {e}", hint="delete it and run `patchkit plan --calibrate` again"
        ) from None


def save(path: Path, cal: Calibration) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(cal.to_json(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)


def apply(devices: tuple[Device, ...], cal: Calibration) -> tuple[Device, ...]:
    out = []
    for d in devices:
        lc = cal.links.get(d.endpoint) if d.remote else None
        if lc is not None and d.link is not None:
            d = dataclasses.replace(d, link=dataclasses.replace(d.link, rtt_s=lc.rtt_s))
        c = cal.devices.get(d.label) or cal.devices.get(d.name if not d.host else "")
        if c is None:
            out.append(d)
            continue
        d = dataclasses.replace(d, calibrated_bw_gbs=c.bw_gbs)
        if c.hop_cost_s > 0:
            d = dataclasses.replace(d, hop_cost_s=c.hop_cost_s)
        if c.pp_tflops > 0:
            from patchkit.plan.speed import PP_EFFICIENCY

            if d.kind == "cpu":
                d = dataclasses.replace(d, fp32_tflops=c.pp_tflops / PP_EFFICIENCY["cpu"])
            else:
                d = dataclasses.replace(d, fp16_tflops=c.pp_tflops / PP_EFFICIENCY["gpu"])
        out.append(d)
    return tuple(out)


def solve_bw(seconds_per_token: float, nbytes: float, fixed_s: float) -> float:
    """Effective GB/s from a measured time per token, the bytes read and the fixed part."""
    compute = seconds_per_token - fixed_s
    if compute <= 0:
        compute = seconds_per_token * 0.5
    return nbytes / compute / 1e9


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
