"""The one adapter over scikit-build-core: CMake discovery, configure, build, File API.

- ``CMake.default_search`` finds cmake (the PyPI wheel or a system one >= 3.21).
- ``CMaker`` owns the build dir: the stateless File API query, stale-cache
  detection and the ``-C`` init-cache file holding the recipe's defines.
- Configure and build run with their output kept in a log on disk (the path is
  printed); the build drives a progress bar from ninja's ``[n/N]`` lines.
- Artifacts come from the File API codemodel (``load_reply_dir``), not globbing. What
  patchkit needs of it (each target's artifacts and dependencies, the compilers) is kept
  beside the reply, keyed by the reply's index file: CMake writes a new one on every
  configure, so a build dir that was not configured again is not parsed again.
- What a build step wrote is read back as a process patchkit does not trust could have
  left it (a rebuild's configure and build run sandboxed, the build dir writable): the
  log's tail, the record and every reply file through core.fs.read_regular (no link
  followed, no FIFO waited on, a cap on the size), the reply only inside the build dir and
  its ``jsonFile`` references only to files of the reply itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.specifiers import SpecifierSet
from scikit_build_core.cmake import CMake, CMaker
from scikit_build_core.errors import CMakeConfigError, CMakeNotFoundError
from scikit_build_core.program_search import best_program, get_ninja_programs

from patchkit.builder.problems import BuildDirStale, ProgramMissing
from patchkit.core.errors import BuildError, ToolMissing
from patchkit.core.fs import atomic_write_json, contained, read_regular
from patchkit.core.log import log
from patchkit.core.proc import run_streaming
from patchkit.core.record import Record, meta
from patchkit.core.text import did_you_mean, printable

if TYPE_CHECKING:
    from scikit_build_core.file_api.model.index import Index

__all__ = [
    "Artifact",
    "BuildTools",
    "CodeModel",
    "Target",
    "build",
    "configure",
    "find_tools",
    "read_codemodel",
    "target_artifacts",
]

_RUNTIME_SUFFIXES = (".so", ".dll", ".dylib")


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildTools:
    cmake: CMake
    ninja: Path
    ninja_version: str
    ccache: Path | None
    wrap: tuple[str, ...] = ()  # runs configure and build inside it (a rebuild's sandbox)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Artifact:
    target: str
    type: str  # EXECUTABLE | SHARED_LIBRARY | MODULE_LIBRARY
    path: Path  # absolute, in the build dir


def find_tools(env: Mapping[str, str]) -> BuildTools:
    """cmake, ninja and ccache, searched on ``env``'s PATH (ninja: the wheel's, else PATH)."""
    try:
        cmake = CMake.default_search(version=SpecifierSet(">=3.21"), env=env)
    except CMakeNotFoundError:
        raise ToolMissing(problem=ProgramMissing(program="cmake", found="no CMake >= 3.21 found")) from None
    ninja = best_program(get_ninja_programs(), version=SpecifierSet(">=1.10"))
    if ninja is None:
        raise ToolMissing(problem=ProgramMissing(program="ninja", found="no ninja >= 1.10 found"))
    ccache = shutil.which("ccache", path=env.get("PATH"))
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
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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


_TAIL_BYTES = 256 << 10  # the end of a log holds its last lines


def _tail(log_path: Path, n: int = 25) -> str:
    """The log's last ``n`` lines; empty when it is not a regular file (a link, a FIFO)."""
    try:
        data = read_regular(log_path, limit=_TAIL_BYTES, part="tail")
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", errors="replace").splitlines()[-n:])


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
        raise BuildError(problem=BuildDirStale(build_dir=build_dir, found="unusable", cause=str(e))) from None
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
        rc = _run_logged([*tools.wrap, *cmd], log_path, env)
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
    rc = _run_logged([*tools.wrap, *cmd], log_path, env, progress_label="ninja")
    if rc != 0:
        raise BuildError(f"the build failed (exit {rc}); full log: {log_path}", detail=_tail(log_path))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Target(Record):
    """One target of the codemodel, as patchkit uses it."""

    name: str
    type: str  # EXECUTABLE | SHARED_LIBRARY | MODULE_LIBRARY | STATIC_LIBRARY | ...
    artifacts: tuple[str, ...]  # as the File API gives them (relative to the build dir, or absolute)
    dependencies: tuple[str, ...] = dataclasses.field(metadata=meta(key="deps"))  # target ids


@dataclasses.dataclass(frozen=True, kw_only=True)
class CodeModel(Record):
    """What a configured build dir holds, from its File API reply."""

    targets: Mapping[str, Target] | None  # by id; None: the reply has no codemodel
    compilers: Mapping[str, str | None]  # ``c_compiler: GNU 12.2.0``, ..., ``cmake``: its version

    @property
    def names(self) -> frozenset[str]:
        return frozenset(t.name for t in (self.targets or {}).values())

    @classmethod
    def from_json(cls, data: Any) -> CodeModel:
        """The form :meth:`to_json` (core.record) writes; ValueError for anything else."""
        if not isinstance(data, dict) or not isinstance(data.get("compilers"), dict):
            raise ValueError("not a codemodel record")
        raw = data.get("targets")
        targets: dict[str, Target] | None = None
        if raw is not None:
            if not isinstance(raw, dict):
                raise ValueError("targets is not an object")
            targets = {}
            for i, t in raw.items():
                if not isinstance(t, dict):
                    raise ValueError("a target is not an object")
                targets[str(i)] = Target(
                    name=_text(t.get("name")),
                    type=_text(t.get("type")),
                    artifacts=tuple(_text(a) for a in _list(t.get("artifacts"))),
                    dependencies=tuple(_text(d) for d in _list(t.get("deps"))),
                )
        compilers = {str(k): (None if v is None else _text(v)) for k, v in data["compilers"].items()}
        return cls(targets=targets, compilers=compilers)


