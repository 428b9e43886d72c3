"""`patchkit build`: source -> patches -> configure -> build -> post -> output.

State kept per recipe in the cache (``work/<recipe>-<upstream>/state.json``)
decides what can be reused: the same commit and patch hashes reuse the
worktree; the same configure inputs skip CMake configure. The state file is
written only after a stage succeeded, so an interrupted run redoes that stage.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from patchkit import __version__
from patchkit.build import cmake as cm
from patchkit.core.errors import SourceError
from patchkit.core.lock import cache_lock
from patchkit.core.log import log
from patchkit.build.output import write_output
from patchkit.build.patch import PatchResult, apply_series
from patchkit.core.paths import cache_dir
from patchkit.core.proc import tool_version
from patchkit.model.recipe import Recipe
from patchkit.model.series import Series
from patchkit.git.runner import git_out
from patchkit.git.cache import (
    ensure_clone,
    ensure_commit,
    prepare_worktree,
    remove_worktree,
)
from patchkit.core.fs import atomic_write_json, sha256_file

__all__ = ["BuildOptions", "BuildResult", "offline_defines", "run_build", "series_hash"]

# What llama.cpp needs to build offline and portably; a recipe may override any.
OFFLINE_DEFINES = {
    "LLAMA_BUILD_UI": "OFF",
    "LLAMA_USE_PREBUILT_UI": "OFF",
    "LLAMA_BUILD_TESTS": "OFF",
    "GGML_NATIVE": "OFF",
    "CMAKE_BUILD_RPATH_USE_ORIGIN": "ON",
    # plain libfoo.so (SONAME libfoo.so): no version symlinks, so bin/ copies flat anywhere
    "CMAKE_PLATFORM_NO_VERSIONED_SONAME": "ON",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildOptions:
    recipe: Recipe
    series: Series
    project: Path
    upstream: str | None = None
    out: Path | None = None
    jobs: int | None = None
    clean: bool = False
    smoke: bool = True
    cuda_root: Path | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildResult:
    out_dir: Path
    info: dict[str, Any]


def series_hash(patches: list[tuple[str, str]]) -> str:
    text = "".join(f"{name} {sha}\n" for name, sha in patches)
    return hashlib.sha256(text.encode()).hexdigest()


def offline_defines(recipe: Recipe, smoke: bool = False) -> dict[str, str]:
    defines = dict(OFFLINE_DEFINES)
    extra = recipe.smoke_tools if smoke else ()
    if any(t.startswith("test-") for t in (*recipe.build.targets, *extra)):
        defines["LLAMA_BUILD_TESTS"] = "ON"
    defines.update(recipe.build.defines_dict)
    return defines


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def _read_state(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _worktree_matches(path: Path, tree: str | None, commit: str) -> bool:
    """True if the worktree is exactly as patchkit left it: HEAD at the pin, the recorded
    tree in the index, no edits, no untracked or ignored files."""
    if not tree or not (path / ".git").exists():
        return False
    try:
        git_out(path, "update-index", "-q", "--refresh")
        head = git_out(path, "rev-parse", "HEAD")
        unstaged = git_out(path, "diff", "--name-only")
        extra = git_out(path, "ls-files", "--others")
        current = git_out(path, "write-tree")
    except SourceError:
        return False
    return head == commit and not unstaged and not extra and current == tree


def _refuse_user_work(src: Path, commit: str) -> None:
    """Raise unless the worktree holds nothing but what patchkit put there."""
    try:
        head = git_out(src, "rev-parse", "HEAD")
        changed = git_out(src, "status", "--porcelain", "--ignored")
    except SourceError:
        raise SourceError(f"the worktree {src} is broken (its clone moved or was deleted?)",
                          hint="rerun with --clean to make a new one") from None
    if head != commit:
        subject = git_out(src, "log", "-1", "--format=%h %s", "HEAD")
        raise SourceError(f"the worktree {src} has commits patchkit did not make ({subject})",
                          hint="save them (git -C <worktree> format-patch), then rerun with --clean")
    if changed:
        raise SourceError(f"the worktree {src} has changes patchkit did not make",
                          detail=changed[:2000],
                          hint="save them if you need them, then rerun with --clean")


def run_build(opts: BuildOptions) -> BuildResult:
    recipe = opts.recipe
    url = opts.upstream or recipe.upstream.url
    cache = cache_dir()
    log.timings = {}
    tools = cm.find_tools()
    cuda_plan = None
    if recipe.cuda is not None:
        from patchkit.build.cuda import plan as cuda
        with log.step("cuda preflight", "cuda"):  # refuse before cloning or configuring
            cuda_plan = cuda.prepare(recipe, cuda_root=opts.cuda_root, env=os.environ,
                                     ccache="ccache" if tools.ccache is not None else False)
            log.info(f"  {cuda_plan.archs.describe()}")
            for note in cuda_plan.notes:
                log.info(f"  note: {note}")
    with cache_lock(cache, f"patchkit build {recipe.name}"):
        return _run_locked(opts, recipe, url, cache, tools, cuda_plan)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Work:
    """Where one recipe's worktree, build dir, state and log live in the cache."""

    root: Path

    @property
    def src(self) -> Path:
        return self.root / "src"

    @property
    def build(self) -> Path:
        return self.root / "build"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def log(self) -> Path:
        return self.root / "build.log"


