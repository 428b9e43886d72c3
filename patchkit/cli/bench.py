"""`patchkit bench OUTDIR`: which arrangement of devices and split is fastest.

While it runs, the steps and one line per setup go to stderr. At the end the summary goes
to stdout: a table of the results (one row per setup: decode and prompt tok/s, the decode
traffic per token when the relay counted it, best / failed / skipped), the projection vs
emulated link lines, and the closing line naming the files written. ``--json`` prints
bench.json (its exact text: ``BenchReport`` through core.record, keys sorted) on stdout
instead, and the summary lines go to stderr as before.

``bench --json`` (bench.json) keys:

- ``best``: the fastest setup's label by ``decode`` and by ``prompt`` (null: none ran)
- ``build``: the build benched: dir, recipe, upstream_commit, patches, os
- ``complete``: False while the sweep runs (or when it was interrupted)
- ``demo``: a --demo run (loopback RPC servers)
- ``devices``: what llama-bench --list-devices listed
- ``devices[].description``: what llama-bench says it is
- ``devices[].free_mib``: free memory, MiB
- ``devices[].name``: as llama-bench --list-devices names it (CPU, RPC0, CUDA0)
- ``devices[].total_mib``: memory, MiB
- ``links``: the relay path(s) measured before the sweep
- ``links[].bare_relay``: the bare relay on loopback
- ``links[].bare_relay.down_mbit_s``: host -> client throughput, Mbit/s; 0: not measured
- ``links[].bare_relay.rtt_ms``: median small-message round trip, ms
- ``links[].bare_relay.up_mbit_s``: client -> host throughput, Mbit/s; 0: not measured
- ``links[].delay_ms``: the one-way delay the relay adds, ms
- ``links[].link``: the link asked for
- ``links[].link.name``: as given to --link (1gbe, rate=1gbit,rtt=0.3ms)
- ``links[].link.rate_bit_s``: bits per second; 0: unlimited
- ``links[].link.rtt_s``: round trip, seconds
- ``links[].measured``: what the relay measured with that shaping
- ``links[].measured.down_mbit_s``: host -> client throughput, Mbit/s; 0: not measured
- ``links[].measured.rtt_ms``: median small-message round trip, ms
- ``links[].measured.up_mbit_s``: client -> host throughput, Mbit/s; 0: not measured
- ``model``: the GGUF file
- ``points``: one per setup, in sweep order
- ``points[].args``: the llama-bench arguments of this point (without -m/-rpc)
- ``points[].error``: why it failed or was not run
- ``points[].error_kind``: timeout, oom, abort, rpc, args, load, signal, error
- ``points[].index``: 1, 2, ... in sweep order
- ``points[].label``: the setup, as the summary names it
- ``points[].link``: the emulated link ("none": the bare relay; "": no relay)
- ``points[].measurements``: one per llama-bench test
- ``points[].measurements[].devices``: as llama-bench reports them (after its own resolution)
- ``points[].measurements[].kind``: prompt | decode | mixed
- ``points[].measurements[].max``: tokens/s
- ``points[].measurements[].median``: tokens/s
- ``points[].measurements[].min``: tokens/s
- ``points[].measurements[].samples_ts``: tokens/s of each repetition
- ``points[].measurements[].split_mode``: as llama-bench reports it
- ``points[].measurements[].test``: pp512, tg128, pp512+tg128, with @d<depth>
- ``points[].path``: the path its RPC traffic went through: ``rtt_ms``, ``mbit_s`` (0: unknown,
  a real network)
- ``points[].seconds``: wall time
- ``points[].settings``: sweep key -> value
- ``points[].status``: ok | failed | duplicate | skipped
- ``points[].traffic``: phase (prompt, decode) -> RPC traffic
- ``rpc_latency``: per --rpc host
- ``rpc_latency[].count``: round trips timed
- ``rpc_latency[].devices``: how many devices it has
- ``rpc_latency[].endpoint``: HOST:PORT, as given to --rpc
- ``rpc_latency[].error``: what was odd about its answer
- ``rpc_latency[].max_ms``: round trip, ms
- ``rpc_latency[].median_ms``: round trip, ms
- ``rpc_latency[].min_ms``: round trip, ms
- ``rpc_latency[].ok``: the host answered as a ggml RPC server
- ``rpc_latency[].version``: its RPC protocol version
- ``schema``: the format's version: 1
- ``settings``: n_prompt, n_gen, reps, sweep, base_args, output_format, relay, model_note
"""

from __future__ import annotations

import os
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from patchkit.bench.link import Calibrated, fmt_bits
from patchkit.bench.result import Measurement, PointResult
from patchkit.bench.run import DEMO_SWEEP, BenchOptions, BenchReport, RpcLatency, run_bench, run_demo
from patchkit.bench.sweep import DIMENSIONS, parse_sweep
from patchkit.cli._common import out, out_record, out_table
from patchkit.cli._types import FiniteFloatRange
from patchkit.core.errors import ConfigError
from patchkit.core.log import log

