"""build-info.json's content for one build, assembled from what each stage found.

Nothing here runs a process or reads a file: the stages measure, this module only puts
their findings into the one typed record (spec.buildinfo.BuildInfo). The output stage
adds the artifacts (their sha256 and size) and the PE edits; the smoke stage its report.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from patchkit import __version__
from patchkit.builder.patch import AppliedPatch
from patchkit.builder.state import BuildState, digest
from patchkit.core.paths import WorkDirs, relative_label
from patchkit.core.redact import public_url
from patchkit.spec.buildinfo import (
    BuildInfo,
    CMakeRecord,
    CompileCacheRecord,
    CpuVariantsRecord,
    CudaRecord,
    Platform,
    RecipeRef,
    UpstreamRef,
)
from patchkit.spec.recipe import Recipe
from patchkit.spec.rpcproto import ProtoVersion

__all__ = ["assemble_build_info", "rpc_enabled", "series_hash", "tool_versions"]


def series_hash(patches: Sequence[tuple[str, str]]) -> str:
    """The series as applied: each patch's name and sha256, in order."""
    text = "".join(f"{name} {sha}\n" for name, sha in patches)
    return hashlib.sha256(text.encode()).hexdigest()


def rpc_enabled(defines: Mapping[str, str]) -> bool:
    """Whether the build has ggml's RPC backend (its protocol is then recorded)."""
    return defines.get("GGML_RPC", "").upper() in ("ON", "TRUE", "1", "YES")


def tool_versions(
    *,
    compilers: Mapping[str, str | None],
    ninja: str,
    ccache: str | None,
    compile_cache: CompileCacheRecord | None,
    nvcc: str | None,
) -> dict[str, str | None]:
    """build-info's ``tools``: the compilers and cmake (File API), ninja, ccache, sccache when
    it was the launcher, nvcc for a CUDA build."""
    return {
        **compilers,
        "ninja": ninja,
        "ccache": ccache,
        **(
            {"sccache": compile_cache.version}
            if compile_cache and compile_cache.launcher == "sccache"
            else {}
        ),
        "nvcc": nvcc,
    }


def assemble_build_info(
    *,
    recipe: Recipe,
    project: Path,
    url: str,
    state: BuildState,
    config_id: str,
    patches: Sequence[AppliedPatch],
    defines: Mapping[str, str],
    tools: Mapping[str, str | None],
    cuda: CudaRecord | None,
    runtime_env: Mapping[str, str],
    timings: Mapping[str, float],
    work: WorkDirs,
    compile_cache: CompileCacheRecord | None,
    rpc_protocol: ProtoVersion | None,
    cpu_variants: CpuVariantsRecord | None = None,
) -> BuildInfo:
    """What went into this build; the artifacts, PE edits and smoke report come later."""
    toolchain = recipe.build.toolchain
    return BuildInfo(
        patchkit_version=__version__,
        recipe=RecipeRef(name=recipe.name, file=relative_label(recipe.path, project), sha256=recipe.sha256),
        identity=digest({"recipe": recipe.sha256, "source": state.source_id, "config": config_id}),
        upstream=UpstreamRef(
            url=public_url(url),
            commit=recipe.upstream.commit,
            commit_date=state.commit_date,
            subject=state.subject,
            ref=recipe.upstream.ref,
            build_number=state.build_number if state.build_number > 0 else None,
        ),
        patches=tuple(r.record() for r in patches),
        series_hash=series_hash([(r.patch.name, r.patch.sha256) for r in patches]),
        experimental=any(r.patch.experimental for r in patches),
        platform=Platform(os=recipe.os, arch=recipe.arch),
        cmake=CMakeRecord(
            generator=recipe.build.generator,
            build_type=recipe.build.build_type,
            defines=dict(defines),
            toolchain=relative_label(toolchain, project) if toolchain else None,
        ),
        targets=recipe.build.targets,
        tools=dict(tools),
        cuda=cuda,
        runtime_env=dict(runtime_env),
        timings=dict(timings),
        log=str(work.log),
        build_dir=str(work.build),
        compile_cache=compile_cache,
        rpc_protocol=rpc_protocol,
        cpu_variants=cpu_variants,
    )