def _run_locked(opts: BuildOptions, recipe: Recipe, url: str, cache: Path,
                tools: cm.BuildTools, cuda_plan: Any) -> BuildResult:
    key = hashlib.sha256(url.encode()).hexdigest()[:8]
    work = _Work(root=cache / "work" / f"{recipe.name}-{key}")
    work.root.mkdir(parents=True, exist_ok=True)
    work.log.write_text(f"patchkit {__version__} build {recipe.name}\n", encoding="utf-8")

    state, results = _source_and_patches(opts, recipe, url, cache, work)
    smoke = opts.smoke and recipe.smoke_enabled
    defines, env = _defines_and_env(recipe, tools, cuda_plan, cache, smoke)
    toolchain = recipe.build.toolchain
    config_id = _digest({"defines": defines, "generator": recipe.build.generator,
                         "build_type": recipe.build.build_type,
                         "toolchain": sha256_file(toolchain) if toolchain else None,
                         "cmake": str(tools.cmake.version), "src": str(work.src)})
    with log.step("configure", "configure"):
        _configure(tools, recipe, work, state, config_id, defines, env)
        index = cm.load_index(work.build)
        artifacts = cm.target_artifacts(index, recipe.build.targets, work.build)
        smoke_tools = _available_tools(index, recipe.smoke_tools) if smoke else []
    with log.step(f"build {', '.join(recipe.build.targets)}", "build"):
        log.info(f"log: {work.log}")
        cm.build(tools, build_dir=work.build, targets=[*recipe.build.targets, *smoke_tools],
                 jobs=opts.jobs, log_path=work.log, env=env)
    cuda_info = _prove_cuda(cuda_plan, artifacts, work.build) if cuda_plan is not None else None
    # CUDA binaries load NVIDIA's runtime (cuBLAS) from the toolkit: smoke runs need its path
    runtime_env = {k: env[k] for k in ("LD_LIBRARY_PATH",) if k in env} \
        if cuda_plan is not None else {}

    applied = [(r.patch.name, r.patch.sha256) for r in results]
    info: dict[str, Any] = {
        "schema": 1,
        "patchkit_version": __version__,
        "recipe": {"name": recipe.name, "file": _rel(recipe.path, opts.project),
                   "sha256": recipe.sha256},
        "identity": _digest({"recipe": recipe.sha256, "source": state["source_id"],
                             "config": config_id}),
        "upstream": {"url": url, "commit": recipe.upstream.commit,
                     "commit_date": state["commit_date"], "subject": state["subject"],
                     "ref": recipe.upstream.ref},
        "patches": [r.summary() for r in results],
        "series_hash": series_hash(applied),
        "experimental": any(r.patch.experimental for r in results),
        "platform": {"os": recipe.os, "arch": recipe.arch},
        "cmake": {"generator": recipe.build.generator, "build_type": recipe.build.build_type,
                  "defines": defines,
                  "toolchain": _rel(toolchain, opts.project) if toolchain else None},
        "targets": list(recipe.build.targets),
        "tools": {**cm.toolchain_versions(index), "ninja": tools.ninja_version,
                  "ccache": tool_version(tools.ccache),
                  "nvcc": cuda_info["nvcc"] if cuda_info else None},
        "cuda": cuda_info,
        "pe_edits": [],
        "smoke": None,
        "runtime_env": runtime_env,
        "timings": log.timings,
        "log": str(work.log),
        "build_dir": str(work.build),
    }
    out_dir = opts.out or Path("out") / recipe.name
    with log.step("output", "output"):
        post = _pe_stack_edits(recipe) if recipe.windows and recipe.windows.rpc_clients else None
        write_output(out_dir.resolve(), artifacts, work.src / "LICENSE", info, post=post)
        log.info(f"wrote {out_dir}/ ({len(artifacts)} files + build-info.json)")
    if smoke:
        _smoke(out_dir, recipe, work, runtime_env)
    else:
        log.info("smoke: not run (--no-smoke or [smoke] enabled = false)")
    return BuildResult(out_dir=out_dir, info=info)


