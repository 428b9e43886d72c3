"""`patchkit build`, the orchestration: cuda preflight -> source -> patch -> configure ->
build -> (CUDA proof) -> output (with PE edits) -> smoke.

Each stage is a function of its own module (git.cache, builder.patch, builder.cmake,
builder.cuda, binary.pe_stack, builder.output, smoke); this module only sequences them under the
cache lock and decides, from the recipe's work folder state (builder.state), what can be
reused. Progress goes to the log as steps; smoke results go to ``on_check``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patchkit import __version__
from patchkit.builder import cmake as cm
from patchkit.builder import compcache, repro
from patchkit.builder.output import check_out_dir, write_output
from patchkit.builder.patch import AppliedPatch, apply_series
from patchkit.builder.state import (
    BuildState,
    digest,
    read_state,
    refuse_user_work,
    worktree_matches,
    write_state,
)
from patchkit.core.errors import BuildError
from patchkit.core.fs import sha256_file
from patchkit.core.lock import cache_lock
from patchkit.core.log import log
from patchkit.core.paths import CacheLayout, WorkDirs, cache_layout
from patchkit.core.proc import tool_version
from patchkit.git.cache import (
    build_number,
    ensure_clone,
    ensure_commit,
    prepare_worktree,
    remove_worktree,
)
from patchkit.git.runner import git_out
from patchkit.spec.buildinfo import (
    ApplyResult,
    BuildInfo,
    CheckResult,
    CMakeRecord,
    CudaRecord,
    PeEditRecord,
    Platform,
    RecipeRef,
    SmokeReport,
    StackSizes,
    UpstreamRef,
)
from patchkit.spec.recipe import Recipe
from patchkit.spec.rpcproto import read_rpc_protocol

if TYPE_CHECKING:
    from patchkit.builder.cuda.plan import CudaPlan

__all__ = ["BuildOptions", "BuildResult", "offline_defines", "run_build", "series_hash"]

# What llama.cpp needs to build offline and portably; a recipe may override any.
OFFLINE_DEFINES = {
    "LLAMA_BUILD_UI": "OFF",
    "LLAMA_USE_PREBUILT_UI": "OFF",
    "LLAMA_BUILD_TESTS": "OFF",
    "GGML_NATIVE": "OFF",
    # the binaries are copied out of the build tree, never installed: link them with the
    # install-tree RUNPATH, exactly $ORIGIN. CMake's build-tree RUNPATH ends in an empty
    # entry (room for the install edit), which the loader reads as the current directory,
    # and lists link folders outside the tree (the cuBLAS wheel's) as absolute host paths.
    "CMAKE_BUILD_WITH_INSTALL_RPATH": "ON",
    "CMAKE_INSTALL_RPATH": "$ORIGIN",
    "CMAKE_INSTALL_RPATH_USE_LINK_PATH": "OFF",
    # plain libfoo.so (SONAME libfoo.so): no version symlinks, so bin/ copies flat anywhere
    "CMAKE_PLATFORM_NO_VERSIONED_SONAME": "ON",
}

# The x86-64 instruction set, said rather than left to ggml's default: with GGML_NATIVE=OFF
# ggml turns these on (its INS_ENB) only when it believes the build is for this machine's
# kind, and it believes the opposite when cross-compiling or when SOURCE_DATE_EPOCH is set
# (ggml/CMakeLists.txt), which every patchkit build sets for reproducible bytes: the CPU
# backend then falls back to SSE2 and decodes 6-10x slower. These are exactly the options
# ggml's INS_ENB sets (x86-64-v3: Haswell, Zen 1 and newer); a recipe may turn any off.
X86_64_ISA_DEFINES = {
    "GGML_SSE42": "ON",
    "GGML_AVX": "ON",
    "GGML_AVX2": "ON",
    "GGML_BMI2": "ON",
    "GGML_FMA": "ON",
    "GGML_F16C": "ON",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildOptions:
    recipe: Recipe
    project: Path
    upstream: str | None = None
    out: Path | None = None
    jobs: int | None = None
    clean: bool = False
    smoke: bool = True
    cuda_root: Path | None = None
    compile_cache: compcache.CacheSettings | None = None  # None: from the env and the recipe
    on_check: Callable[[CheckResult], None] | None = None  # each smoke check, as it ends
    # smoke=True builds the smoke tools (they set defines); False here skips only the checks
    # (a rebuild: the same configuration as the release's build, without its tests)
    smoke_checks: bool = True
    configure_only: bool = False  # source, patches, CUDA preflight, CMake configure; no compile


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildResult:
    out_dir: Path  # with configure_only: the configured build dir
    info: BuildInfo | None  # None with configure_only (nothing was built)


def series_hash(patches: list[tuple[str, str]]) -> str:
    text = "".join(f"{name} {sha}\n" for name, sha in patches)
    return hashlib.sha256(text.encode()).hexdigest()


def offline_defines(recipe: Recipe, smoke: bool = False) -> dict[str, str]:
    defines = dict(OFFLINE_DEFINES)
    if recipe.arch in ("x86_64", "amd64"):
        defines.update(X86_64_ISA_DEFINES)
    extra = recipe.smoke_tools if smoke else ()
    if any(t.startswith("test-") for t in (*recipe.build.targets, *extra)):
        defines["LLAMA_BUILD_TESTS"] = "ON"
    defines.update(recipe.build.defines_dict)
    return defines


def run_build(opts: BuildOptions) -> BuildResult:
    recipe = opts.recipe
    url = opts.upstream or recipe.upstream.url
    cache = cache_layout()
    # the output folder is checked first: never inside the cache, never someone else's
    check_out_dir(opts.out or Path("out") / recipe.name, cache.root)
    log.timings = {}
    tools = cm.find_tools()
    settings = opts.compile_cache or compcache.resolve(
        recipe_remote=recipe.build.cache_remote,
        recipe_launcher=recipe.build.launcher,
        recipe_label=_rel(recipe.path, opts.project),
    )
    cc = compcache.plan(settings, ccache=tools.ccache, cache_root=cache.root)
    cuda_plan = None
    if recipe.cuda is not None:
        from patchkit.builder.cuda import plan as cuda

        with log.step("cuda preflight", "cuda"):  # refuse before cloning or configuring
            cuda_plan = cuda.prepare(
                recipe, cuda_root=opts.cuda_root, env=os.environ, ccache=cc.launcher or False
            )
            log.info(f"  {cuda_plan.archs.describe()}")
            for note in cuda_plan.notes:
                log.info(f"  note: {note}")
    with cache_lock(cache.root, f"patchkit build {recipe.name}"):
        return _run_locked(opts, url, cache, tools, cuda_plan, cc)


def _run_locked(
    opts: BuildOptions,
    url: str,
    cache: CacheLayout,
    tools: cm.BuildTools,
    cuda_plan: CudaPlan | None,
    cc: compcache.CachePlan,
) -> BuildResult:
    recipe = opts.recipe
    work = cache.work(recipe.name, url)
    work.root.mkdir(parents=True, exist_ok=True)
    work.log.write_text(f"patchkit {__version__} build {recipe.name}\n", encoding="utf-8")

    state, results = _source_and_patches(opts, url, cache, work)
    smoke = opts.smoke and recipe.smoke_enabled
    defines, env = _defines_and_env(recipe, cc, cuda_plan, smoke)
    env.update(
        repro.build_env(
            env,
            work_root=work.root,
            build_dir=work.build,
            commit_date=state.commit_date,
            launcher=cc.launcher,
            nvcc=cuda_plan.toolkit.version if cuda_plan else None,
        )
    )
    toolchain = recipe.build.toolchain
    config_id = digest(
        {
            "defines": defines,
            "generator": recipe.build.generator,
            "build_type": recipe.build.build_type,
            "toolchain": sha256_file(toolchain) if toolchain else None,
            "cmake": str(tools.cmake.version),
            "src": str(work.src),
            "repro": repro.SETTINGS_ID,
        }
    )
    # the remote probed, sccache's server running; no credential in the log or an error
    with compcache.session(cc, work.root, env, log_path=work.log) as ccs:
        with log.step("configure", "configure"):
            state = _configure(tools, recipe, work, state, config_id, defines, ccs.env)
            index = cm.load_index(work.build)
            if cc.launcher is None:  # include dirs with ../ in them: see builder.repro
                maps = repro.include_maps(work.root, work.build)
                if maps and not repro.configured_with(work.build, maps):
                    cm.configure(
                        tools,
                        source=work.src,
                        build_dir=work.build,
                        defines=defines,
                        generator=recipe.build.generator,
                        build_type=recipe.build.build_type,
                        toolchain=recipe.build.toolchain,
                        fresh=True,
                        log_path=work.log,
                        env=repro.with_maps(ccs.env, maps),
                    )
                    index = cm.load_index(work.build)
            artifacts = cm.target_artifacts(index, recipe.build.targets, work.build)
            smoke_tools = _available_tools(index, recipe.smoke_tools) if smoke else []
        if opts.configure_only:
            log.info(
                f"configured {work.build} (--configure-only: nothing compiled; "
                f"{len(artifacts)} target artifact(s) planned)"
            )
            return BuildResult(out_dir=work.build, info=None)
        with log.step(f"build {', '.join(recipe.build.targets)}", "build"):
            log.info(f"log: {work.log}")
            ccs.before_build(work.build)
            cm.build(
                tools,
                build_dir=work.build,
                targets=[*recipe.build.targets, *smoke_tools],
                jobs=opts.jobs,
                log_path=work.log,
                env=ccs.env,
            )
        compile_cache = ccs.finish(work.build)
    cuda_info = _prove_cuda(cuda_plan, artifacts, work.build) if cuda_plan is not None else None
    # CUDA binaries load NVIDIA's runtime (cuBLAS) from the toolkit: smoke runs need its path
    runtime_env = {k: env[k] for k in ("LD_LIBRARY_PATH",) if k in env} if cuda_plan is not None else {}

    info = BuildInfo(
        patchkit_version=__version__,
        recipe=RecipeRef(name=recipe.name, file=_rel(recipe.path, opts.project), sha256=recipe.sha256),
        identity=digest({"recipe": recipe.sha256, "source": state.source_id, "config": config_id}),
        upstream=UpstreamRef(
            url=url,
            commit=recipe.upstream.commit,
            commit_date=state.commit_date,
            subject=state.subject,
            ref=recipe.upstream.ref,
            build_number=build_number(work.src, recipe.upstream.commit),
        ),
        patches=tuple(r.record() for r in results),
        series_hash=series_hash([(r.patch.name, r.patch.sha256) for r in results]),
        experimental=any(r.patch.experimental for r in results),
        platform=Platform(os=recipe.os, arch=recipe.arch),
        cmake=CMakeRecord(
            generator=recipe.build.generator,
            build_type=recipe.build.build_type,
            defines=defines,
            toolchain=_rel(toolchain, opts.project) if toolchain else None,
        ),
        targets=recipe.build.targets,
        tools={
            **cm.compiler_versions(index),
            "ninja": tools.ninja_version,
            "ccache": tool_version(tools.ccache),
            **(
                {"sccache": compile_cache.version}
                if compile_cache and compile_cache.launcher == "sccache"
                else {}
            ),
            "nvcc": cuda_info.nvcc if cuda_info else None,
        },
        cuda=cuda_info,
        runtime_env=runtime_env,
        timings=log.timings,
        log=str(work.log),
        build_dir=str(work.build),
        compile_cache=compile_cache,
        # the protocol its RPC clients and server speak: `rpc-probe --build`, bench, release
        rpc_protocol=read_rpc_protocol(work.src)
        if defines.get("GGML_RPC", "").upper() in ("ON", "TRUE", "1", "YES")
        else None,
    )
    out_dir = opts.out or Path("out") / recipe.name
    with log.step("output", "output"):
        post = _pe_stack_edits(recipe) if recipe.windows and recipe.windows.rpc_clients else None
        post = _checked_runpaths(post)
        info = write_output(
            out_dir.resolve(),
            artifacts,
            work.src / "LICENSE",
            info,
            post=post,
            build_dir=work.build,
            source_dir=work.src,
        )
        log.info(f"wrote {out_dir}/ ({len(artifacts)} files + build-info.json)")
    if smoke and opts.smoke_checks:
        _smoke(out_dir, recipe, work, runtime_env, opts.on_check)
    elif smoke:
        log.info("smoke: its tools were built (the same configuration), its checks not run")
    else:
        log.info("smoke: not run (--no-smoke or [smoke] enabled = false)")
    return BuildResult(out_dir=out_dir, info=info)


def _source_and_patches(
    opts: BuildOptions, url: str, cache: CacheLayout, work: WorkDirs
) -> tuple[BuildState, list[AppliedPatch]]:
    """The source and patch stages; returns the state (written) and each patch's result."""
    recipe = opts.recipe
    patches = recipe.patches
    with log.step("source", "source"):
        repo = ensure_clone(cache.root, url)
        ensure_commit(repo, url, recipe.upstream.commit, recipe.upstream.ref)
        if opts.clean:
            log.info("--clean: removing the worktree and build dir")
            remove_worktree(repo, work.src)
            shutil.rmtree(work.build, ignore_errors=True)
            work.state.unlink(missing_ok=True)
        state = read_state(work.state)
        for p in patches:
            p.read_verified()  # an edited patch file is caught even when nothing else changed
        source_id = digest(
            {
                "commit": recipe.upstream.commit,
                "url": url,
                "patches": [(p.name, p.sha256) for p in patches],
                "sparse": list(recipe.build.sparse_exclude),
            }
        )
        matches = worktree_matches(work.src, state.tree, recipe.upstream.commit)
        reuse = state.source_id == source_id and matches
        # a worktree that differs from what patchkit left is the user's work: never reset it
        if not matches and state.tree and (work.src / ".git").exists():
            refuse_user_work(work.src, recipe.upstream.commit)
    with log.step("patch", "patch"):
        if reuse:
            log.info(
                f"worktree {work.src} is up to date at {recipe.upstream.commit[:12]} "
                f"with {len(patches)} patch(es)"
            )
            return state, [
                AppliedPatch(patch=p, result=ApplyResult(r)) for p, r in zip(patches, state.results)
            ]
        work.state.unlink(missing_ok=True)
        wt = prepare_worktree(repo, work.src, recipe.upstream.commit, recipe.build.sparse_exclude)
        results = apply_series(work.src, recipe.upstream.commit, patches, work.root)
        for r in results:
            mark = "✓ applied" if r.result is ApplyResult.APPLIED else "= already present upstream"
            log.info(f"  {mark}: {r.patch.filename}")
        state = BuildState(
            source_id=source_id,
            tree=git_out(work.src, "write-tree"),
            results=tuple(r.result.value for r in results),
            commit_date=wt.commit_date,
            subject=wt.subject,
        )
        write_state(work.state, state)
        return state, results


