"""`patchkit build`, the orchestration: cuda preflight -> source -> patch -> configure ->
build -> (CUDA proof) -> output (with the shipping check and PE edits) -> smoke.

Each stage is a function of its own module (builder.source, builder.configure,
builder.cmake, builder.cuda, builder.ship, builder.output, builder.verdict); this module
only sequences them under the cache lock, times them and hands each what the earlier ones
found. Its inputs are all in BuildOptions (the cache, the output folder, the environment
the tools run in: resolved by the caller, never read from the process here); its results
in BuildResult (the output, build-info, each stage's time). Progress goes to the log as
steps; smoke results go to ``on_check``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit import __version__
from patchkit.builder import cmake as cm
from patchkit.builder import compcache, repro, sysroot
from patchkit.builder.configure import available_tools, config_id, configure, defines_and_env
from patchkit.builder.output import check_out_dir, write_output
from patchkit.builder.record import assemble_build_info, rpc_enabled, tool_versions
from patchkit.builder.sandbox import Sandbox
from patchkit.builder.ship import post_output
from patchkit.builder.source import apply_patches, check_source
from patchkit.builder.variants import build_targets, check_variants, variants_record
from patchkit.core.lock import cache_lock
from patchkit.core.log import log
from patchkit.core.paths import CacheLayout, cache_layout
from patchkit.core.proc import tool_version
from patchkit.spec.buildinfo import BuildInfo, CheckResult, CudaRecord
from patchkit.spec.recipe import Recipe
from patchkit.spec.rpcproto import read_rpc_protocol

if TYPE_CHECKING:
    from patchkit.builder.cuda.plan import CudaPlan

__all__ = ["BuildOptions", "BuildResult", "run_build"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildOptions:
    recipe: Recipe
    project: Path
    cache: Path  # the patchkit cache's root, resolved (core.paths.cache_dir)
    out: Path  # the output folder (core.paths.default_out_dir without --out)
    compile_cache: compcache.CacheSettings  # resolved: flags, environment, recipe
    env: Mapping[str, str]  # what cmake and the compilers run with (a snapshot of the caller's)
    upstream: str | None = None
    jobs: int | None = None
    clean: bool = False
    smoke: bool = True
    resmoke: bool = False  # run the smoke checks even when their verdict would be reused
    cuda_root: Path | None = None
    on_check: Callable[[CheckResult], None] | None = None  # each smoke check, as it ends
    # smoke=True builds the smoke tools (they set defines); False here skips only the checks
    # (a rebuild: the same configuration as the release's build, without its tests)
    smoke_checks: bool = True
    configure_only: bool = False  # source, patches, CUDA preflight, CMake configure; no compile
    # the cache whose build roots (builder.sysroot) a `[build] root` recipe uses; None: ``cache``
    # (a rebuild in a fresh cache uses the user's prepared roots)
    roots: Path | None = None
    # run CMake's configure and build inside it (set by `rebuild` only: someone else's code)
    sandbox: Sandbox | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildResult:
    out_dir: Path  # as given in BuildOptions.out; with configure_only: the configured build dir
    info: BuildInfo | None  # None with configure_only (nothing was built)
    timings: Mapping[str, float]  # seconds per stage that ran, in order


class _Stages:
    """Each stage as a log step, its time kept."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    def step(self, name: str, key: str) -> contextlib.AbstractContextManager[None]:
        return log.step(name, key, on_time=self._took)

    def _took(self, key: str, seconds: float) -> None:
        self.timings[key] = seconds


def run_build(opts: BuildOptions) -> BuildResult:
    recipe = opts.recipe
    url = opts.upstream or recipe.upstream.url
    cache = cache_layout(opts.cache)
    # the output folder is checked first: never inside the cache, never someone else's
    check_out_dir(opts.out, cache.root)
    stages = _Stages()
    tools = cm.find_tools(opts.env)
    if opts.sandbox is not None:
        tools = dataclasses.replace(tools, wrap=tuple(opts.sandbox.argv()))
    cache_plan = compcache.plan(opts.compile_cache, ccache=tools.ccache, cache_root=cache.root, env=opts.env)
    cuda_plan = None
    if recipe.cuda is not None:
        from patchkit.builder.cuda import plan as cuda

        with stages.step("cuda preflight", "cuda"):  # refuse before cloning or configuring
            cuda_plan = cuda.prepare(
                recipe, cuda_root=opts.cuda_root, env=opts.env, ccache=cache_plan.launcher or False
            )
            log.info(f"  {cuda_plan.archs.describe()}")
            for note in cuda_plan.notes:
                log.info(f"  note: {note}")
    root = None
    if recipe.build.root is not None:  # refused before cloning when it is not prepared
        root = sysroot.require_root(opts.roots or cache.root, recipe.build.root)
    with cache_lock(cache.root, f"patchkit build {recipe.name}"):
        return _run_locked(opts, url, cache, tools, cuda_plan, cache_plan, stages, root)


