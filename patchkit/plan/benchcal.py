"""Calibration from a ``patchkit bench`` results folder: its ``bench.json``.

bench measured real llama-bench runs and, through its relay, every RPC host's bytes and
round trips per token and the path they crossed. From that this learns, for the devices
of the rig that bench ran on (matched by llama.cpp's device names: ``CPU`` for the host
with ``dev=none``, ``CUDA<n>`` for the local GPUs in the order given, ``RPC<n>`` over the
``--rpc`` servers in order):

- **a device's effective bandwidth and prompt FLOP/s**, from each point that ran on that
  device alone (layer split or none, every layer offloaded): the measured time per
  token less its wire time as bench accounts it (``bench.projection.compute_time``: the
  point's round trips x the path's rtt + its bytes / the path's rate) is the time the
  device computed; the speed model, wire left out, is solved for the bandwidth that
  gives it (``measure.learn_device``). Several such points: the median.
- **a device's fixed cost per token in a layer split**, from a layer split over two or
  more RPC devices already calibrated above, solved the same way.
- **a link's round trip**, from bench's own measurement of each ``--rpc`` host
  (``rpc_latency``): it replaces the named link's rtt for the devices at that endpoint.

The shape is that of the model bench ran (bench.json names it; its header is read).
"""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from patchkit.bench.link import Link
from patchkit.bench.outdir import BENCH_JSON
from patchkit.bench.projection import compute_time
from patchkit.bench.result import PointResult
from patchkit.core.errors import ConfigError
from patchkit.core.fs import NotRegularFile, read_regular
from patchkit.core.text import printable
from patchkit.plan import calibration as cal
from patchkit.plan.arrangement import Arrangement, device_names
from patchkit.plan.devices import Device
from patchkit.plan.measure import Measured, affine_solve, learn_device
from patchkit.plan.model import ModelShape
from patchkit.plan.speed import PROMPT, hop_cost, speed

__all__ = ["BenchRun", "Learned", "learn", "read_bench"]

MAX_BENCH_JSON = 64 << 20
_TEST = re.compile(r"^(?:pp(?P<p>\d+)|tg(?P<n>\d+))(?:@d(?P<d>\d+))?$")
_NO_LINK = Link(name="none")


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchRun:
    """What plan needs of a bench.json."""

    path: Path
    model: str
    points: tuple[PointResult, ...]
    rpc: tuple[tuple[str, int, float], ...]  # (endpoint, its device count, measured rtt s) in --rpc order
    devices: tuple[str, ...]  # llama-bench's device names (CPU, CUDA0, RPC0, ...)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Learned:
    devices: dict[str, cal.DeviceCal]  # by device label
    links: dict[str, cal.LinkCal]  # by endpoint
    lines: tuple[str, ...]  # one per thing learned or left out, for the log


def read_bench(folder: Path) -> BenchRun:
    """``folder/bench.json`` (or the file itself), read as bench wrote it; one-line errors."""
    path = folder if folder.name == BENCH_JSON and not folder.is_dir() else folder / BENCH_JSON
    where = printable(str(path))
    try:
        raw = read_regular(path, limit=MAX_BENCH_JSON)
    except FileNotFoundError:
        raise ConfigError(
            f"--calibrate-from {printable(str(folder))}: no {BENCH_JSON} there",
            hint="give the results folder `patchkit bench` wrote",
        ) from None
    except (NotRegularFile, OSError) as e:
        raise ConfigError(f"{where}: cannot read: {e.strerror or e}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
        if not isinstance(data, dict) or data.get("schema") != 1 or not isinstance(data.get("points"), list):
            raise ValueError("not a bench.json of schema 1")
        points = tuple(PointResult.from_json(p) for p in data["points"])
        rpc = tuple(
            (str(x["endpoint"]), int(x.get("devices", 1) or 1), float(x.get("median_ms", 0.0)) / 1e3)
            for x in data.get("rpc_latency", [])
            if x.get("ok")
        )
        names = tuple(str(d["name"]) for d in data.get("devices", []))
        model = str(data["model"])
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError, RecursionError) as e:
        raise ConfigError(
            f"{where}: not a bench.json `patchkit bench` wrote ({printable(str(e))[:120]})",
            hint="give the results folder `patchkit bench` wrote",
        ) from None
    return BenchRun(path=path, model=model, points=points, rpc=rpc, devices=names)


def _bench_names(run: BenchRun, rig_devices: tuple[Device, ...], host: Device) -> dict[str, Device]:
    """llama-bench's device name -> the rig's device (only those the bench's servers match)."""
    eps = [ep for ep, _, _ in run.rpc]
    by_ep = {ep: [d for d in rig_devices if d.remote and d.endpoint == ep] for ep in eps}
    out: dict[str, Device] = {"CPU": host}
    n = 0
    for ep, count, _ in run.rpc:
        here = by_ep.get(ep, [])
        for i in range(count):
            if i < len(here):
                out[f"RPC{n}"] = here[i]
            n += 1
    local = [d for d in rig_devices if not d.remote]
    names = device_names(local, [])
    for d in local:
        out[names[d.label]] = d
    return out