def _defines_and_env(
    recipe: Recipe, cc: compcache.CachePlan, cuda_plan: CudaPlan | None, smoke: bool
) -> tuple[dict[str, str], dict[str, str]]:
    defines = offline_defines(recipe, smoke)
    env = dict(os.environ)
    # the launcher by name (no host path in the defines that go into a release), its base
    # dir (keys relative to the cache root: hits across worktree and cache paths)
    for k, v in {**cc.defines, **repro.launcher_defines(cc.launcher)}.items():
        defines.setdefault(k, v)
    env.update(cc.env)
    if cuda_plan is not None:
        from patchkit.builder.cuda import plan as cuda

        defines.update(cuda_plan.defines)  # CUDA's own settings win over the recipe's
        env.update(cuda.build_env(cuda_plan.toolkit, env))
    return defines, env


def _configure(
    tools: cm.BuildTools,
    recipe: Recipe,
    work: WorkDirs,
    state: BuildState,
    config_id: str,
    defines: dict[str, str],
    env: dict[str, str],
) -> BuildState:
    reply = work.build / ".cmake" / "api" / "v1" / "reply"
    if state.config_id == config_id and (work.build / "CMakeCache.txt").is_file() and reply.is_dir():
        log.info("configure inputs unchanged: reusing the build dir")
        return state
    fresh = (work.build / "CMakeCache.txt").is_file()
    state = dataclasses.replace(state, config_id=None)
    write_state(work.state, state)
    cm.configure(
        tools,
        source=work.src,
        build_dir=work.build,
        defines=defines,
        generator=recipe.build.generator,
        build_type=recipe.build.build_type,
        toolchain=recipe.build.toolchain,
        fresh=fresh,
        log_path=work.log,
        env=env,
    )
    state = dataclasses.replace(state, config_id=config_id)
    write_state(work.state, state)
    return state


