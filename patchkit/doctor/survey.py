"""What this machine has, and whether each recipe can build here (`patchkit doctor`).

``build_report`` builds the report without printing; every process goes through a
Runner so tests replay real outputs. The CLI renders it (cli.doctor).
"""

from __future__ import annotations

import dataclasses
import platform
import re
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from patchkit.builder import sysroot
from patchkit.builder.cuda.plan import preflight, toolkits_for
from patchkit.builder.cuda.toolkit import (
    CudaToolkit,
    Runner,
    default_runner,
    find_toolkit,
    limits_for,
    site_dirs,
)
from patchkit.core.errors import CudaError, Problem, RecipeError, ToolMissing
from patchkit.core.record import Record, meta
from patchkit.spec.recipe import Recipe, list_recipes, load_recipe
from patchkit.spec.series import Series

__all__ = [
    "Fact",
    "Fix",
    "Floor",
    "Report",
    "Tool",
    "Verdict",
    "build_report",
    "floors",
    "host_glibc",
    "host_os",
    "recipe_verdict",
    "survey",
]

MINGW_CXX = "x86_64-w64-mingw32-g++-posix"
_OS_NAMES = {"linux": "Linux", "windows": "Windows", "macos": "macOS"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Tool(Record):
    name: str = dataclasses.field(metadata=meta(written=False))  # the key it is listed under
    path: Path | None  # where it is; null: not found
    version: str | None = None  # what it says its version is
    note: str = ""  # what else to know (an unusable version, how it was found)

    @property
    def found(self) -> bool:
        return self.path is not None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fix(Record):
    """What would make a recipe buildable here, as data (the CLI words it)."""

    kind: str
    """what would fix it: build-tools (cmake, ninja and the compilers), install (apt packages),
    prepare-root, choose-root (a root patchkit knows), build-on (another os), fix-recipe,
    error (the raised error's own advice)"""
    packages: tuple[str, ...] = ()  # install: the apt packages
    root: str = ""  # prepare-root: the root to prepare
    choices: tuple[str, ...] = ()  # choose-root: the roots patchkit knows
    os: str = ""  # build-on: where to build it
    toolkits: str = ""  # build-on a CUDA recipe: the toolkits that build its archs
    archs: str = ""  # build-on a CUDA recipe: its archs
    hint: str = ""  # error: the advice the error was raised with


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fact(Record):
    """One thing to know about a buildable recipe, as data (the CLI words it)."""

    kind: str
    """what it is: toolkit (the toolkit and host compiler), cuda (a note of the CUDA
    preflight), no-ccache, no-wine, host-newer (the host's glibc is newer than the recipe's
    floor), in-root (it builds in a root)"""
    text: str = ""  # toolkit: the toolkit; cuda: the preflight's note
    host: str = ""  # toolkit: the host compiler
    floor: str = ""  # host-newer, in-root: the GLIBC floor
    glibc: str = ""  # host-newer: this machine's glibc
    root: str = ""  # in-root: the root's name
    suite: str = ""  # in-root: the root's Debian suite


@dataclasses.dataclass(frozen=True, kw_only=True)
class Verdict(Record):
    recipe: str  # the recipe's name
    ok: bool  # it can build here
    why: str = ""  # why not
    todo: str = ""  # what to do about it (the words of ``fix``)
    notes: tuple[str, ...] = ()  # what else to know (the words of ``facts``)
    fix: Fix | None = None  # what to do about it, as data; null: nothing to do
    facts: tuple[Fact, ...] = ()  # what else to know, as data
    # why not, as fields, when the failure was raised with them: the CLI words it
    problem: Problem | None = dataclasses.field(default=None, metadata=meta(written=False))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Floor(Record):
    """One C library floor this machine can (or could) build for: the host's own, or a
    build root's (builder.sysroot)."""

    where: str  # "host" or a root's name
    glibc: str | None  # None: not known (not glibc)
    glibcxx: str | None = None  # the newest GLIBCXX_ version it gives
    ready: bool = False  # builds for it now
    how: str = ""  # what it is, or what to do to make it ready (the words of ``state``)
    state: str = ""
    """host, prepared, needs-bwrap (prepared, but bwrap is missing), not-prepared (and can
    be), needs-packages (preparing it needs them)"""
    packages: tuple[str, ...] = ()  # needs-packages: the apt packages preparing it needs
    # prepared: the root's record (its label, suite, GCC and when it was prepared)
    root: sysroot.RootRecord | None = dataclasses.field(default=None, metadata=meta(written=False))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Report(Record):
    """What ``doctor --json`` prints."""

    json_derived: ClassVar[tuple[str | tuple[str, str], ...]] = (("cuda", "cuda_summary"),)

    schema: int = 1  # the JSON format's version: 1
    host_os: str  # linux, windows, macos
    machine: str  # platform.machine(): x86_64, aarch64, AMD64
    tools: dict[str, Tool]  # by name: cmake, ninja, cc, ccache, mingw, wine, ...
    toolkit: CudaToolkit | None = dataclasses.field(metadata=meta(written=False))
    toolkit_error: str = dataclasses.field(metadata=meta(written=False))
    # why no toolkit was found, as fields, when it was raised with them: the CLI words it
    toolkit_problem: Problem | None = dataclasses.field(default=None, metadata=meta(written=False))
    verdicts: tuple[Verdict, ...] = dataclasses.field(metadata=meta(key="recipes"))  # one per recipe
    project_error: str = dataclasses.field(
        default="", metadata=meta(encode=lambda s: s or None)
    )  # why the project could not be read; null: it could
    floors: tuple[Floor, ...] = ()  # the C library floors this machine builds for

    @property
    def host_gcc_max(self) -> int | None:
        """The newest gcc the toolkit takes as host compiler (None: no toolkit, or not known)."""
        lim = limits_for(self.toolkit.version) if self.toolkit is not None else None
        return lim.gcc_max if lim else None

    @property
    def cuda_summary(self) -> dict[str, object]:
        """the CUDA toolkit: ``error``, ``host_gcc_max`` (the newest gcc it takes as host
        compiler), and when found ``nvcc``, ``version``, ``root``, ``source``, ``sms``,
        ``cublas``, ``cublas_source``, ``libcuda``, ``libcuda_kind``, ``cuobjdump``,
        ``host_compiler``"""
        tk = self.toolkit
        cuda: dict[str, object] = {"error": self.toolkit_error or None, "host_gcc_max": self.host_gcc_max}
        if tk is not None:
            cuda |= {
                "nvcc": str(tk.nvcc),
                "version": ".".join(map(str, tk.version)),
                "root": str(tk.root),
                "source": tk.source,
                "sms": sorted(tk.sms),
                "cublas": str(tk.cublas.library) if tk.cublas else None,
                "cublas_source": tk.cublas.source if tk.cublas else None,
                "libcuda": str(tk.libcuda) if tk.libcuda else None,
                "libcuda_kind": tk.libcuda_kind,
                "cuobjdump": str(tk.cuobjdump) if tk.cuobjdump else None,
                "host_compiler": tk.host.describe(),
            }
        return cuda


def host_os() -> str:
    return {"win32": "windows", "darwin": "macos"}.get(sys.platform, "linux")


def _first_version(text: str) -> str | None:
    m = re.search(r"\d+\.\d+(?:\.\d+)?", text) or re.search(r"\) (\d+)", text)
    return m.group(m.lastindex or 0) if m else None


def _probe(
    name: str,
    command: str,
    args: Sequence[str],
    env: Mapping[str, str],
    run: Runner,
    *,
    path: Path | None = None,
) -> Tool:
    hit = (
        str(path) if path is not None and path.is_file() else shutil.which(command, path=env.get("PATH", ""))
    )
    if not hit:
        return Tool(name=name, path=None)
    try:
        _, out = run([hit, *args])
    except OSError as e:
        return Tool(name=name, path=Path(hit), note=f"cannot run: {e}")
    return Tool(name=name, path=Path(hit), version=_first_version(out))


def survey(env: Mapping[str, str], run: Runner, *, os_name: str) -> dict[str, Tool]:
    """The build tools doctor reports, whether found or not."""
    tools = {
        "cmake": _probe("cmake", "cmake", ["--version"], env, run),
        "ninja": _probe("ninja", "ninja", ["--version"], env, run),
        "ccache": _probe("ccache", "ccache", ["--version"], env, run),
    }
    if os_name == "windows":
        tools["msvc"] = _probe("msvc", "cl", [], env, run)
    else:
        tools["cc"] = _probe("cc", "gcc", ["--version"], env, run)
        tools["c++"] = _probe("c++", "g++", ["--version"], env, run)
        for n in range(15, 8, -1):  # older g++ for older CUDA toolkits
            t = _probe(f"g++-{n}", f"g++-{n}", ["--version"], env, run)
            if t.found:
                tools[t.name] = t
        tools["mingw"] = _probe("mingw", MINGW_CXX, ["--version"], env, run)
        wine = Path("/usr/lib/wine/wine64")
        tools["wine"] = _probe(
            "wine", "wine64", ["--version"], env, run, path=wine if wine.is_file() else None
        )
        tools["msvc"] = Tool(name="msvc", path=None, note="Windows only")
        tools["bwrap"] = _probe("bwrap", "bwrap", ["--version"], env, run)
        deb = shutil.which("debootstrap", path=env.get("PATH", ""))
        # debootstrap --version needs root on some systems; its presence is what counts
        tools["debootstrap"] = Tool(name="debootstrap", path=Path(deb) if deb else None)
    return tools


def version_key(version: str) -> tuple[int, ...]:
    """ "2.31" -> (2, 31) (a part that is not a number counts as 0)."""
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("."))