__all__ = ["COMMANDS", "bench_cmd", "results_table"]


def _show_latency(lat: tuple[RpcLatency, ...]) -> None:
    for x in lat:
        if x.ok:
            log.info(
                f"  RPC {x.endpoint}: protocol {x.version}, {x.devices} device(s), round trip "
                f"median {x.median_ms:.3f} ms (min {x.min_ms:.3f}, max {x.max_ms:.3f})"
            )
        else:
            log.warning(f"RPC {x.endpoint}: latency not measured: {x.error}")


def _show_links(links: dict[str, Calibrated]) -> None:
    for name, c in links.items():
        m = c.measured
        what = "relay, no shaping" if name == "none" else f"--link {name} ({c.link.describe()})"
        log.info(
            f"  {what}: measured round trip {m.rtt_s * 1e3:.3f} ms, "
            f"{fmt_bits(m.up_bytes_s * 8)} up, {fmt_bits(m.down_bytes_s * 8)} down"
        )


def _show_point(p: PointResult) -> None:
    from patchkit.bench.report import fmt_rate

    if p.status == "ok":
        parts = []
        for m in p.measurements:
            text = f"{m.test} {fmt_rate(m.median)} tok/s ({fmt_rate(m.min)}–{fmt_rate(m.max)})"
            t = p.phase_traffic(m.kind)
            if t is not None and t.counted:
                text += f", {t.bytes_per_token / 1e6:.3g} MB/token, {t.rt_per_token:.3g} RT/token"
            parts.append(text)
        log.console.print(f"  [green]✓[/green] {p.label}: ", end="")
        log.console.print("; ".join(parts) + f"  [{p.seconds:.0f}s]", markup=False)
    elif p.status == "failed":
        log.console.print(f"  [red]✕[/red] {p.label}: ", end="")
        log.console.print(f"failed ({p.error_kind}): {p.error}", markup=False)
    else:
        log.console.print(f"  - {p.label}: {p.error}", markup=False)


def _rate_cell(m: Measurement | None) -> str:
    from patchkit.bench.report import fmt_rate

    if m is None:
        return "—"
    return f"{fmt_rate(m.median)} ({fmt_rate(m.min)}–{fmt_rate(m.max)}) {m.test}"


def results_table(report: BenchReport) -> Table:
    """The summary's table: one row per setup, in sweep order."""
    best_d, best_p = report.best("decode"), report.best("prompt")
    counted = any(t.counted for p in report.points for _, t in p.traffic)
    table = Table(title="bench results (tok/s: median (min–max) test)", title_justify="left")
    for col in (
        "#",
        "setup",
        "decode tok/s",
        "prompt tok/s",
        *(["decode wire/token"] if counted else []),
        "",
    ):
        table.add_column(col)
    for p in report.points:
        if p.status == "ok":
            note = ", ".join(w for w, b in (("best decode", best_d), ("best prompt", best_p)) if p is b)
        elif p.status == "failed":
            note = f"[red]failed ({escape(p.error_kind)}): {escape(p.error)}[/red]"
        else:
            note = escape(f"{p.status}: {p.error}")
        wire = []
        if counted:
            t = p.phase_traffic("decode")
            wire.append(
                f"{t.bytes_per_token / 1e6:.3g} MB, {t.rt_per_token:.3g} RT" if t and t.counted else "—"
            )
        table.add_row(str(p.index), escape(p.label), _rate_cell(p.decode), _rate_cell(p.prompt), *wire, note)
    return table


