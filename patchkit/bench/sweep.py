"""What `patchkit bench` runs: the sweep, what this llama-bench accepts, and the
llama-bench arguments of every point.

``--sweep KEY=V1,V2`` gives one dimension; the points are the cartesian product of
all dimensions (first dimension outermost). A dimension with one value is a fixed
setting. Each point becomes ONE llama-bench run (so a crash loses only that point).

Device sets (``dev``) are resolved against what ``llama-bench -rpc ... --list-devices``
printed: ``auto`` (llama's own choice and order), ``none`` (CPU only), ``local`` (every
non-RPC device), ``remote`` (every RPC device), ``all`` (local then remote), or device
names joined by ``/`` (``CUDA0/RPC0``); tokens mix (``local/RPC1``). ``dev-order``
reorders the set: ``auto`` (as given), ``remote-first``, ``local-first``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Sequence
from typing import NoReturn

from patchkit.bench.problems import SweepRefused
from patchkit.core.errors import ConfigError
from patchkit.core.record import Record
from patchkit.core.text import did_you_mean

__all__ = [
    "DIMENSIONS",
    "MAX_SETUPS",
    "BenchCaps",
    "Device",
    "Dimension",
    "Point",
    "check_supported",
    "count_setups",
    "expand_sweep",
    "parse_caps",
    "parse_devices",
    "parse_sweep",
    "point_args",
    "resolve_devices",
]

_RPC_NAME = re.compile(r"^RPC\d+$")
DEV_TOKENS = ("auto", "none", "local", "remote", "all")
DEV_ORDERS = ("auto", "remote-first", "local-first")
# Setups one bench may run (each is one llama-bench run of up to --timeout seconds): the
# sweep's size is counted before it is expanded, so 200 x 200 x 200 is refused at once
# instead of building 8 million points.
MAX_SETUPS = 1000


@dataclasses.dataclass(frozen=True, kw_only=True)
class Spec:
    """One sweep key: the llama-bench flag it maps to and how its values look."""

    flag: str | None  # None: patchkit's own (dev-order)
    kind: str  # int | ratio | choice | word | devices
    help: str


DIMENSIONS: dict[str, Spec] = {
    "sm": Spec(flag="-sm", kind="choice", help="split mode (none, layer, row, tensor)"),
    "dev": Spec(flag="-dev", kind="devices", help="device set, e.g. local, RPC0/RPC1, none"),
    "dev-order": Spec(flag=None, kind="choice", help="auto, remote-first, local-first"),
    "ts": Spec(flag="-ts", kind="ratio", help="tensor split ratios, e.g. 3/1"),
    "p": Spec(flag="-p", kind="int", help="prompt tokens"),
    "n": Spec(flag="-n", kind="int", help="generated tokens"),
    "depth": Spec(flag="-d", kind="int", help="tokens already in the context"),
    "b": Spec(flag="-b", kind="int", help="batch size"),
    "ub": Spec(flag="-ub", kind="int", help="micro-batch size"),
    "ngl": Spec(flag="-ngl", kind="int", help="layers on the devices"),
    "t": Spec(flag="-t", kind="int", help="CPU threads"),
    "fa": Spec(flag="-fa", kind="choice", help="flash attention"),
    "ctk": Spec(flag="-ctk", kind="word", help="K cache type"),
    "ctv": Spec(flag="-ctv", kind="word", help="V cache type"),
    "link": Spec(
        flag=None,
        kind="link",
        help="emulated link to the RPC hosts: none, 1gbe, 2.5gbe, 10gbe, rate=1gbit+rtt=0.3ms",
    ),
}
_ALIASES = {
    "split-mode": "sm",
    "d": "depth",
    "device": "dev",
    "devices": "dev",
    "tensor-split": "ts",
    "batch": "b",
    "ubatch": "ub",
    "threads": "t",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Dimension:
    key: str
    values: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Point:
    """One setup: a value for every dimension (in sweep order)."""

    settings: tuple[tuple[str, str], ...]
    varying: tuple[str, ...] = ()  # the keys with more than one value

    def get(self, key: str, default: str = "auto") -> str:
        return dict(self.settings).get(key, default)

    @property
    def label(self) -> str:
        keys = self.varying or tuple(k for k, _ in self.settings)
        parts = [f"{k}={v}" for k, v in self.settings if k in keys]
        return " ".join(parts) or "default"


def _check_value(key: str, value: str) -> None:
    kind = DIMENSIONS[key].kind
    if kind == "link":
        from patchkit.bench.link import parse_link

        parse_link(value)
        return
    if kind == "int" and not re.fullmatch(r"\d+", value):
        raise ConfigError(f"--sweep {key}: {value!r} is not a whole number")
    if kind == "ratio" and not re.fullmatch(r"\d+(\.\d+)?(/\d+(\.\d+)?)*", value):
        raise ConfigError(f"--sweep {key}: {value!r} is not a split like 3/1 or 0.6/0.4")
    if key == "dev-order" and value not in DEV_ORDERS:
        raise ConfigError(
            f"--sweep dev-order: {value!r} is not one of {', '.join(DEV_ORDERS)}"
            + did_you_mean(value, DEV_ORDERS)
        )
    if kind in ("word", "devices", "choice") and not re.fullmatch(r"[\w./+-]+", value):
        raise ConfigError(f"--sweep {key}: {value!r} has characters llama-bench does not take")


def parse_sweep(specs: Sequence[str]) -> tuple[Dimension, ...]:
    """``["sm=layer,tensor", "ts=3/1,1/1"]`` -> dimensions; a repeated key adds values.
    More than :data:`MAX_SETUPS` setups in all is a ConfigError (exit 2)."""
    order: list[str] = []
    values: dict[str, dict[str, None]] = {}
    for spec in specs:
        key, eq, rest = spec.partition("=")
        key = _ALIASES.get(key.strip(), key.strip())
        if not eq or not key:
            raise ConfigError(problem=SweepRefused(found="syntax", spec=spec))
        if key not in DIMENSIONS:
            raise ConfigError(
                f"--sweep {key}: unknown key{did_you_mean(key, DIMENSIONS)}",
                hint="keys: " + ", ".join(DIMENSIONS),
            )
        vals = [v.strip() for v in rest.split(",")]
        if key == "link":
            vals = _join_link_parts(vals)
        if not all(vals):
            raise ConfigError(f"--sweep {spec!r}: empty value")
        for v in vals:
            _check_value(key, v)
        if key not in values:
            order.append(key)
            values[key] = {}
        values[key].update(dict.fromkeys(vals))  # kept in order, duplicates dropped
        if len(values[key]) > MAX_SETUPS:  # before the product: one key alone is too many
            _too_many(len(values[key]), f"{key} alone")
    dims = tuple(Dimension(key=k, values=tuple(values[k])) for k in order)
    count_setups(dims)
    return dims


def _too_many(n: int, what: str) -> NoReturn:
    raise ConfigError(
        f"--sweep makes {n:,} setups ({what}), more than {MAX_SETUPS:,}: each is one llama-bench run",
        hint="sweep fewer values, or split the sweep over several benches",
    )


def count_setups(dims: Sequence[Dimension]) -> int:
    """How many points ``dims`` expand to; ConfigError (exit 2) above :data:`MAX_SETUPS`,
    counted without expanding (each key holds at most MAX_SETUPS values: a small product)."""
    n = math.prod(len(d.values) for d in dims)
    if n > MAX_SETUPS:
        _too_many(n, " x ".join(str(len(d.values)) for d in dims))
    return n


def _join_link_parts(vals: list[str]) -> list[str]:
    """``link=rate=1gbit,rtt=0.3ms`` is ONE link: a ``rtt=``/``rate=`` part joins the
    ``key=value`` link before it when that one lacks the key."""
    out: list[str] = []
    for v in vals:
        key = v.partition("=")[0].strip()
        if out and key in ("rate", "rtt") and "=" in out[-1] and f"{key}=" not in out[-1]:
            out[-1] += f"+{v}"
        else:
            out.append(v)
    return out


def expand_sweep(dims: Sequence[Dimension]) -> list[Point]:
    """The cartesian product, first dimension outermost (refused above :data:`MAX_SETUPS`)."""
    count_setups(dims)
    varying = tuple(d.key for d in dims if len(d.values) > 1)
    points = []
    for combo in itertools.product(*(d.values for d in dims)):
        points.append(Point(settings=tuple(zip((d.key for d in dims), combo, strict=True)), varying=varying))
    return points


# ---- what this llama-bench accepts -------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchCaps:
    flags: frozenset[str]  # every option spelling in --help (-sm, --split-mode, ...)
    choices: dict[str, tuple[str, ...]]  # flag -> allowed values, where --help lists them

    def has(self, flag: str) -> bool:
        return flag in self.flags

    def allowed(self, flag: str) -> tuple[str, ...] | None:
        return self.choices.get(flag)

    @property
    def output_format(self) -> str:
        """jsonl survives a crash line by line; older builds have only json."""
        return "jsonl" if "jsonl" in self.choices.get("-o", ()) else "json"


_HELP_LINE = re.compile(r"^\s{1,4}(-[\w-]+(?:(?:,\s*|\s+)--?[\w-]+)*)\s*(?:<([^>]*)>)?")


def parse_caps(help_text: str) -> BenchCaps:
    """Options and their listed choices from ``llama-bench --help``."""
    flags: set[str] = set()
    choices: dict[str, tuple[str, ...]] = {}
    for line in help_text.splitlines():
        m = _HELP_LINE.match(line)
        if not m:
            continue
        names = re.findall(r"--?[\w-]+", m.group(1))
        flags.update(names)
        if m.group(2) and "|" in m.group(2):
            opts = tuple(v.strip() for v in m.group(2).split("|") if v.strip())
            for n in names:
                choices[n] = opts
    if "-m" not in flags and "--model" not in flags:
        raise ConfigError("llama-bench --help did not list -m/--model: not a llama-bench?")
    return BenchCaps(flags=frozenset(flags), choices=choices)


# ---- devices ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Device(Record):
    name: str  # as llama-bench --list-devices names it (CPU, RPC0, CUDA0)
    description: str  # what llama-bench says it is
    total_mib: int = 0  # memory, MiB
    free_mib: int = 0  # free memory, MiB

    @property
    def remote(self) -> bool:
        return bool(_RPC_NAME.match(self.name))


_DEV_LINE = re.compile(
    r"^\s+(?P<name>[^\s:]+): (?P<desc>.*?)"
    r"(?: \((?P<total>\d+) MiB, (?P<free>\d+) MiB free\))?\s*$"
)


def parse_devices(text: str) -> list[Device]:
    """The devices ``llama-bench --list-devices`` printed (CPU is never among them)."""
    lines = text.splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if ln.strip() == "Available devices:")
    except StopIteration:
        raise ConfigError(
            "llama-bench --list-devices printed no 'Available devices:' list", detail="\n".join(lines[-5:])
        ) from None
    out = []
    for ln in lines[start + 1 :]:
        if not ln.startswith(" "):
            break
        m = _DEV_LINE.match(ln)
        if m is None or ln.strip() == "(none)":
            continue
        out.append(
            Device(
                name=m["name"],
                description=m["desc"],
                total_mib=int(m["total"] or 0),
                free_mib=int(m["free"] or 0),
            )
        )
    return out


def resolve_devices(dev: str, order: str, devices: Sequence[Device]) -> str:
    """The ``-dev`` value for a point: 'auto', 'none' or 'NAME/NAME'."""
    by_name = {d.name: d for d in devices}
    if dev == "none":
        return "none"
    if dev == "auto" and order == "auto":
        return "auto"
    picked: list[Device] = []
    for tok in ["all"] if dev == "auto" else dev.split("/"):
        if tok == "all":
            group = list(devices)
        elif tok == "local":
            group = [d for d in devices if not d.remote]
        elif tok == "remote":
            group = [d for d in devices if d.remote]
        elif tok in by_name:
            group = [by_name[tok]]
        else:
            names = [d.name for d in devices]
            raise ConfigError(
                f"--sweep dev: no device {tok!r}{did_you_mean(tok, [*names, *DEV_TOKENS])}",
                hint="devices here: "
                + (", ".join(names) or "none but the CPU")
                + "; tokens: "
                + ", ".join(DEV_TOKENS),
            )
        picked.extend(d for d in group if d not in picked)
    if order == "remote-first":
        picked = [d for d in picked if d.remote] + [d for d in picked if not d.remote]
    elif order == "local-first":
        picked = [d for d in picked if not d.remote] + [d for d in picked if d.remote]
    return "/".join(d.name for d in picked) if picked else "none"


def point_args(point: Point, caps: BenchCaps, devices: Sequence[Device]) -> tuple[str, ...]:
    """llama-bench arguments for the point's settings (not -m/-rpc/-r/-o)."""
    args: list[str] = []
    settings = dict(point.settings)
    for key, value in point.settings:
        spec = DIMENSIONS[key]
        if key in ("dev-order", "link"):
            continue
        if key == "dev":
            value = resolve_devices(value, settings.get("dev-order", "auto"), devices)
            if value == "auto":
                continue
        assert spec.flag is not None
        args += [spec.flag, value]
    if "dev" not in settings and settings.get("dev-order", "auto") != "auto":
        dev = resolve_devices("auto", settings["dev-order"], devices)
        args += ["-dev", dev]
    return tuple(args)


def check_supported(dims: Sequence[Dimension], caps: BenchCaps) -> None:
    """Refuse, before anything runs, a sweep this llama-bench cannot do."""
    for d in dims:
        spec = DIMENSIONS[d.key]
        if d.key == "link":
            continue  # patchkit's relay, not a llama-bench option
        flag = "-dev" if d.key == "dev-order" else spec.flag
        assert flag is not None
        if not caps.has(flag):
            raise ConfigError(problem=SweepRefused(found="no-option", key=d.key, flag=flag))
        allowed = caps.allowed(flag) if spec.kind == "choice" and d.key != "dev-order" else None
        if allowed is not None:
            bad = [v for v in d.values if v not in allowed]
            if bad:
                raise ConfigError(
                    f"--sweep {d.key}={bad[0]}: this llama-bench takes {flag} "
                    f"{'|'.join(allowed)}{did_you_mean(bad[0], allowed)}",
                    hint=(
                        "-sm tensor came with llama.cpp d6f303004 (2026); build a newer pin"
                        if d.key == "sm" and bad[0] == "tensor"
                        else ""
                    ),
                )