def _prove_cuda(cuda_plan: CudaPlan, artifacts: list[cm.Artifact], build_dir: Path) -> CudaRecord:
    from patchkit.builder.cuda import plan as cuda

    with log.step("prove CUDA archs (cuobjdump)", "cuda_proof"):
        cubins = cuda.prove_archs(
            [a.path for a in artifacts], cuda_plan.archs, cuda_plan.toolkit.cuobjdump, base=build_dir
        )
        for f, found in cubins.items():
            if found:
                log.info(f"  {f}: {' '.join(found)}")
        return cuda.build_info(cuda_plan.archs, cuda_plan.toolkit, cubins, cuda_plan.notes)


def _smoke(
    out_dir: Path,
    recipe: Recipe,
    work: WorkDirs,
    runtime_env: dict[str, str],
    on_check: Callable[[CheckResult], None] | None,
) -> SmokeReport:
    from patchkit.smoke.runner import raise_if_failed, run_smoke

    with log.step("smoke", "smoke"):
        report = run_smoke(
            out_dir,
            skip=recipe.smoke_skip,
            tool_dirs=(work.build / "bin",),
            on_result=on_check,
            extra_env=runtime_env,
        )
    log.info(f"smoke {report.status.value}")
    raise_if_failed(report)
    return report


def _checked_runpaths(
    then: Callable[[Path], tuple[PeEditRecord, ...]] | None,
) -> Callable[[Path], tuple[PeEditRecord, ...]]:
    """The post-output stage's first step, on the staged bin/ (BuildError, exit 6, before
    anything is swapped in): every ELF file searches only `$ORIGIN`-based folders, and
    every PE file imports only DLLs shipped beside it or in Windows' system folders (any
    other is looked for in the current directory before PATH)."""
    from patchkit.binary.elf import ElfFormatError, read_dynamic, rpath_problems
    from patchkit.binary.pe_imports import (
        NVIDIA_RUNTIME_PREFIXES,
        PeFormatError,
        read_imports,
        unshipped_imports,
    )

    def post(bin_dir: Path) -> tuple[PeEditRecord, ...]:
        files = sorted(bin_dir.iterdir())
        for f in files:
            try:
                dyn = read_dynamic(f)
                imports = read_imports(f) if dyn is None else None
            except (ElfFormatError, PeFormatError, OSError) as e:
                raise BuildError(f"bin/{f.name}: cannot read its dynamic section or imports: {e}") from None
            problems = rpath_problems(dyn) if dyn is not None else ()
            if problems:
                raise BuildError(
                    f"bin/{f.name}: {problems[0].describe()}; shipped binaries may only search $ORIGIN",
                    hint="a recipe define (CMAKE_INSTALL_RPATH, CMAKE_BUILD_RPATH, "
                    "linker flags) put it there: remove it and build again",
                )
            missing = unshipped_imports(imports, (g.name for g in files)) if imports else ()
            nvidia = [d for d in missing if d.lower().startswith(NVIDIA_RUNTIME_PREFIXES)]
            for d in nvidia:
                log.warning(
                    f"bin/{f.name} imports {d} (NVIDIA's runtime, not shipped): copy it "
                    "next to the exe, or Windows looks for it in the current directory "
                    "before PATH"
                )
            others = [d for d in missing if d not in nvidia]
            if others:
                raise BuildError(
                    f"bin/{f.name} imports {others[0]}, which is neither shipped in bin/ nor a "
                    "Windows system DLL: Windows would look for it in the current directory",
                    hint="link it statically (the mingw toolchain's -static) or build it as "
                    "part of the recipe's targets",
                )
        return then(bin_dir) if then is not None else ()

    return post


