"""CUDA builds: toolkit checks before configuring, CMake defines, and the proof after
building that every requested SM is in the binaries.

The recipe's archs are resolved when it loads (``recipe.cuda.archs``, patchkit.spec.cuda).
The pipeline calls ``prepare`` (the first three steps) or, in order::

    archs = recipe.cuda.archs
    tk = find_toolkit(recipe.cuda, cuda_root, env)  # patchkit.builder.cuda.toolkit
    notes = preflight(archs, tk)                          # raises CudaError / ToolMissing
    defines = cmake_defines(recipe, archs, tk)            # merged over the recipe's defines
    ... configure, build ...
    cubins = prove_archs(files, archs, tk.cuobjdump, base=build_dir)  # -> build-info.json
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.builder.cuda.toolkit import (
    TOOLKIT_LIMITS,
    CudaToolkit,
    HostCompiler,
    Runner,
    default_runner,
    find_toolkit,
    limits_for,
)
from patchkit.builder.problems import CudaArchsUnbuildable, ProgramMissing
from patchkit.core.environ import process_env
from patchkit.core.errors import CudaError, RecipeError, ToolMissing
from patchkit.spec.buildinfo import CudaRecord
from patchkit.spec.cuda import CudaArchs, family_of

if TYPE_CHECKING:
    from patchkit.spec.recipe import Recipe

__all__ = [
    "CudaPlan",
    "build_env",
    "build_info",
    "cmake_defines",
    "cuda_files",
    "parse_cuobjdump_list",
    "preflight",
    "prepare",
    "prove_archs",
    "toolkits_for",
]


def _supporting_versions(sms: Sequence[int]) -> list[tuple[int, int]]:
    return [row.version for row in TOOLKIT_LIMITS if all(s in row.sms for s in sms)]


def toolkits_for(sms: Sequence[int]) -> str:
    """'CUDA 11.1-12.9' style range of known releases that compile all of ``sms``."""
    vs = _supporting_versions(sms)
    if not vs:
        return "no single CUDA release"
    lo, hi = vs[0], vs[-1]
    tail = "+" if hi == TOOLKIT_LIMITS[-1].version else ""
    if lo == hi:
        return f"CUDA {lo[0]}.{lo[1]}{tail}"
    return f"CUDA {lo[0]}.{lo[1]}-{hi[0]}.{hi[1]}{tail}"


def _host_hint(sms: Sequence[int]) -> str:
    """What to install, with the host-compiler limit of the suggested toolkits."""
    vs = _supporting_versions(sms)
    picks = [v for v in ((11, 8), vs[-1] if vs else None) if v in vs]
    parts = []
    for v in dict.fromkeys(picks):
        lim = limits_for(v)
        assert lim is not None
        parts.append(f"CUDA {v[0]}.{v[1]} accepts gcc <= {lim.gcc_max}")
    return "; ".join(parts)


def preflight(
    archs: CudaArchs,
    toolkit: CudaToolkit,
    host_compiler: HostCompiler | None = None,
    *,
    need_cublas: bool = True,
    need_cuobjdump: bool = True,
) -> list[str]:
    """Refuse, before configuring, what this toolkit cannot build; return notes to show.

    ``host_compiler`` defaults to the one find_toolkit picked.
    Raises CudaError (exit 13) for archs / host compiler / cuBLAS problems, ToolMissing
    when the host compiler or cuobjdump is missing.
    """
    host = host_compiler or toolkit.host
    notes: list[str] = []
    lim = toolkit.limits
    tk = toolkit.describe()
    if lim is None:
        raise CudaError(
            f"{tk} is older than any toolkit patchkit knows (10.0+)", hint=f"use {toolkits_for(archs.sms)}"
        )
    if toolkit.version[:2] > TOOLKIT_LIMITS[-1].version:
        notes.append(
            f"CUDA {toolkit.version_str} is newer than patchkit's table "
            f"({TOOLKIT_LIMITS[-1].version[0]}.{TOOLKIT_LIMITS[-1].version[1]}); "
            "trusting nvcc's own arch list"
        )
    missing = [s for s in archs.sms if s not in toolkit.sms]
    if missing:
        fams = sorted({f for s in missing if (f := family_of(s))})
        droppable = tuple(fams) if fams else tuple(f"sm_{s}" for s in missing)
        why = ""
        if toolkit.version[0] >= 13 and any(s < 75 for s in missing):
            why = " (CUDA 13 dropped every sm below 75)"
        elif any(s > max(toolkit.sms, default=0) for s in missing):
            why = " (they are newer than this toolkit)"
        unbuildable = CudaArchsUnbuildable(
            toolkit=tk,
            missing=archs.describe(missing),
            why=why,
            wanted=archs.describe(),
            toolkits=toolkits_for(archs.sms),
            host_limits=_host_hint(archs.sms),
            droppable=droppable,
        )
        raise CudaError(problem=unbuildable)
    if host.path is None:
        raise ToolMissing(
            f"host compiler {host.command!r} ({host.source}) is not on PATH",
            hint="install it or set cuda.host_compiler to one that is",
        )
    if host.kind == "gcc" and host.version and host.version[0] > lim.gcc_max:
        raise CudaError(
            f"{tk} accepts gcc <= {lim.gcc_max} as host compiler, but {host.describe()} is "
            f"{host.version_str}",
            hint=f'install g++-{lim.gcc_max} and set cuda.host_compiler = "g++-{lim.gcc_max}" '
            "(passed as CMAKE_CUDA_HOST_COMPILER)",
        )
    if host.kind == "clang" and host.version and host.version[0] > lim.clang_max:
        notes.append(f"clang {host.version_str} may be newer than {tk} supports (clang <= {lim.clang_max})")
    if host.source == "auto":
        notes.append(
            f"host compiler: {host.describe()} (the default g++ is too new for CUDA {toolkit.version_str})"
        )
    if toolkit.windows and host.kind not in ("msvc", "unknown"):
        raise CudaError(
            f"CUDA on Windows needs MSVC (cl.exe) as host compiler, not {host.kind}",
            hint="run from a Visual Studio developer prompt",
        )
    if toolkit.cublas is None:
        wheel = {13: "nvidia-cublas", 12: "nvidia-cublas-cu12"}.get(toolkit.version[0])
        how = (
            f"`pip install {wheel}` (patchkit finds it in site-packages)"
            if wheel and not toolkit.windows
            else "install the toolkit's cuBLAS (libcublas-dev)"
        )
        if need_cublas:
            raise CudaError(f"{tk} has no cuBLAS, which ggml-cuda links", hint=how)
        notes.append(f"no cuBLAS: {how}")
    elif toolkit.cublas.source == "wheel":
        notes.append(
            f"cuBLAS from the pip wheel ({toolkit.cublas.library.parent}); the "
            "binaries need that libcublas at run time"
        )
    if toolkit.libcuda is None:
        notes.append(
            "no libcuda stub in the toolkit and no driver library: building with "
            "GGML_CUDA_NO_VMM=ON (no virtual-memory pools)"
        )
    if toolkit.cuobjdump is None:
        if need_cuobjdump:
            found = f"no cuobjdump for {tk}: patchkit needs it to prove the archs are in the binaries"
            raise ToolMissing(problem=ProgramMissing(program="cuobjdump", found=found))
        notes.append("no cuobjdump: `pip install nvidia-cuda-cuobjdump`")
    return notes


def _on(flag: bool) -> str:
    return "ON" if flag else "OFF"


def cmake_defines(
    recipe: Recipe, archs: CudaArchs, toolkit: CudaToolkit, *, ccache: str | bool | None = True
) -> dict[str, str]:
    """The CMake cache entries a CUDA build needs (they win over the recipe's defines).

    ``ccache``: True = use ccache when it is on PATH, False/None = never, a str = that
    launcher (a path, or a name on PATH: "ccache" / "sccache", from builder.compcache).
    """
    assert recipe.cuda is not None, "cmake_defines needs a recipe with a [cuda] section"
    d = {
        "GGML_CUDA": "ON",
        "GGML_NATIVE": "OFF",
        "CMAKE_CUDA_ARCHITECTURES": archs.cmake,
        "CMAKE_CUDA_COMPILER": toolkit.nvcc.as_posix(),
        "CUDAToolkit_ROOT": toolkit.root.as_posix(),
        "GGML_CUDA_FA_ALL_QUANTS": _on(recipe.cuda.fa_all_quants),
    }
    if toolkit.host.explicit and toolkit.host.path is not None:
        d["CMAKE_CUDA_HOST_COMPILER"] = toolkit.host.path.as_posix()
    if toolkit.libcuda is None:
        d["GGML_CUDA_NO_VMM"] = "ON"
    if toolkit.cublas is not None and toolkit.cublas.source == "wheel":
        d["CUDA_cublas_LIBRARY"] = toolkit.cublas.library.as_posix()
        d["CUDA_cublasLt_LIBRARY"] = toolkit.cublas.lt_library.as_posix()
        d["CMAKE_CUDA_STANDARD_INCLUDE_DIRECTORIES"] = toolkit.cublas.include_dir.as_posix()
    launcher = shutil.which("ccache") if ccache is True else (ccache or None)
    if launcher:
        d["CMAKE_CUDA_COMPILER_LAUNCHER"] = Path(launcher).as_posix()
    return d


_LIST_LINE = re.compile(r"^(ELF|PTX) file\s+\d+:\s+\S*?\.?sm_(\d+)([a-z]?)\.(?:cubin|ptx)\s*$")


def parse_cuobjdump_list(text: str) -> list[str]:
    """``cuobjdump --list-elf/--list-ptx`` -> ["sm_60", "sm_86", "compute_86"] (sorted, unique)."""
    found: set[str] = set()
    for line in text.splitlines():
        m = _LIST_LINE.match(line.strip())
        if m:
            kind = "sm" if m.group(1) == "ELF" else "compute"
            found.add(f"{kind}_{m.group(2)}{m.group(3)}")
    return sorted(found, key=_entry_key)


def _entry_key(entry: str) -> tuple[int, bool, str]:
    """sm_60 < sm_86 < compute_86 < sm_120a: by number, SASS before PTX."""
    return int(re.sub(r"\D", "", entry)), not entry.startswith("sm_"), entry


def _has(entries: Sequence[str], prefix: str, sm: int) -> bool:
    # llama.cpp turns 12X into 12Xa; an "a"/"f" variant proves the plain SM
    return any(re.fullmatch(rf"{prefix}_{sm}[a-z]?", e) for e in entries)


def prove_archs(
    files: Sequence[Path],
    archs: CudaArchs,
    cuobjdump: Path | None,
    *,
    base: Path | None = None,
    run: Runner = default_runner,
) -> dict[str, list[str]]:
    """List the cubins (and PTX) in each file; raise CudaError when a requested SM is missing.

    Every file holding device code must hold SASS for every requested SM, and the PTX of
    ``archs.ptx`` must be in at least one. Files without device code map to []. Keys are
    paths relative to ``base`` (else file names), in the order given.
    """
    if cuobjdump is None:
        raise ToolMissing(
            problem=ProgramMissing(program="cuobjdump", found="cuobjdump is needed to prove the CUDA archs")
        )
    result: dict[str, list[str]] = {}
    for f in files:
        key = f.relative_to(base).as_posix() if base is not None else f.name
        entries: list[str] = []
        for flag in ("--list-elf", "--list-ptx"):
            try:
                rc, out = run([str(cuobjdump), flag, str(f)])
            except OSError as e:
                raise ToolMissing(f"cannot run {cuobjdump}: {e}") from None
            if rc != 0:
                if "does not contain device code" in out:
                    break
                raise CudaError(f"cuobjdump {flag} {key} failed (exit {rc})", detail=out.strip()[-2000:])
            entries += parse_cuobjdump_list(out)
        result[key] = sorted(set(entries), key=_entry_key)
    with_code = {k: v for k, v in result.items() if v}
    if not with_code:
        raise CudaError(
            f"no CUDA device code in {', '.join(result) or 'any built file'}",
            hint="the build did not compile ggml-cuda; check GGML_CUDA=ON and the targets",
        )
    problems = []
    for key, entries in with_code.items():
        lost = [s for s in archs.sms if not _has(entries, "sm", s)]
        if lost:
            problems.append(f"{key} lacks {archs.describe(lost)} (has {', '.join(entries)})")
    if not any(_has(v, "compute", archs.ptx) for v in with_code.values()):
        problems.append(f"no file holds the PTX of sm_{archs.ptx} (compute_{archs.ptx})")
    if problems:
        raise CudaError(
            "built binaries lack requested CUDA archs: " + "; ".join(problems),
            hint=f"CMAKE_CUDA_ARCHITECTURES was {archs.cmake}; look for an override in the configure log",
        )
    return result


def build_info(
    archs: CudaArchs, toolkit: CudaToolkit, cubins: Mapping[str, list[str]], notes: Sequence[str] = ()
) -> CudaRecord:
    """The ``cuda`` section of build-info.json: what was asked, what built it, what is in it."""
    version = ".".join(map(str, toolkit.version))
    return CudaRecord(
        archs=archs.sms,
        ptx=archs.ptx,
        requested=archs.requested,
        cmake_architectures=archs.cmake,
        nvcc=version,
        proven={k: tuple(v) for k, v in cubins.items()},
        toolkit={
            "version": version,
            "root": toolkit.root.as_posix(),
            "nvcc": toolkit.nvcc.as_posix(),
            "host_compiler": {
                "kind": toolkit.host.kind,
                "version": toolkit.host.version_str,
                "path": toolkit.host.path.as_posix() if toolkit.host.path else None,
            },
            "cublas": toolkit.cublas.source if toolkit.cublas else None,
            "libcuda": toolkit.libcuda_kind,
            "no_vmm": toolkit.libcuda is None,
        },
        notes=tuple(notes),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class CudaPlan:
    archs: CudaArchs
    toolkit: CudaToolkit
    notes: tuple[str, ...]
    defines: dict[str, str]


def prepare(
    recipe: Recipe,
    *,
    cuda_root: Path | None = None,
    env: Mapping[str, str] | None = None,
    ccache: str | bool | None = True,
    run: Runner = default_runner,
    sites: Sequence[Path] | None = None,
) -> CudaPlan:
    """Everything before configuring: validate, find the toolkit, refuse early, the defines."""
    if recipe.cuda is None:
        raise RecipeError(f"{recipe.path.name}: has no [cuda] section")
    archs = recipe.cuda.archs
    tk = find_toolkit(recipe.cuda, cuda_root, process_env(env), run=run, sites=sites)
    notes = preflight(archs, tk)
    return CudaPlan(
        archs=archs, toolkit=tk, notes=tuple(notes), defines=cmake_defines(recipe, archs, tk, ccache=ccache)
    )


def cuda_files(
    build_dir: Path, targets: Sequence[str], *, patterns: Sequence[str] = ("*ggml-cuda*",)
) -> list[Path]:
    """The files whose cubins prove_archs checks: the CUDA backend library (shared builds)
    and the targets' executables (static builds), each real file once, symlinks skipped."""
    found: dict[Path, Path] = {}
    for pat in patterns:
        for f in sorted(build_dir.rglob(pat)):
            name = f.name.lower()
            if f.is_file() and not f.is_symlink() and (name.endswith((".so", ".dll")) or ".so." in name):
                found.setdefault(f.resolve(), f)
    for t in targets:
        for f in sorted(build_dir.rglob(t)) + sorted(build_dir.rglob(f"{t}.exe")):
            if f.is_file() and not f.is_symlink() and "CMakeFiles" not in f.parts:
                found.setdefault(f.resolve(), f)
    return list(found.values())


def build_env(toolkit: CudaToolkit, env: Mapping[str, str]) -> dict[str, str]:
    """Environment additions for configure/build: on Linux the toolkit's library folder
    goes on LD_LIBRARY_PATH, so links that pull libcublasLt's own dependencies (and a
    Debian-layout CUDA 11.8) resolve. Empty on Windows."""
    if toolkit.windows:
        return {}
    libs = [d for d in (toolkit.root / "lib64", toolkit.root / "lib") if d.is_dir()]
    if toolkit.cublas is not None and toolkit.cublas.source == "wheel":
        libs.append(toolkit.cublas.library.parent)
    if not libs:
        return {}
    old = env.get("LD_LIBRARY_PATH", "")
    return {"LD_LIBRARY_PATH": os.pathsep.join([str(d) for d in libs] + ([old] if old else []))}