def _point_devices(p: PointResult) -> list[str]:
    """The devices a point ran on, by llama-bench's names ([] when it does not say)."""
    dev = dict(p.settings).get("dev") or p.devices
    args = list(p.args)
    if "-dev" in args[:-1]:
        dev = args[args.index("-dev") + 1]
    if not dev or dev == "auto":
        return []
    if dev == "none":
        return ["CPU"]
    return [x for x in re.split(r"[/,]", dev) if x]


def _split_mode(p: PointResult) -> str:
    args = list(p.args)
    if "-sm" in args[:-1]:
        return args[args.index("-sm") + 1]
    return dict(p.settings).get("sm") or next((m.split_mode for m in p.measurements if m.split_mode), "layer")


def _all_layers(p: PointResult, n_layer: int) -> bool:
    args = list(p.args)
    if "-ngl" in args[:-1]:
        try:
            return int(args[args.index("-ngl") + 1]) >= n_layer + 1
        except ValueError:
            return False
    return True  # llama-bench offloads every layer unless told


def _compute_only(p: PointResult) -> tuple[float, float, int, int] | None:
    """(decode tok/s, prompt tok/s) with the wire time as bench accounts it taken out, and
    the decode's mean position and the prompt length; None without both phases."""
    dec, pp = p.decode, p.prompt
    if dec is None or pp is None:
        return None
    md, mp = _TEST.match(dec.test), _TEST.match(pp.test)
    if md is None or mp is None:
        return None
    n_gen, depth = int(md["n"] or 1), int(md["d"] or 0)

    def wire_free(kind: str, tok_s: float) -> float:
        t = p.phase_traffic(kind)
        if t is None or not t.counted:
            return tok_s
        tc = compute_time(
            tok_s, t.rt_per_token, t.bytes_per_token, rtt_s=p.path_rtt_s, rate_bytes_s=p.path_bytes_s
        )
        return 1 / tc if tc > 0 else tok_s

    return (
        wire_free("decode", dec.median),
        wire_free("prompt", pp.median),
        depth + n_gen // 2,
        int(mp["p"] or 0),
    )


def _local(d: Device) -> Device:
    """The device with its link's wire time left out (bench's accounting took it out)."""
    return dataclasses.replace(d, link=_NO_LINK) if d.remote else d


