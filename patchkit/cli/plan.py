"""`patchkit plan MODEL`: which arrangement of a rig runs a model fastest, and up to what
context; `patchkit plan shape CONFIG --quant Q -o OUT.gguf`: a hole-GGUF of a model not
downloaded yet.

MODEL is a GGUF (only its header and tensor table are read), a hole-GGUF shape, or a
Hugging Face ``config.json`` with ``--quant``. Devices: ``-d rtx3070 -d p100-16g@box2``
(the shipped table, ``patchkit/plan/devices.toml``), ``-d vram=8GiB,bw=448``, the host
CPU (``--cpu``), ``--link box2=1gbe`` for each remote host, ``--rpc HOST:PORT`` (asked).
Output on stdout: the ranked table, the ``llama-server`` command line of the best one and
its predicted numbers; ``--png FILE`` draws memory per device against capacity and tok/s.
``--json`` prints the plan (``patchkit/plan/report.py``'s ``PlanReport``), ranked best first.

``plan --json`` keys:

- ``arrangements``: each arrangement, best first
- ``arrangements[].bottleneck``: the device or link that takes the largest share of a token
- ``arrangements[].cache_type``: the KV cache type (f16, q8_0)
- ``arrangements[].calibrated``: every device used has a measured bandwidth
- ``arrangements[].command``: the llama-server command line ("" when refused before it was
  estimated)
- ``arrangements[].cpu_layers``: the first layers kept on the host CPU
- ``arrangements[].decode_tps``: predicted generation speed, tokens/s
- ``arrangements[].description``: the arrangement in words (the table's row)
- ``arrangements[].devices``: the devices in -dev order
- ``arrangements[].devices[].calibrated``: its bandwidth was measured (--calibrate), not the
  table's
- ``arrangements[].devices[].host``: the host it is on ("" for this machine)
- ``arrangements[].devices[].memory``: what it holds; null: not estimated (refused before)
- ``arrangements[].devices[].memory.capacity``: bytes it has for buffers (memory minus the
  driver's overhead)
- ``arrangements[].devices[].memory.compute``: llama.cpp's compute buffers on it, bytes
- ``arrangements[].devices[].memory.context``: the KV cache and recurrent state on it, bytes
- ``arrangements[].devices[].memory.model``: the model's weights on it, bytes
- ``arrangements[].devices[].memory.total``: all of it, bytes
- ``arrangements[].devices[].name``: the device's name (the table's, or what was asked)
- ``arrangements[].devices[].share``: its share of the split (-ts, normalised)
- ``arrangements[].fits``: it fits in every device's memory
- ``arrangements[].host_memory``: what the host CPU holds; null: not estimated
- ``arrangements[].host_memory.capacity``: bytes it has for buffers (memory minus the driver's
  overhead)
- ``arrangements[].host_memory.compute``: llama.cpp's compute buffers on it, bytes
- ``arrangements[].host_memory.context``: the KV cache and recurrent state on it, bytes
- ``arrangements[].host_memory.model``: the model's weights on it, bytes
- ``arrangements[].host_memory.total``: all of it, bytes
- ``arrangements[].link_mb_per_token``: MB per token over all links
- ``arrangements[].links``: per remote host
- ``arrangements[].links[].host``: the remote host
- ``arrangements[].links[].mb_per_token``: MB per generated token over the link
- ``arrangements[].links[].ms_per_token``: milliseconds per token the link takes
- ``arrangements[].links[].round_trips_per_token``: round trips per generated token
- ``arrangements[].max_ctx``: the longest context that fits
- ``arrangements[].needs_experimental``: it needs the experimental scheduling patch (-ot beside
  -sm tensor)
- ``arrangements[].ot``: whole layers on a device outside the tensor split (-ot); null: none
- ``arrangements[].ot.device``: the device (-ot) holding whole layers outside the tensor split
- ``arrangements[].ot.host``: its host
- ``arrangements[].ot.layers``: [start, end) of those layers
- ``arrangements[].prompt_tps``: predicted prompt speed, tokens/s
- ``arrangements[].round_trips_per_token``: round trips per token over all links
- ``arrangements[].split_mode``: layer, tensor, or none (everything on the host CPU)
- ``arrangements[].ts_rule``: how the shares were chosen: memory, bandwidth, best, even
- ``arrangements[].why_not``: why it does not fit or was refused ("" when it fits)
- ``ctx``: the context asked for
- ``model``: the model planned
- ``model.arch``: its architecture (general.architecture)
- ``model.attention_layers``: layers with a KV cache
- ``model.n_embd``: its embedding width
- ``model.n_expert``: experts per MoE layer (0: dense)
- ``model.n_layer``: its layers
- ``model.n_vocab``: its vocabulary size
- ``model.name``: the model's name
- ``model.recurrent_layers``: layers with recurrent state
- ``model.weight_bytes``: its weights, bytes
- ``schema``: the JSON format's version: 1
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import click

from patchkit.cli._common import out, out_json
from patchkit.core.errors import ConfigError
from patchkit.core.log import log
from patchkit.core.paths import cache_dir
from patchkit.core.text import printable

if TYPE_CHECKING:
    from patchkit.plan.model import ModelShape
    from patchkit.plan.planner import Candidate, Rig

__all__ = ["COMMANDS", "plan"]


def __getattr__(name: str) -> object:
    """``PlanReport``, the record ``--json`` prints, imported when asked (the CLI loads the
    plan engine only when the command runs)."""
    if name == "PlanReport":
        from patchkit.plan.report import PlanReport

        return PlanReport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


GIB = 1 << 30


def _host_ram() -> int:
    """This machine's RAM from /proc/meminfo (0 where there is none: give --cpu ram=)."""
    try:
        for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class _PlanGroup(click.Group):
    """`plan MODEL ...` runs the planner; `plan shape ...` writes a shape."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args[:1] not in (["-h"], ["--help"]) and (not args or args[0] not in self.commands):
            args = ["rig", *args]
        return super().parse_args(ctx, args)


@click.group("plan", cls=_PlanGroup, invoke_without_command=False)
def plan() -> None:
    """Which arrangement of a rig runs MODEL fastest, and up to what context.

    `patchkit plan MODEL -d DEVICE ... [--ctx N]` ranks them; `patchkit plan shape
    CONFIG.json --quant Q5_K_M -o model.gguf` writes a model's shape as a hole-GGUF.
    """


def _fmt_gib(n: int) -> str:
    return f"{n / GIB:.2f}"


@plan.command("rig", hidden=True)
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-d", "--device", "devices", multiple=True, metavar="SPEC", help="A device: NAME, NAME@HOST, k=v,..."
)
@click.option(
    "--link", "links", multiple=True, metavar="HOST=LINK", help="The link to a remote host (1gbe, ...)."
)
@click.option(
    "--rpc", "rpc", multiple=True, metavar="HOST:PORT[=NAME]", help="Ask an RPC server for its devices."
)
@click.option("--cpu", "cpu", default="cpu", show_default=True, metavar="SPEC", help="The host CPU and RAM.")
@click.option(
    "-c", "--ctx", "ctx_text", default="", metavar="N", help="Context to plan for (111K; default: 32K)."
)
@click.option("--quant", default=None, metavar="TYPE", help="Quantization of a config.json (Q5_K_M...).")
@click.option(
    "--cache-type", "cache_types", default="f16,q8_0", show_default=True, help="KV cache types to try."
)
@click.option("--mode", "modes", default="layer,tensor", show_default=True, help="Split modes to try.")
@click.option(
    "--top", default=12, show_default=True, type=click.IntRange(1, 10_000), help="Rows in the table."
)
@click.option(
    "--png", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the picture."
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("--no-calibration", is_flag=True, help="Ignore the cached calibration.")
@click.option(
    "--check-memory",
    "check_n",
    type=click.IntRange(0, 100),
    default=0,
    metavar="N",
    help="Load the top N that run here in llama.cpp; its buffer sizes beside the prediction.",
)
@click.option("--calibrate", is_flag=True, help="First measure each device here once (llama-bench).")
@click.option(
    "--calibrate-from",
    "calibrate_from",
    multiple=True,
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="Learn the devices and links from a `patchkit bench` results folder (its bench.json).",
)
@click.option(
    "--verify",
    "verify_n",
    type=click.IntRange(0, 100),
    default=0,
    metavar="N",
    help="Measure the top N that run here (and llama.cpp's default) with llama-bench.",
)
@click.option(
    "--bin",
    "bin_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("out/cpu-rpc/bin"),
    show_default=True,
    help="The llama.cpp build's bin/ (llama-cli, llama-bench).",
)
@click.option(
    "--reps", type=click.IntRange(1, 50), default=3, show_default=True, help="llama-bench repetitions."
)
def rig(
    model: Path,
    devices: tuple[str, ...],
    links: tuple[str, ...],
    rpc: tuple[str, ...],
    cpu: str,
    ctx_text: str,
    quant: str | None,
    cache_types: str,
    modes: str,
    top: int,
    png: Path | None,
    as_json: bool,
    no_calibration: bool,
    check_n: int,
    calibrate: bool,
    calibrate_from: tuple[Path, ...],
    verify_n: int,
    bin_dir: Path,
    reps: int,
) -> None:
    """Rank the arrangements of the rig for MODEL (a GGUF, a shape, or config.json + --quant)."""
    from patchkit.plan import calibration
    from patchkit.plan.memory import CACHE_TYPES
    from patchkit.plan.planner import PlanOptions, check_ctx
    from patchkit.plan.planner import plan as run_plan
    from patchkit.plan.report import report
    from patchkit.plan.rig import build_rig, load_model, parse_ctx

    shape = load_model(model, quant)
    ctx = check_ctx(parse_ctx(ctx_text) if ctx_text else min(32768, shape.n_ctx_train))
    cts = tuple(c.strip().lower() for c in cache_types.split(",") if c.strip())
    for c in cts:
        if c not in CACHE_TYPES:
            raise ConfigError(f"--cache-type {c!r} is not one of {', '.join(CACHE_TYPES)}")
    ms = tuple(m.strip().lower() for m in modes.split(",") if m.strip())
    for m in ms:
        if m not in ("layer", "tensor"):
            raise ConfigError(f"--mode {m!r}: layer or tensor (row is refused: see the table)")
    the_rig = build_rig(
        devices=devices, links=links, rpc=rpc, host=cpu, host_ram=_host_ram(), host_cores=os.cpu_count() or 0
    )
    store = calibration.calibration_path(cache_dir())
    if (calibrate or verify_n) and model.suffix == ".json":
        raise ConfigError("--calibrate and --verify measure a GGUF: write one with `patchkit plan shape`")
    if calibrate_from:
        if no_calibration:
            raise ConfigError("--calibrate-from learns into the calibration that --no-calibration ignores")
        _calibrate_from(calibrate_from, the_rig, store)
    if calibrate:
        from patchkit.plan.verify import calibrate as run_calibrate

        for line in run_calibrate(
            shape, the_rig, bench=bin_dir / "llama-bench", model=model, ctx=ctx, store=store, reps=reps
        ):
            log.info(f"calibrated {line}")
    if not no_calibration:
        cal = calibration.load(store)
        import dataclasses

        the_rig = dataclasses.replace(
            the_rig,
            devices=calibration.apply(the_rig.devices, cal),
            host=calibration.apply((the_rig.host,), cal)[0],
        )
    cands = run_plan(shape, the_rig, PlanOptions(ctx=ctx, cache_types=cts, modes=ms))
    # a config.json is planned as the GGUF it would be converted to
    model_arg = (
        str(model.with_name(f"{model.parent.name or 'model'}-{quant.upper()}.gguf")) if quant else str(model)
    )
    rep = report(shape, the_rig, cands, ctx=ctx, model_arg=model_arg)
    if png is not None:
        from patchkit.plan.picture import render_png

        data = render_png(rep)
        tmp = png.with_name(f".{png.name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, png)
        log.info(f"wrote {png}")
    if check_n:
        _check(shape, the_rig, cands, check_n, model, bin_dir)
    if verify_n:
        _verify(shape, the_rig, cands, verify_n, model, bin_dir, ctx, store, reps)
    if as_json:
        out_json(rep.to_json())
        return
    _show(rep, top)


def _calibrate_from(folders: tuple[Path, ...], the_rig: Rig, store: Path) -> None:
    """Each bench folder's lessons, into the cached calibration (every folder read first)."""
    from patchkit.plan import calibration
    from patchkit.plan.benchcal import learn, read_bench
    from patchkit.plan.rig import load_model

    runs = [read_bench(f) for f in folders]
    c = calibration.load(store)
    for run in runs:

        def shape_of(path: Path, run_dir: Path = run.path.parent) -> ModelShape:
            if not path.is_absolute() and not path.exists() and (run_dir / path).exists():
                path = run_dir / path  # a bench run with a relative -m, from its own folder
            return load_model(path, None)

        got = learn(run, the_rig.devices, the_rig.host, shape_of_model=shape_of)
        c.devices.update(got.devices)
        c.links.update(got.links)
        for line in got.lines:
            log.info(f"calibrated from {printable(str(run.path))}: {line}")
    calibration.save(store, c)