def _source_and_patches(opts: BuildOptions, recipe: Recipe, url: str, cache: Path,
                        work: _Work) -> tuple[dict[str, Any], list[PatchResult]]:
    """The source and patch stages; returns the state (written) and each patch's result."""
    patches = recipe.patches
    with log.step("source", "source"):
        repo = ensure_clone(cache, url)
        ensure_commit(repo, url, recipe.upstream.commit, recipe.upstream.ref)
        if opts.clean:
            log.info("--clean: removing the worktree and build dir")
            remove_worktree(repo, work.src)
            shutil.rmtree(work.build, ignore_errors=True)
            work.state.unlink(missing_ok=True)
        state = _read_state(work.state)
        for p in patches:
            p.read_verified()  # an edited patch file is caught even when nothing else changed
        source_id = _digest({"commit": recipe.upstream.commit, "url": url,
                             "patches": [(p.name, p.sha256) for p in patches],
                             "sparse": list(recipe.build.sparse_exclude)})
        matches = _worktree_matches(work.src, state.get("tree"), recipe.upstream.commit)
        reuse = state.get("source_id") == source_id and matches
        # a worktree that differs from what patchkit left is the user's work: never reset it
        if not matches and state.get("tree") and (work.src / ".git").exists():
            _refuse_user_work(work.src, recipe.upstream.commit)
    with log.step("patch", "patch"):
        if reuse:
            log.info(f"worktree {work.src} is up to date at {recipe.upstream.commit[:12]} "
                     f"with {len(patches)} patch(es)")
            return state, [PatchResult(patch=p, result=r)
                           for p, r in zip(patches, state.get("results", []))]
        work.state.unlink(missing_ok=True)
        wt = prepare_worktree(repo, work.src, recipe.upstream.commit, recipe.build.sparse_exclude)
        results = apply_series(work.src, recipe.upstream.commit, patches, work.root)
        for r in results:
            mark = "✓ applied" if r.result == "applied" else "= already present upstream"
            log.info(f"  {mark}: {r.patch.filename}")
        state = {"source_id": source_id, "tree": git_out(work.src, "write-tree"),
                 "results": [r.result for r in results],
                 "commit_date": wt.commit_date, "subject": wt.subject}
        atomic_write_json(work.state, state)
        return state, results