def _pe_stack_edits(recipe: Recipe) -> Callable[[Path], tuple[PeEditRecord, ...]]:
    """The post-output stage for Windows: a bigger stack for the RPC clients (pefile)."""
    from patchkit.binary.pe_stack import apply_stack_edit, plan_stack_edit
    from patchkit.core.units import format_size

    spec = recipe.windows
    assert spec is not None

    def post(bin_dir: Path) -> tuple[PeEditRecord, ...]:
        files = [bin_dir / f"{t}.exe" for t in spec.rpc_clients]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise BuildError(
                f"windows.rpc_clients: {', '.join(missing)} not in the build output",
                hint="is this a Windows build? (platform.os and build.toolchain)",
            )
        plans = [plan_stack_edit(f, spec.stack_reserve, spec.stack_commit) for f in files]
        edits = [apply_stack_edit(p, label=p.before.path.name) for p in plans]
        for e in edits:
            log.info(
                f"  {e.file.name}: stack reserve {format_size(e.reserve_before)} -> "
                f"{format_size(e.reserve_after)}"
            )
        return tuple(
            PeEditRecord(
                file=f"bin/{e.file.name}",
                before=StackSizes(stack_reserve=e.reserve_before, stack_commit=e.commit_before),
                after=StackSizes(stack_reserve=e.reserve_after, stack_commit=e.commit_after),
            )
            for e in edits
        )

    return post


def _available_tools(index: Any, wanted: tuple[str, ...]) -> list[str]:
    model = index.reply.codemodel_v2
    names = {t.name for t in model.configurations[0].targets} if model else set()
    missing = [t for t in wanted if t not in names]
    for t in missing:
        log.warning(f"smoke tool {t} is not a target of this upstream: checks needing it skip")
    return [t for t in wanted if t in names]


def _rel(path: Path, base: Path) -> str:
    try:
        return path.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return str(path)