def host_glibc() -> str | None:
    """This machine's glibc version ("2.36"), None elsewhere (musl, Windows, macOS)."""
    import os

    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):
        return None
    m = re.match(r"^glibc (\d+\.\d+)", text)
    return m.group(1) if m else None


def floors(tools: Mapping[str, Tool], cache: Path | None, *, os_name: str) -> tuple[Floor, ...]:
    """The floors this machine builds for: its own glibc, and each build root patchkit
    knows (prepared, or what preparing it needs)."""
    if os_name != "linux":
        return ()
    out = [
        Floor(
            where="host",
            glibc=host_glibc(),
            ready=True,
            state="host",
        )
    ]
    have = {t: tools.get(t, Tool(name=t, path=None)).found for t in ("bwrap", "debootstrap")}
    for name, kind in sysroot.KINDS.items():
        found = sysroot.find_root(cache, name) if cache is not None else None
        packages: tuple[str, ...] = ()
        if found is not None and have["bwrap"]:
            state = "prepared"
        elif found is not None:
            state = "needs-bwrap"
        elif have["bwrap"] and have["debootstrap"]:
            state = "not-prepared"
        else:
            state = "needs-packages"
            packages = tuple(
                p for t, p in (("debootstrap", "debootstrap"), ("bwrap", "bubblewrap")) if not have[t]
            )
        out.append(
            Floor(
                where=name,
                glibc=found.glibc if found is not None else kind.glibc,
                glibcxx=kind.glibcxx,
                ready=found is not None and have["bwrap"],
                state=state,
                packages=packages,
                root=found,
            )
        )
    return tuple(out)