def _text(v: object) -> str:
    if not isinstance(v, str):
        raise ValueError(f"{v!r} is not a string")
    return v


def _list(v: object) -> list[object]:
    if not isinstance(v, list):
        raise ValueError(f"{v!r} is not a list")
    return v


_CODEMODEL = ".patchkit-codemodel.json"  # in the build dir, beside CMake's own files
_CODEMODEL_FORMAT = 1
_CODEMODEL_MAX = 64 << 20  # llama.cpp's: ~40 KiB
_REPLY_FILE_MAX = 64 << 20  # llama.cpp's largest reply file: ~200 KiB


def _reply_key(reply: Path) -> str | None:
    """The newest index file's name, size and mtime: a new configure writes a new one."""
    try:
        newest = max(reply.glob("index-*.json"), key=lambda p: p.name)
        st = newest.stat()
    except (ValueError, OSError):
        return None
    return f"{_CODEMODEL_FORMAT}:{newest.name}:{st.st_size}:{st.st_mtime_ns}"


def read_codemodel(build_dir: Path) -> CodeModel:
    """The build dir's codemodel: from the record beside the reply when that reply has not
    changed since, else parsed from the reply (scikit-build-core) and recorded."""
    reply = build_dir / ".cmake" / "api" / "v1" / "reply"
    if not reply.is_dir():
        raise BuildError(problem=BuildDirStale(build_dir=build_dir, found="no-reply", reply=reply))
    contained(reply, build_dir, error=BuildError, what="the File API reply")
    key = _reply_key(reply)
    record = build_dir / _CODEMODEL
    if key is not None:
        try:
            data = json.loads(read_regular(record, limit=_CODEMODEL_MAX))
            if isinstance(data, dict) and data.get("reply") == key:
                return CodeModel.from_json(data.get("model"))
        except (OSError, ValueError):
            pass  # missing or not ours: parse the reply
    model = _from_index(_load_index(reply))
    if key is not None and key == _reply_key(reply):
        try:
            if os.path.lexists(record) and not stat.S_ISREG(os.lstat(record).st_mode):
                record.unlink()  # a FIFO, a link... in its place: the record is only a cache
            atomic_write_json(record, {"reply": key, "model": model.to_json()})
        except OSError:
            pass  # only a cache: the next build parses the reply again
    return model


def _load_index(reply: Path) -> Index:
    """scikit-build-core's reading of the reply, each file read with core.fs.read_regular
    and only from the reply folder itself (a ``jsonFile`` naming anything else is refused);
    BuildError (one line) for a reply it cannot read."""
    from scikit_build_core.file_api.reply import Converter  # slow to import: only here

    class _Reply(Converter):
        def _read_json(self, path: Path) -> Any:
            if path.parent != self.base_dir or path.name in ("", ".", ".."):
                raise ValueError(f"{path} is not a file of the reply")
            return json.loads(read_regular(path, limit=_REPLY_FILE_MAX))

    try:
        return _Reply(reply).load()
    except Exception as e:  # scikit-build-core gathers every failure in an ExceptionGroup
        stale = BuildDirStale(
            build_dir=reply.parents[3], found="unreadable-reply", reply=reply, cause=_first_cause(e)
        )
        raise BuildError(problem=stale) from None


def _first_cause(e: BaseException) -> str:
    while isinstance(getattr(e, "exceptions", None), (list, tuple)) and e.exceptions:  # type: ignore[attr-defined]
        e = e.exceptions[0]  # type: ignore[attr-defined]
    return printable(str(e))[:300] or type(e).__name__


def _from_index(index: Index) -> CodeModel:
    codemodel = index.reply.codemodel_v2
    targets: dict[str, Target] | None = None
    if codemodel is not None and codemodel.configurations:
        targets = {
            t.id: Target(
                name=t.name,
                type=t.type,
                artifacts=tuple(str(a.path) for a in t.artifacts),
                dependencies=tuple(d.id for d in t.dependencies),
            )
            for t in codemodel.configurations[0].targets
        }
    compilers: dict[str, str | None] = {}
    tc = index.reply.toolchains_v1
    for tool in tc.toolchains if tc else ():
        c = tool.compiler
        if c.id:
            compilers[f"{tool.language.lower()}_compiler"] = " ".join(x for x in (c.id, c.version) if x)
    compilers["cmake"] = index.cmake.version.string
    return CodeModel(targets=targets, compilers=compilers)


def target_artifacts(model: CodeModel, targets: Sequence[str], build_dir: Path) -> list[Artifact]:
    """The recipe targets' files plus the shared libraries they link, from the codemodel."""
    if not model.targets:
        raise BuildError(problem=BuildDirStale(build_dir=build_dir, found="no-codemodel"))
    by_id = model.targets
    by_name = {t.name: i for i, t in by_id.items()}
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
                p = Path(a) if Path(a).is_absolute() else build_dir / a
                if t.type != "EXECUTABLE" and not p.name.endswith(_RUNTIME_SUFFIXES) and ".so." not in p.name:
                    continue  # import libraries (.lib/.dll.a), debug files
                if p.suffix == ".pdb":
                    continue
                out.append(Artifact(target=t.name, type=t.type, path=p))
        for dep in t.dependencies:
            if dep in by_id:
                add(dep, False)

    for name in targets:
        add(by_name[name], True)
    return out