def _rpc_list(values: tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for v in values:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return tuple(out)


@click.command("bench")
@click.argument("outdir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "-m", "--model", type=click.Path(dir_okay=False, path_type=Path), help="The GGUF model to benchmark."
)
@click.option(
    "--rpc",
    "rpc",
    multiple=True,
    metavar="HOST:PORT[,HOST:PORT...]",
    help="RPC servers to use (only these are contacted).",
)
@click.option(
    "--sweep",
    "sweeps",
    multiple=True,
    metavar="KEY=V1,V2",
    help="A sweep dimension; keys: " + ", ".join(DIMENSIONS) + ".",
)
@click.option(
    "-p",
    "n_prompt",
    type=click.IntRange(min=0),
    default=None,
    help="Prompt tokens per test (default 512; demo 64).",
)
@click.option(
    "-n",
    "n_gen",
    type=click.IntRange(min=0),
    default=None,
    help="Generated tokens per test (default 128; demo 16).",
)
@click.option(
    "-r",
    "--repetitions",
    "reps",
    type=click.IntRange(min=1),
    default=None,
    help="Repetitions of each test (default 5; demo 3).",
)
@click.option(
    "--build",
    "build_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("out/cpu-rpc"),
    show_default=True,
    help="patchkit output dir whose bin/llama-bench runs.",
)
@click.option(
    "--timeout",
    type=FiniteFloatRange(min=1),
    default=900.0,
    show_default=True,
    help="Seconds one setup may take.",
)
@click.option(
    "--link",
    "links",
    multiple=True,
    metavar="LINK",
    help="Emulate a link to the RPC hosts: none, 1gbe, 2.5gbe, 10gbe, 40g-rdma or "
    "rate=1gbit,rtt=0.3ms; repeat to compare (a sweep dimension).",
)
@click.option(
    "--direct",
    is_flag=True,
    help="Connect llama-bench straight to the RPC hosts: no relay, no traffic counts.",
)
@click.option(
    "--demo",
    is_flag=True,
    help="Run on this machine: SmolLM2-135M if `patchkit model get smollm2` cached it "
    "(else a tiny generated model) and two RPC servers on 127.0.0.1 (CPU "
    "devices), stopped at the end.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print bench.json on stdout (the summary goes to stderr)."
)
def bench_cmd(
    outdir: Path,
    model: Path | None,
    rpc: tuple[str, ...],
    sweeps: tuple[str, ...],
    n_prompt: int | None,
    n_gen: int | None,
    reps: int | None,
    build_dir: Path,
    timeout: float,
    links: tuple[str, ...],
    direct: bool,
    demo: bool,
    as_json: bool,
) -> None:
    """Run llama-bench for every point of a sweep; write bench.md, bench.json, bench.png.

    \b
    patchkit bench results -m model.gguf --rpc 192.168.1.20:50052 \\
        --sweep sm=layer,tensor --sweep dev-order=auto,remote-first -p 512 -n 128
    patchkit bench /tmp/bench-demo --demo --link none --link rate=200mbit,rtt=1ms
    """
    from patchkit.bench.report import write_reports

    rpcs = _rpc_list(rpc)
    if demo:
        if model is not None or rpcs:
            raise ConfigError(
                "--demo generates its model and starts its own loopback RPC servers: drop -m/--rpc",
                hint="or drop --demo to bench your rig",
            )
    elif model is None:
        raise ConfigError(
            "give the model to benchmark with -m PATH.gguf",
            hint="or try `patchkit bench OUTDIR --demo` first",
        )
    sweeps = (*(sweeps or (DEMO_SWEEP if demo else ())), *(f"link={x.replace(',', '+')}" for x in links))
    dims = parse_sweep(sweeps)
    with log.step("bench"):
        log.info(f"  {outdir}: results; llama-bench from {build_dir}")
        if demo:
            report: BenchReport = run_demo(
                outdir,
                build_dir,
                sweep=sweeps,
                n_prompt=n_prompt or 64,
                n_gen=n_gen or 16,
                reps=reps or 3,
                timeout=timeout,
                relay=not direct,
                on_point=_show_point,
                on_latency=_show_latency,
                on_links=_show_links,
                env=dict(os.environ),  # the servers' environment: the CLI's, passed in
            )
        else:
            assert model is not None
            opts = BenchOptions(
                out_dir=outdir,
                build_dir=build_dir,
                model=model,
                rpc=rpcs,
                dims=dims,
                n_prompt=512 if n_prompt is None else n_prompt,
                n_gen=128 if n_gen is None else n_gen,
                reps=reps or 5,
                timeout=timeout,
                relay=not direct,
            )
            report = run_bench(opts, on_point=_show_point, on_latency=_show_latency, on_links=_show_links)
        write_reports(report, outdir)
    from patchkit.bench.analysis import network
    from patchkit.bench.report import fmt_rate

    if not as_json:
        out_table(results_table(report))
    net = network(report)
    for c in net.checks:
        out(
            f"  projection vs emulated {c.link.name}: {c.point.label}: measured "
            f"{fmt_rate(c.measured)} tok/s, projected {fmt_rate(c.projected)} ({c.error:+.1%})"
            + (
                f"; hosts {c.host_s * 1e3:.3g} ms/token here, {c.twin_host_s * 1e3:.3g} "
                f"unshaped: with this run's, {fmt_rate(c.projected_same_hosts)} "
                f"({c.error_same_hosts:+.1%})"
                if c.timed
                else ""
            ),
            err=as_json,
        )
    best = report.best()
    if report.settings.get("model_note"):
        out(f"demo model: {report.settings['model_note']}", err=as_json)
    failed = sum(p.status == "failed" for p in report.points)
    out(
        f"{len(report.points)} setups, {failed} failed"
        + (f"; fastest decode: {best.label}" if best else "")
        + f"; wrote {outdir}/bench.md, bench.json, bench.png",
        err=as_json,
    )
    if as_json:
        out_record(report)  # bench.json's text (core.fs.atomic_write_json)


COMMANDS = [bench_cmd]