def _root_verdict(recipe: Recipe, cache: Path | None, tools: Mapping[str, Tool]) -> Verdict | None:
    """Not buildable here when its build root is unknown, missing or bwrap is."""
    root = recipe.build.root
    if root is None:
        return None
    if root not in sysroot.KINDS:
        return Verdict(
            recipe=recipe.name,
            ok=False,
            why=f"build.root {root!r} is not a root patchkit knows",
            fix=Fix(kind="choose-root", choices=tuple(sysroot.KINDS)),
        )
    if not tools.get("bwrap", Tool(name="bwrap", path=None)).found:
        return Verdict(
            recipe=recipe.name,
            ok=False,
            why="bwrap is missing (it runs the root's compilers)",
            fix=Fix(kind="install", packages=("bubblewrap",)),
        )
    if cache is None or sysroot.find_root(cache, root) is None:
        return Verdict(
            recipe=recipe.name,
            ok=False,
            why=f"its build root {root} is not prepared",
            fix=Fix(kind="prepare-root", root=root),
        )
    return None


ToolkitFor = Callable[[object | None], CudaToolkit]


def _cuda_verdict(
    recipe: Recipe, archs: object, toolkit_for: ToolkitFor, tools: Mapping[str, Tool]
) -> Verdict:
    try:
        tk = toolkit_for(recipe.cuda)
        notes = preflight(archs, tk)  # type: ignore[arg-type]
    except (ToolMissing, CudaError) as e:
        fix = Fix(kind="error", hint=e.hint) if e.hint else None
        return Verdict(recipe=recipe.name, ok=False, why=e.message, fix=fix, problem=e.problem)
    facts = [Fact(kind="toolkit", text=tk.describe(), host=tk.host.describe())]
    facts += [Fact(kind="cuda", text=n) for n in notes]
    if not tools.get("ccache", Tool(name="ccache", path=None)).found:
        facts.append(Fact(kind="no-ccache"))
    return Verdict(recipe=recipe.name, ok=True, facts=tuple(facts))