def _run_locked(
    opts: BuildOptions,
    url: str,
    cache: CacheLayout,
    tools: cm.BuildTools,
    cuda_plan: CudaPlan | None,
    cache_plan: compcache.CachePlan,
    stages: _Stages,
    root: sysroot.RootRecord | None = None,
) -> BuildResult:
    recipe = opts.recipe
    work = cache.work(recipe.name, url)
    work.root.mkdir(parents=True, exist_ok=True)
    work.log.write_text(f"patchkit {__version__} build {recipe.name}\n", encoding="utf-8")

    with stages.step("source", "source"):
        src = check_source(recipe, url, cache.root, work, clean=opts.clean)
    with stages.step("patch", "patch"):
        state, results = apply_patches(recipe, src, work)
    smoke = opts.smoke and recipe.smoke_enabled
    defines, env = defines_and_env(recipe, cache_plan, cuda_plan, smoke, opts.env)
    env.update(
        repro.build_env(
            env,
            work_root=work.root,
            build_dir=work.build,
            commit_date=state.commit_date,
            launcher=cache_plan.launcher,
            nvcc=cuda_plan.toolkit.version if cuda_plan else None,
        )
    )
    if root is not None:  # the compilers run inside a prepared root (builder.sysroot)
        wrappers = work.root / "root-bin"
        roots = opts.roots or cache.root
        sysroot.write_wrappers(root, roots, wrappers, binds=(work.root,), env=env)
        defines.update(sysroot.compiler_defines(root, roots, wrappers))
        log.info(f"building in the root {root.label} ({root.suite}: glibc {root.glibc}, GCC {root.gcc})")
    config = config_id(recipe, defines, tools, work)
    # the remote probed, sccache's server running; no credential in the log or an error
    with compcache.session(cache_plan, work.root, env, log_path=work.log) as cache_session:
        with stages.step("configure", "configure"):
            configured = configure(
                tools,
                recipe,
                work,
                state,
                config=config,
                defines=defines,
                env=cache_session.env,
                launcher=cache_plan.launcher,
            )
            state = configured.state
            check_variants(recipe, configured.model)
            targets = build_targets(recipe)  # + the CPU variants' modules (builder.variants)
            artifacts = cm.target_artifacts(configured.model, targets, work.build)
            smoke_tools = available_tools(configured.model, recipe.smoke_tools) if smoke else []
        if opts.configure_only:
            log.info(
                f"configured {work.build} (--configure-only: nothing compiled; "
                f"{len(artifacts)} target artifact(s) planned)"
            )
            return BuildResult(out_dir=work.build, info=None, timings=dict(stages.timings))
        with stages.step(f"build {', '.join(recipe.build.targets)}", "build"):
            log.info(f"log: {work.log}")
            cache_session.before_build(work.build)
            cm.build(
                tools,
                build_dir=work.build,
                targets=[*targets, *smoke_tools],
                jobs=opts.jobs,
                log_path=work.log,
                env=cache_session.env,
            )
        compile_cache = cache_session.finish(work.build)
    cuda_info = _prove_cuda(cuda_plan, artifacts, work.build, stages) if cuda_plan is not None else None
    # CUDA binaries load NVIDIA's runtime (cuBLAS) from the toolkit: smoke runs need its path
    runtime_env = {k: env[k] for k in ("LD_LIBRARY_PATH",) if k in env} if cuda_plan is not None else {}
    info = assemble_build_info(
        recipe=recipe,
        project=opts.project,
        url=url,
        state=state,
        config_id=config,
        patches=results,
        defines=defines,
        tools=tool_versions(
            compilers=configured.model.compilers,
            ninja=tools.ninja_version,
            ccache=tool_version(tools.ccache),
            compile_cache=compile_cache,
            nvcc=cuda_info.nvcc if cuda_info else None,
        ),
        cuda=cuda_info,
        runtime_env=runtime_env,
        timings=stages.timings,
        work=work,
        compile_cache=compile_cache,
        # the protocol its RPC clients and server speak: `rpc-probe --build`, bench, release
        rpc_protocol=read_rpc_protocol(work.src) if rpc_enabled(defines) else None,
        cpu_variants=variants_record(recipe, artifacts),
    )
    with stages.step("output", "output"):
        info = write_output(
            opts.out.resolve(),
            artifacts,
            work.src / "LICENSE",
            info,
            post=post_output(recipe),
            build_dir=work.build,
            source_dir=work.src,
        )
        log.info(f"wrote {opts.out}/ ({len(artifacts)} files + build-info.json)")
    if smoke and opts.smoke_checks:
        info = _smoke(opts, info, work.build / "bin", work.smoke, runtime_env, stages)
    elif smoke:
        log.info("smoke: its tools were built (the same configuration), its checks not run")
    else:
        log.info("smoke: not run (--no-smoke or [smoke] enabled = false)")
    return BuildResult(out_dir=opts.out, info=info, timings=dict(stages.timings))


def _prove_cuda(
    cuda_plan: CudaPlan, artifacts: list[cm.Artifact], build_dir: Path, stages: _Stages
) -> CudaRecord:
    from patchkit.builder.cuda import plan as cuda

    with stages.step("prove CUDA archs (cuobjdump)", "cuda_proof"):
        cubins = cuda.prove_archs(
            [a.path for a in artifacts], cuda_plan.archs, cuda_plan.toolkit.cuobjdump, base=build_dir
        )
        for f, found in cubins.items():
            if found:
                log.info(f"  {f}: {' '.join(found)}")
        return cuda.build_info(cuda_plan.archs, cuda_plan.toolkit, cubins, cuda_plan.notes)


def _smoke(
    opts: BuildOptions,
    info: BuildInfo,
    tool_dir: Path,
    record: Path,
    runtime_env: Mapping[str, str],
    stages: _Stages,
) -> BuildInfo:
    """The smoke stage (builder.verdict: run, or the kept verdict reused); exit 7 if it failed."""
    from patchkit.builder.verdict import run_or_reuse
    from patchkit.smoke.runner import raise_if_failed

    with stages.step("smoke", "smoke"):
        report = run_or_reuse(
            opts.out,
            info,
            record_path=record,
            tool_dirs=(tool_dir,),
            tools=opts.recipe.smoke_tools,
            skip=opts.recipe.smoke_skip,
            runtime_env=runtime_env,
            on_check=opts.on_check,
            rerun=opts.resmoke,
            env=opts.env,
        )
    log.info(f"smoke {report.status.value}")
    raise_if_failed(report)
    return dataclasses.replace(info, smoke=report)