def _check(
    shape: ModelShape, the_rig: Rig, cands: list[Candidate], n: int, model: Path, bin_dir: Path
) -> None:
    """Predicted beside llama.cpp's own buffer sizes, on stderr (the plan stays on stdout)."""
    from patchkit.plan.check import MIB, check_memory
    from patchkit.plan.verify import checkable

    picked = [c for c in cands if c.memory is not None and checkable(c.arrangement)][:n]
    if not picked:
        log.warning("--check-memory: no arrangement runs here (only the CPU and RPC servers can be loaded)")
    for c in picked:
        assert c.memory is not None
        rows, _cmd = check_memory(
            bin_dir=bin_dir,
            model=model,
            arr=c.arrangement,
            predicted=c.memory,
            rig=the_rig,
            n_layer=shape.n_layer,
        )
        log.info(f"memory check: {c.arrangement.describe()}")
        for r in rows:
            p = r.predicted
            log.info(
                f"  {r.label}: predicted {p.total / MIB:.0f} MiB (model {p.model / MIB:.0f}, context "
                f"{p.context / MIB:.0f}, compute {p.compute / MIB:.0f}); llama.cpp {r.total / MIB:.0f} MiB "
                f"(model {r.model / MIB:.0f}, context {r.context / MIB:.0f}, compute {r.compute / MIB:.0f})"
                f" {'within 5 % or 64 MiB' if r.ok else 'OFF'}"
            )


