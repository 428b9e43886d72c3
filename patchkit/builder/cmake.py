"""The one adapter over scikit-build-core: CMake discovery, configure, build, File API.

- ``CMake.default_search`` finds cmake (the PyPI wheel or a system one >= 3.21).
- ``CMaker`` owns the build dir: the stateless File API query, stale-cache
  detection and the ``-C`` init-cache file holding the recipe's defines.
- Configure and build run with their output kept in a log on disk (the path is
  printed); the build drives a progress bar from ninja's ``[n/N]`` lines.
- Artifacts come from the File API codemodel (``load_reply_dir``), not globbing.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from packaging.specifiers import SpecifierSet
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from scikit_build_core.cmake import CMake, CMaker
from scikit_build_core.errors import CMakeConfigError, CMakeNotFoundError
from scikit_build_core.file_api.model.index import Index
from scikit_build_core.file_api.reply import load_reply_dir
from scikit_build_core.program_search import best_program, get_ninja_programs

from patchkit.core.errors import BuildError, ToolMissing
from patchkit.core.log import log
from patchkit.core.proc import run_streaming
from patchkit.core.text import did_you_mean

__all__ = [
    "Artifact",
    "BuildTools",
    "build",
    "compiler_versions",
    "configure",
    "find_tools",
    "load_index",
    "target_artifacts",
]

_RUNTIME_SUFFIXES = (".so", ".dll", ".dylib")


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildTools:
    cmake: CMake
    ninja: Path
    ninja_version: str
    ccache: Path | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Artifact:
    target: str
    type: str  # EXECUTABLE | SHARED_LIBRARY | MODULE_LIBRARY
    path: Path  # absolute, in the build dir


def find_tools() -> BuildTools:
    try:
        cmake = CMake.default_search(version=SpecifierSet(">=3.21"))
    except CMakeNotFoundError:
        raise ToolMissing(
            "no CMake >= 3.21 found", hint="pip install 'cmake>=3.28' (patchkit depends on it)"
        ) from None
    ninja = best_program(get_ninja_programs(), version=SpecifierSet(">=1.10"))
    if ninja is None:
        raise ToolMissing("no ninja >= 1.10 found", hint="pip install ninja")
    ccache = shutil.which("ccache")
    return BuildTools(
        cmake=cmake,
        ninja=ninja.path,
        ninja_version=str(ninja.version),
        ccache=Path(ccache) if ccache else None,
    )


def _run_logged(
    cmd: Sequence[str | os.PathLike[str]],
    log_path: Path,
    env: Mapping[str, str],
    progress_label: str | None = None,
) -> int:
    """Run ``cmd``, appending all output to ``log_path``; follow ninja's [n/N] if asked."""
    if not progress_label:
        return run_streaming(cmd, log_path=log_path, env=env)
    bar = Progress(
        TextColumn(progress_label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=log.console,
        transient=True,
    )
    task = bar.add_task(progress_label, total=None)
    last_decile = -1

    def on_line(line: str) -> None:
        nonlocal last_decile
        m = re.match(r"^\[(\d+)/(\d+)\]", line)
        if not m:
            return
        done, total = int(m.group(1)), int(m.group(2))
        bar.update(task, completed=done, total=total)
        decile = done * 10 // max(total, 1)
        if not log.console.is_terminal and decile != last_decile:
            last_decile = decile
            log.info(f"  {progress_label} {done}/{total}")

    bar.start()
    try:
        return run_streaming(cmd, log_path=log_path, env=env, on_line=on_line)
    finally:
        bar.stop()


def _tail(log_path: Path, n: int = 25) -> str:
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def configure(
    tools: BuildTools,
    *,
    source: Path,
    build_dir: Path,
    defines: Mapping[str, str],
    generator: str,
    build_type: str,
    toolchain: Path | None,
    fresh: bool,
    log_path: Path,
    env: Mapping[str, str],
) -> None:
    try:
        maker = CMaker(
            tools.cmake, source_dir=source, build_dir=build_dir, build_type=build_type, fresh=fresh
        )
    except CMakeConfigError as e:
        raise BuildError(f"cannot use the build dir {build_dir}: {e}", hint="rerun with --clean") from None
    maker.init_cache(dict(defines))
    cmd: list[str | os.PathLike[str]] = [
        tools.cmake.cmake_path,
        f"-S{source}",
        f"-B{build_dir}",
        "-G",
        generator,
        f"-C{maker.init_cache_file}",
        f"-DCMAKE_BUILD_TYPE={build_type}",
    ]
    if generator == "Ninja":
        cmd.append(f"-DCMAKE_MAKE_PROGRAM={tools.ninja}")
    if toolchain is not None:
        cmd.append(f"--toolchain={toolchain.as_posix()}")
    with log.console.status("cmake configure…"):
        rc = _run_logged(cmd, log_path, env)
    if rc != 0:
        raise BuildError(f"CMake configure failed (exit {rc}); full log: {log_path}", detail=_tail(log_path))


def build(
    tools: BuildTools,
    *,
    build_dir: Path,
    targets: Sequence[str],
    jobs: int | None,
    log_path: Path,
    env: Mapping[str, str],
) -> None:
    cmd: list[str | os.PathLike[str]] = [tools.cmake.cmake_path, "--build", build_dir]
    if jobs:
        cmd += ["-j", str(jobs)]
    cmd += ["--target", *targets]
    rc = _run_logged(cmd, log_path, env, progress_label="ninja")
    if rc != 0:
        raise BuildError(f"the build failed (exit {rc}); full log: {log_path}", detail=_tail(log_path))


def load_index(build_dir: Path) -> Index:
    reply = build_dir / ".cmake" / "api" / "v1" / "reply"
    if not reply.is_dir():
        raise BuildError(f"CMake wrote no File API reply in {reply}", hint="rerun with --clean")
    return load_reply_dir(reply)


def target_artifacts(index: Index, targets: Sequence[str], build_dir: Path) -> list[Artifact]:
    """The recipe targets' files plus the shared libraries they link, from the codemodel."""
    codemodel = index.reply.codemodel_v2
    if codemodel is None or not codemodel.configurations:
        raise BuildError("the CMake File API reply has no codemodel", hint="rerun with --clean")
    config = codemodel.configurations[0]
    by_name = {t.name: t for t in config.targets}
    by_id = {t.id: t for t in config.targets}
    missing = [t for t in targets if t not in by_name]
    if missing:
        names = sorted(by_name)
        raise BuildError(
            "this upstream defines no target " + ", ".join(f"{m!r}{did_you_mean(m, names)}" for m in missing),
            hint="check build.targets and build.defines (some targets need an option ON)",
        )
    out: list[Artifact] = []
    seen: set[str] = set()

    def add(target_id: str, top: bool) -> None:
        if target_id in seen:
            return
        seen.add(target_id)
        t = by_id[target_id]
        if top or t.type in ("SHARED_LIBRARY", "MODULE_LIBRARY"):
            for a in t.artifacts:
                p = a.path if a.path.is_absolute() else build_dir / a.path
                if t.type != "EXECUTABLE" and not p.name.endswith(_RUNTIME_SUFFIXES) and ".so." not in p.name:
                    continue  # import libraries (.lib/.dll.a), debug files
                if p.suffix == ".pdb":
                    continue
                out.append(Artifact(target=t.name, type=t.type, path=p))
        for dep in t.dependencies:
            if dep.id in by_id:
                add(dep.id, False)

    for name in targets:
        add(by_name[name].id, True)
    return out


def compiler_versions(index: Index) -> dict[str, str | None]:
    """The compilers CMake found (``cxx_compiler: GNU 12.2.0``) and CMake's own version."""
    out: dict[str, str | None] = {}
    tc = index.reply.toolchains_v1
    for t in tc.toolchains if tc else ():
        c = t.compiler
        if c.id:
            out[f"{t.language.lower()}_compiler"] = " ".join(x for x in (c.id, c.version) if x)
    out["cmake"] = index.cmake.version.string
    return out
