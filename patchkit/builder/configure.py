"""The configure stage: what a recipe is configured with (defines, environment, the
configure id) and the CMake configure itself, skipped when its inputs are unchanged.

The defines are llama.cpp's offline, portable settings, the x86-64 instruction set said
outright, the compile cache's launcher and CUDA's own, then the recipe's. The configure
id is a digest of everything the configure reads; the build dir is reused while it holds
the id recorded in the work folder's state (builder.state).

The include dirs' prefix maps (builder.repro) come from the File API, so from a configure:
the first configure of a work folder runs without them, then once more with them. Each
work folder keeps the last maps (``include-maps.json``) and its next configure (``--clean``,
new defines) is given them from the start; only when the dirs it then reports differ is it
run again, with exactly those: the build dir is always configured with the maps of its own
include dirs, as a second configure would have made it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.builder import cmake as cm
from patchkit.builder import compcache, repro, variants
from patchkit.builder.state import BuildState, digest, write_state
from patchkit.core.fs import atomic_write_json, read_regular, sha256_file
from patchkit.core.log import log
from patchkit.core.paths import WorkDirs
from patchkit.spec.recipe import Recipe

if TYPE_CHECKING:
    from patchkit.builder.cuda.plan import CudaPlan

__all__ = [
    "OFFLINE_DEFINES",
    "X86_64_ISA_DEFINES",
    "Configured",
    "available_tools",
    "config_id",
    "configure",
    "defines_and_env",
    "offline_defines",
]

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


def offline_defines(recipe: Recipe, smoke: bool = False) -> dict[str, str]:
    defines = dict(OFFLINE_DEFINES)
    if recipe.arch in ("x86_64", "amd64") and not recipe.build.cpu_variants:
        defines.update(X86_64_ISA_DEFINES)  # with variants each one says its own (builder.variants)
    extra = recipe.smoke_tools if smoke else ()
    if any(t.startswith("test-") for t in (*recipe.build.targets, *extra)):
        defines["LLAMA_BUILD_TESTS"] = "ON"
    defines.update(recipe.build.defines_dict)
    defines.update(variants.variant_defines(recipe))
    return defines


def defines_and_env(
    recipe: Recipe,
    cache_plan: compcache.CachePlan,
    cuda_plan: CudaPlan | None,
    smoke: bool,
    env: Mapping[str, str],
) -> tuple[dict[str, str], dict[str, str]]:
    """The defines and the environment (``env`` plus the launcher's and CUDA's additions)."""
    defines = offline_defines(recipe, smoke)
    out = dict(env)
    # the launcher by name (no host path in the defines that go into a release), its base
    # dir (keys relative to the cache root: hits across worktree and cache paths)
    for k, v in {**cache_plan.defines, **repro.launcher_defines(cache_plan.launcher)}.items():
        defines.setdefault(k, v)
    out.update(cache_plan.env)
    if cuda_plan is not None:
        from patchkit.builder.cuda import plan as cuda

        defines.update(cuda_plan.defines)  # CUDA's own settings win over the recipe's
        out.update(cuda.build_env(cuda_plan.toolkit, out))
    return defines, out


def config_id(recipe: Recipe, defines: Mapping[str, str], tools: cm.BuildTools, work: WorkDirs) -> str:
    """A digest of everything the configure reads."""
    toolchain = recipe.build.toolchain
    return digest(
        {
            "defines": dict(defines),
            "generator": recipe.build.generator,
            "build_type": recipe.build.build_type,
            "toolchain": sha256_file(toolchain) if toolchain else None,
            "cmake": str(tools.cmake.version),
            "src": str(work.src),
            "repro": repro.SETTINGS_ID,
            # the variant filter's CMake code (builder.variants), only for builds that use it
            **({"cpu_variants": variants.INCLUDE_ID} if recipe.build.cpu_variants else {}),
        }
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Configured:
    state: BuildState  # with the configure id recorded
    model: cm.CodeModel  # what the configured build dir holds (File API)


def configure(
    tools: cm.BuildTools,
    recipe: Recipe,
    work: WorkDirs,
    state: BuildState,
    *,
    config: str,
    defines: Mapping[str, str],
    env: Mapping[str, str],
    launcher: str | None,
) -> Configured:
    """Configure the build dir unless it already holds ``config`` (every launcher but sccache:
    with the include dirs' prefix maps of the last configure, builder.repro); then once more
    with the maps of the include dirs it reports when they are not the ones it was given
    (the module's docstring)."""
    defines = variants.configure_defines(recipe, defines, work.root)
    mapped = repro.maps_paths(launcher)  # include dirs with ../ in them: see builder.repro
    given = _last_maps(work.root) if mapped else []
    first_env = repro.with_maps(env, given, launcher=launcher) if given else env
    ran, state = _configure(tools, recipe, work, state, config, defines, first_env)
    model = cm.read_codemodel(work.build)
    if mapped:
        maps = repro.include_maps(work.root, work.build)
        again = maps != given if ran else bool(maps) and not repro.configured_with(work.build, maps)
        if again:
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
                env=repro.with_maps(env, maps, launcher=launcher) if maps else env,
            )
            model = cm.read_codemodel(work.build)
        if maps != given:
            _remember_maps(work.root, maps)
    return Configured(state=state, model=model)


_MAPS_FILE = "include-maps.json"  # in the work folder: the last configure's include maps
_MAPS_MAX = 1 << 20


def _last_maps(work_root: Path) -> list[str]:
    """The include maps the work folder's last configure found; [] when none (or not what
    :func:`_remember_maps` writes)."""
    try:
        data = json.loads(read_regular(work_root / _MAPS_FILE, limit=_MAPS_MAX))
    except (OSError, ValueError):
        return []
    maps = data.get("maps") if isinstance(data, dict) else None
    if not isinstance(maps, list) or not all(
        isinstance(m, str) and m.startswith("-ffile-prefix-map=") for m in maps
    ):
        return []
    return list(maps)


def _remember_maps(work_root: Path, maps: list[str]) -> None:
    try:
        atomic_write_json(work_root / _MAPS_FILE, {"maps": maps})
    except OSError:
        pass  # only a head start: the next configure finds them again


def _configure(
    tools: cm.BuildTools,
    recipe: Recipe,
    work: WorkDirs,
    state: BuildState,
    config: str,
    defines: Mapping[str, str],
    env: Mapping[str, str],
) -> tuple[bool, BuildState]:
    """Whether it configured, and the state (with the configure id once it succeeded)."""
    reply = work.build / ".cmake" / "api" / "v1" / "reply"
    if state.config_id == config and (work.build / "CMakeCache.txt").is_file() and reply.is_dir():
        log.info("configure inputs unchanged: reusing the build dir")
        return False, state
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
    state = dataclasses.replace(state, config_id=config)
    write_state(work.state, state)
    return True, state


def available_tools(model: cm.CodeModel, wanted: tuple[str, ...]) -> list[str]:
    """The smoke tools this upstream has as targets (a warning for each it lacks)."""
    names = model.names
    for t in wanted:
        if t not in names:
            log.warning(f"smoke tool {t} is not a target of this upstream: checks needing it skip")
    return [t for t in wanted if t in names]