def _verify(
    shape: ModelShape,
    the_rig: Rig,
    cands: list[Candidate],
    n: int,
    model: Path,
    bin_dir: Path,
    ctx: int,
    store: Path,
    reps: int,
) -> None:
    from patchkit.plan.verify import verify

    rows = verify(
        shape, the_rig, cands, n, bench=bin_dir / "llama-bench", model=model, ctx=ctx, store=store, reps=reps
    )
    if not rows:
        log.warning("--verify: no arrangement runs here (only the CPU and RPC servers can be measured)")
    for r in rows:
        log.info(
            f"verify: {r.description}: decode predicted {r.predicted_decode:.1f} measured "
            f"{r.measured_decode:.1f} tok/s (x{r.decode_ratio:.2f}); prompt predicted "
            f"{r.predicted_prompt:.0f} measured {r.measured_prompt:.0f} (x{r.prompt_ratio:.2f})"
            + (f"; off: {r.miss_term}" if r.miss_term else "")
        )


def _show(rep: object, top: int) -> None:
    from rich.markup import escape
    from rich.table import Table

    from patchkit.cli._common import out_table
    from patchkit.plan.report import PlanReport

    assert isinstance(rep, PlanReport)
    m = rep.model
    out(
        f"{printable(m.name)}: {m.arch}, {m.n_layer} layers ({m.attention_layers} attention, "
        f"{m.recurrent_layers} recurrent), {m.weight_bytes / GIB:.2f} GiB of weights; context {rep.ctx}"
    )
    table = Table(title="arrangements, best first (* uncalibrated)", title_justify="left")
    for col in (
        "#",
        "arrangement",
        "fits",
        "GiB per device (used/capacity)",
        "max ctx",
        "decode",
        "prompt",
        "wire/token",
        "bottleneck",
    ):
        table.add_column(col)

    def add_row(*cells: str) -> None:  # text, not rich markup: "[...]" stays as it is
        table.add_row(*(escape(c) for c in cells))

    for i, a in enumerate(rep.arrangements[:top], 1):
        mems = [
            f"{d.name}{'@' + d.host if d.host else ''} {_fmt_gib(d.memory.total)}/"
            f"{_fmt_gib(d.memory.capacity)}"
            for d in a.devices
            if d.memory is not None
        ]
        if a.host_memory is not None:
            mems.append(f"host {_fmt_gib(a.host_memory.total)}/{_fmt_gib(a.host_memory.capacity)}")
        mark = "" if a.calibrated else "*"
        fits = "yes" if a.fits else ("refused" if not a.command else "no")
        wire = f"{a.link_mb_per_token:.3g} MB, {a.round_trips_per_token:.0f} RT" if a.links else "—"
        add_row(
            str(i),
            printable(a.description)
            + (" (needs the experimental -ot patch)" if a.needs_experimental else ""),
            fits if a.fits or not a.why_not else f"{fits}: {printable(a.why_not)}",
            ", ".join(mems),
            str(a.max_ctx) if a.command else "—",
            f"{a.decode_tps:.1f}{mark}" if a.command else "—",
            f"{a.prompt_tps:.0f}{mark}" if a.command else "—",
            wire,
            printable(a.bottleneck),
        )
    out_table(table)
    best = next((a for a in rep.arrangements if a.fits), None)
    if best is None:
        out("nothing fits at this context: lower --ctx, try --cache-type q4_0, or add a device")
        return
    out("")
    out(f"best: {printable(best.description)}")
    out(
        f"  decode {best.decode_tps:.1f} tok/s, prompt {best.prompt_tps:.0f} tok/s"
        f"{'' if best.calibrated else ' (uncalibrated: run `patchkit plan --calibrate`)'}; "
        f"fits up to {best.max_ctx} context"
    )
    if best.needs_experimental:
        out("  needs the experimental -ot scheduling patch (recipe cpu-rpc-experimental)")
    out("  " + " ".join(shlex.quote(x) for x in shlex.split(best.command)))
    hosts: dict[str, list[str]] = {}
    for d in best.devices:
        if d.host:
            hosts.setdefault(d.host, []).append(d.name)
    if best.ot is not None and best.ot.host:
        hosts.setdefault(best.ot.host, []).append(best.ot.device)
    for host, names in hosts.items():
        h, _, port = host.rpartition(":") if ":" in host else (host, "", "50052")
        out(
            f"  on {printable(h)}: ggml-rpc-server -H 0.0.0.0 -p {port or 50052} "
            f"(its devices in this order: {', '.join(printable(n) for n in names)})"
        )


@plan.command("shape")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--quant", required=True, metavar="TYPE", help="Quantization preset (Q5_K_M, Q4_K_M, Q8_0...).")
@click.option("-o", "--out", "dest", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--name", default=None, help="general.name of the shape (default: the config's folder).")
@click.option("--force", is_flag=True, help="Replace an existing file.")
def shape(config: Path, quant: str, dest: Path, name: str | None, force: bool) -> None:
    """Write CONFIG's shape as a hole-GGUF: header and tensor table, the data a hole."""
    from patchkit.plan.hfconfig import read_config, table_from_config, write_hole_gguf

    if dest.exists() and dest.is_dir():
        raise ConfigError(f"{dest} is a folder")
    if dest.exists() and not force:
        raise ConfigError(f"{dest} exists", hint="add --force to replace it")
    kv, tensors = table_from_config(read_config(config), quant, name=name or config.parent.name or "model")
    size = write_hole_gguf(kv, tensors, dest)
    out(f"{dest}: {size / GIB:.2f} GiB shape ({len(tensors)} tensors, {quant.upper()}), data region a hole")


COMMANDS = [plan]