def _defines_and_env(recipe: Recipe, tools: cm.BuildTools, cuda_plan: Any, cache: Path,
                     smoke: bool) -> tuple[dict[str, str], dict[str, str]]:
    defines = offline_defines(recipe, smoke)
    env = dict(os.environ)
    if tools.ccache is not None:
        # by name (it is on PATH): no host path in the defines that go into a release
        defines.setdefault("CMAKE_C_COMPILER_LAUNCHER", "ccache")
        defines.setdefault("CMAKE_CXX_COMPILER_LAUNCHER", "ccache")
        # one cache root for every worktree path, so ccache hits across builds
        env.setdefault("CCACHE_BASEDIR", str(cache))
        env.setdefault("CCACHE_NOHASHDIR", "true")
    if cuda_plan is not None:
        from patchkit.build.cuda import plan as cuda
        defines.update(cuda_plan.defines)  # CUDA's own settings win over the recipe's
        env.update(cuda.build_env(cuda_plan.toolkit, env))
    return defines, env


def _configure(tools: cm.BuildTools, recipe: Recipe, work: _Work, state: dict[str, Any],
               config_id: str, defines: dict[str, str], env: dict[str, str]) -> None:
    reply = work.build / ".cmake" / "api" / "v1" / "reply"
    if state.get("config_id") == config_id and (work.build / "CMakeCache.txt").is_file() \
            and reply.is_dir():
        log.info("configure inputs unchanged: reusing the build dir")
        return
    fresh = (work.build / "CMakeCache.txt").is_file()
    state.pop("config_id", None)
    atomic_write_json(work.state, state)
    cm.configure(tools, source=work.src, build_dir=work.build, defines=defines,
                 generator=recipe.build.generator, build_type=recipe.build.build_type,
                 toolchain=recipe.build.toolchain, fresh=fresh, log_path=work.log, env=env)
    state["config_id"] = config_id
    atomic_write_json(work.state, state)


def _prove_cuda(cuda_plan: Any, artifacts: list[cm.Artifact], build_dir: Path) -> dict[str, Any]:
    from patchkit.build.cuda import plan as cuda
    with log.step("prove CUDA archs (cuobjdump)", "cuda_proof"):
        cubins = cuda.prove_archs([a.path for a in artifacts], cuda_plan.archs,
                                  cuda_plan.toolkit.cuobjdump, base=build_dir)
        for f, found in cubins.items():
            if found:
                log.info(f"  {f}: {' '.join(found)}")
        return cuda.build_info(cuda_plan.archs, cuda_plan.toolkit, cubins, cuda_plan.notes)


def _smoke(out_dir: Path, recipe: Recipe, work: _Work, runtime_env: dict[str, str]) -> None:
    from patchkit.cli.smoke import print_result, report_smoke
    from patchkit.smoke.runner import run_smoke

    with log.step("smoke", "smoke"):
        report = run_smoke(out_dir, skip=recipe.smoke_skip, tool_dirs=(work.build / "bin",),
                           on_result=print_result, extra_env=runtime_env)
    log.info(f"smoke {report.status}")
    report_smoke(report)


def _pe_stack_edits(recipe: Recipe) -> Any:
    """The post-output stage for Windows: a bigger stack for the RPC clients (pefile)."""
    from patchkit.build.pe import apply_stack_edit, plan_stack_edit
    from patchkit.model.units import format_size

    spec = recipe.windows
    assert spec is not None

    def post(bin_dir: Path) -> dict[str, Any]:
        files = [bin_dir / f"{t}.exe" for t in spec.rpc_clients]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            from patchkit.core.errors import BuildError

            raise BuildError(f"windows.rpc_clients: {', '.join(missing)} not in the build output",
                             hint="is this a Windows build? (platform.os and build.toolchain)")
        plans = [plan_stack_edit(f, spec.stack_reserve, spec.stack_commit) for f in files]
        edits = [apply_stack_edit(p, label=p.before.path.name) for p in plans]
        records = []
        for e in edits:
            log.info(f"  {e.file.name}: stack reserve {format_size(e.reserve_before)} -> "
                     f"{format_size(e.reserve_after)}")
            records.append({"file": f"bin/{e.file.name}",
                            "before": {"stack_reserve": e.reserve_before,
                                       "stack_commit": e.commit_before},
                            "after": {"stack_reserve": e.reserve_after,
                                      "stack_commit": e.commit_after}})
        return {"pe_edits": records}

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