def recipe_verdict(
    recipe: Recipe,
    *,
    os_name: str,
    tools: Mapping[str, Tool],
    toolkit_for: ToolkitFor,
    cache: Path | None = None,
) -> Verdict:
    name = recipe.name
    archs = recipe.cuda.archs if recipe.cuda else None
    here = _OS_NAMES.get(os_name, os_name)
    if recipe.os != os_name:
        cross_mingw = (
            recipe.os == "windows"
            and os_name == "linux"
            and recipe.cuda is None
            and recipe.build.toolchain is not None
        )
        if not cross_mingw:
            if recipe.os == "windows" and recipe.cuda is not None:
                why = f"windows recipe: needs MSVC on Windows; cannot build on {here}"
                fix = Fix(
                    kind="build-on",
                    os="windows",
                    toolkits=toolkits_for(archs.sms) if archs else "",
                    archs=archs.describe() if archs else "",
                )
            else:
                why = f"{recipe.os} recipe: cannot build on {here}"
                fix = Fix(kind="build-on", os=recipe.os)
            return Verdict(recipe=name, ok=False, why=why, fix=fix)
    missing = [t for t in ("cmake",) if not tools[t].found]
    if recipe.build.generator == "Ninja" and not tools["ninja"].found:
        missing.append("ninja")
    if recipe.os == os_name:
        cxx = "msvc" if os_name == "windows" else "c++"
        if not tools.get(cxx, Tool(name=cxx, path=None)).found:
            missing.append("cl (a VS developer prompt)" if cxx == "msvc" else "g++")
    else:  # windows from linux through the mingw toolchain
        if not tools["mingw"].found:
            missing.append(MINGW_CXX)
    if missing:
        return Verdict(
            recipe=name,
            ok=False,
            why=f"missing {', '.join(missing)}",
            fix=Fix(kind="build-tools"),
        )
    root_verdict = _root_verdict(recipe, cache, tools)
    if root_verdict is not None:
        return root_verdict
    if recipe.cuda is not None:
        return _cuda_verdict(recipe, archs, toolkit_for, tools)
    facts: list[Fact] = []
    floor = dict(recipe.release_floor)
    if "GLIBC" in floor and recipe.build.root is None and os_name == "linux":
        glibc = host_glibc()
        if glibc is not None and version_key(glibc) > version_key(floor["GLIBC"]):
            facts.append(Fact(kind="host-newer", floor=floor["GLIBC"], glibc=glibc))
    if recipe.build.root is not None:
        kind = sysroot.KINDS[recipe.build.root]
        facts.append(Fact(kind="in-root", root=kind.name, suite=kind.suite, floor=kind.glibc))
    if recipe.os != os_name and not tools["wine"].found:
        facts.append(Fact(kind="no-wine"))
    return Verdict(recipe=name, ok=True, facts=tuple(facts))


def build_report(
    project: Path | None,
    series: Series | None,
    *,
    cuda_root: Path | None,
    env: Mapping[str, str],
    run: Runner = default_runner,
    os_name: str | None = None,
    sites: Sequence[Path] | None = None,
    project_error: str = "",
    cache_root: Path | None = None,
) -> Report:
    os_name = os_name or host_os()
    windows = os_name == "windows"
    tools = survey(env, run, os_name=os_name)
    sites = site_dirs() if sites is None else sites
    cache: dict[tuple[str | None, str | None], CudaToolkit | ToolMissing] = {}

    def toolkit_for(spec: object | None) -> CudaToolkit:
        key = (getattr(spec, "toolkit_root", None), getattr(spec, "host_compiler", None))
        if key not in cache:
            try:
                cache[key] = find_toolkit(spec, cuda_root, env, run=run, sites=sites, windows=windows)
            except ToolMissing as e:
                cache[key] = e
        hit = cache[key]
        if isinstance(hit, ToolMissing):
            raise hit
        return hit

    toolkit, tk_error, tk_problem = None, "", None
    try:
        toolkit = toolkit_for(None)
    except ToolMissing as e:
        tk_error, tk_problem = e.message, e.problem

    verdicts: list[Verdict] = []
    if project is not None and series is not None:
        for path in list_recipes(project):
            try:
                recipe = load_recipe(path, project, series)
            except RecipeError as e:
                verdicts.append(
                    Verdict(
                        recipe=path.stem,
                        ok=False,
                        why=e.message,
                        fix=Fix(kind="error", hint=e.hint) if e.hint else Fix(kind="fix-recipe"),
                        problem=e.problem,
                    )
                )
                continue
            verdicts.append(
                recipe_verdict(
                    recipe, os_name=os_name, tools=tools, toolkit_for=toolkit_for, cache=cache_root
                )
            )
    return Report(
        host_os=os_name,
        machine=platform.machine(),
        tools=tools,
        toolkit=toolkit,
        toolkit_error=tk_error,
        toolkit_problem=tk_problem,
        verdicts=tuple(verdicts),
        project_error=project_error,
        floors=floors(tools, cache_root, os_name=os_name),
    )