def learn(
    run: BenchRun,
    rig_devices: tuple[Device, ...],
    host: Device,
    *,
    shape_of_model: Callable[[Path], ModelShape],
) -> Learned:
    """Everything ``run`` says about the rig's devices and links."""
    source = f"bench {printable(str(run.path))}"
    stamp = cal.stamp()
    names = _bench_names(run, rig_devices, host)
    lines: list[str] = []
    links: dict[str, cal.LinkCal] = {}
    for ep, _, rtt in run.rpc:
        if rtt > 0 and any(d.remote and d.endpoint == ep for d in rig_devices):
            links[ep] = cal.LinkCal(rtt_s=round(rtt, 7), source=source, when=stamp)
            lines.append(f"link to {printable(ep)}: round trip {rtt * 1e3:.3g} ms (bench's measurement)")
    model = Path(run.model)
    usable = [p for p in run.points if p.status == "ok" and p.decode is not None and p.prompt is not None]
    if not usable:
        return Learned(
            devices={}, links=links, lines=(*lines, "no point of the bench ran: no device learned")
        )
    try:
        shape = shape_of_model(model)
    except ConfigError as e:
        raise ConfigError(
            f"{source}: its model {printable(str(model))} cannot be read ({e.message})",
            hint="calibrating from a bench needs the header of the model it ran",
        ) from None
    # (point, its devices, the compute-only numbers) of one device alone and of layer splits
    singles: list[tuple[PointResult, str, Device, tuple[float, float, int, int]]] = []
    multi: list[tuple[PointResult, list[Device], tuple[float, float, int, int]]] = []
    for p in usable:
        devs = _point_devices(p)
        got = _compute_only(p)
        if got is None or not devs or any(n not in names for n in devs) or not _all_layers(p, shape.n_layer):
            continue
        mode = _split_mode(p)
        if len(devs) == 1 and mode in ("layer", "none", "row"):
            singles.append((p, devs[0], names[devs[0]], got))
        elif mode == "layer" and len(devs) >= 2 and all(names[n].remote for n in devs):
            multi.append((p, [names[n] for n in devs], got))
    # each device's bandwidth rests on its hop cost and the hop cost on the bandwidths: solved
    # together, a few rounds (each step is affine in its own unknown)
    hop: dict[str, float] = {}
    out: dict[str, cal.DeviceCal] = {}
    for _round in range(4):
        lines_now: list[str] = []
        learned: dict[str, list[tuple[float, float]]] = {}
        for p, name, d, (dec, pp, at, n_prompt) in singles:
            dd = dataclasses.replace(_local(d), hop_cost_s=hop.get(d.label, 0.0))
            if d is host:
                arr = Arrangement(split_mode="none", devices=(), shares=(), ctx=max(256, at))
                h = dd
            else:
                arr = Arrangement(split_mode="layer", devices=(dd,), shares=(1.0,), ctx=max(256, at))
                h = host
            m = Measured(decode_tps=dec, prompt_tps=pp, argv=p.args)
            bw, tf = learn_device(shape, arr, h, m, at_ctx=at, n_prompt=n_prompt or PROMPT)
            learned.setdefault(d.label, []).append((bw, tf))
            lines_now.append(
                f"{printable(d.label)} ({name}, point {p.index} {printable(p.label)}): "
                f"{bw:.3g} GB/s effective, prompt {tf:.3g} TFLOP/s"
            )
        out = {
            label: cal.DeviceCal(
                bw_gbs=round(statistics.median(b for b, _ in vals), 3),
                pp_tflops=round(statistics.median(t for _, t in vals), 4),
                source=source,
                when=stamp,
            )
            for label, vals in learned.items()
        }
        hops: dict[str, list[float]] = {}
        for p, members, (dec, _pp, at, _) in multi:
            if any(d.label not in out for d in members):
                continue
            known = tuple(
                dataclasses.replace(_local(d), calibrated_bw_gbs=out[d.label].bw_gbs) for d in members
            )
            ts = _ts_of(p) or tuple(1.0 for _ in known)
            if len(ts) != len(known):
                continue
            arr = Arrangement(
                split_mode="layer",
                devices=known,
                shares=tuple(t / sum(ts) for t in ts),
                ts_values=ts,
                ctx=max(256, at),
            )

            def t_of(
                x: float, arr: Arrangement = arr, known: tuple[Device, ...] = known, at: int = at
            ) -> float:
                a = dataclasses.replace(
                    arr, devices=tuple(dataclasses.replace(d, hop_cost_s=x) for d in known)
                )
                return 1 / speed(shape, a, host=host, at_ctx=at).decode_tps

            x = max(1e-7, affine_solve(t_of, 1 / dec, hop_cost(known[0])))
            for d in members:
                hops.setdefault(d.label, []).append(x)
            lines_now.append(
                f"layer split over {len(members)} ({printable(p.label)}, point {p.index}): "
                f"{x * 1e6:.0f} us per device and token"
            )
        hop = {label: statistics.median(hs) for label, hs in hops.items()}
        if not hop:
            break
    for label, x in hop.items():
        if label in out:
            out[label] = dataclasses.replace(out[label], hop_cost_s=round(x, 7))
    lines += lines_now if singles else []
    # a layer split with one device that ran alone nowhere: that device, from the others
    for p, members, (dec, _pp, at, _) in multi:
        unknown = [d for d in members if d.label not in out]
        if len(unknown) != 1:
            continue
        u = unknown[0]
        ts = _ts_of(p) or tuple(1.0 for _ in members)
        if len(ts) != len(members):
            continue

        def placed(d: Device, bw: float = 0.0) -> Device:
            c = out.get(d.label)
            got = dataclasses.replace(_local(d), calibrated_bw_gbs=c.bw_gbs if c else bw)
            return dataclasses.replace(got, hop_cost_s=hop.get(d.label, c.hop_cost_s if c else 0.0))

        def t_inv(
            inv_bw: float,
            members: list[Device] = members,
            u: Device = u,
            at: int = at,
            ts: tuple[float, ...] = ts,
        ) -> float:
            devs = tuple(placed(d, 1 / inv_bw / 1e9) if d is u else placed(d) for d in members)
            arr = Arrangement(
                split_mode="layer",
                devices=devs,
                shares=tuple(t / sum(ts) for t in ts),
                ts_values=ts,
                ctx=max(256, at),
            )
            return 1 / speed(shape, arr, host=host, at_ctx=at).decode_tps

        inv = affine_solve(t_inv, 1 / dec, 1 / u.effective_bw)
        if inv <= 0:
            lines.append(
                f"{printable(u.label)}: point {p.index} is faster than its other devices allow; not learned"
            )
            continue
        out[u.label] = cal.DeviceCal(bw_gbs=round(1 / inv / 1e9, 3), source=source, when=stamp)
        lines.append(
            f"{printable(u.label)} (in the layer split of point {p.index} {printable(p.label)}, "
            f"the others known): {1 / inv / 1e9:.3g} GB/s effective"
        )
    if not out:
        lines.append("no point ran on one device of this rig alone: no device learned")
    return Learned(devices=out, links=links, lines=tuple(lines))


def _ts_of(p: PointResult) -> tuple[float, ...] | None:
    args = list(p.args)
    ts: Any = args[args.index("-ts") + 1] if "-ts" in args[:-1] else dict(p.settings).get("ts")
    if not ts:
        return None
    try:
        vals = tuple(float(x) for x in re.split(r"[/,]", ts) if x)
    except ValueError:
        return None
    return vals if vals and all(v >= 0 for v in vals) and sum(vals) > 0 else None
