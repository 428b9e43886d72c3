"""Recipes: TOML files in recipes/, parsed once into frozen dataclasses.

Every problem is reported as one line naming the file and the key, with a
"did you mean" for unknown keys, sections and patch names.

Two steps: the TOML tables are read into records (``_RecipeFile`` and its tables) by
patchkit.core.record, which says which key is unknown, missing or of the wrong type;
then the checks no type can say (names and their patterns, a 40-hex commit, a patch in
the series, a toolchain inside the project, stack sizes, CUDA archs) resolve them into
the :class:`Recipe`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from patchkit.core.errors import PEError, RecipeError
from patchkit.core.fs import read_capped, sha256_bytes
from patchkit.core.record import RecordError, decode
from patchkit.core.text import did_you_mean, printable
from patchkit.core.units import PAGE_SIZE, parse_size
from patchkit.spec import cpuvariants
from patchkit.spec.cuda import CudaArchs, check_cuda_build, resolve_archs
from patchkit.spec.problems import RecipeNotFound
from patchkit.spec.series import Patch, Series

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = [
    "BUILD_ROOTS",
    "BuildSpec",
    "CudaSpec",
    "Recipe",
    "Upstream",
    "WindowsSpec",
    "is_recipe_name",
    "list_recipes",
    "load_recipe",
    "resolve_recipe_path",
]

RECIPE_MAX = 1 << 20  # a recipe is a page of TOML
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_TARGET = re.compile(r"^[A-Za-z0-9_.+-]+$")
_DEFINE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# the build roots patchkit can prepare (builder.sysroot.KINDS says what each is)
BUILD_ROOTS = ("debian11", "debian12")
_VERSION = re.compile(r"^[0-9]{1,4}(\.[0-9]{1,4}){1,3}$")  # a symbol version floor: 2.31, 3.4.28
OS_NAMES = ("linux", "windows", "macos")
BUILD_TYPES = ("Release", "RelWithDebInfo", "Debug", "MinSizeRel")
LAUNCHERS = ("ccache", "sccache", "none")  # build.launcher (patchkit.builder.compcache)

# a library file name a release may take from the target system (release.imports)
_LIBRARY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Upstream:
    url: str
    commit: str
    ref: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildSpec:
    targets: tuple[str, ...]
    defines: tuple[tuple[str, str], ...]
    build_type: str = "Release"
    generator: str = "Ninja"
    toolchain: Path | None = None
    sparse_exclude: tuple[str, ...] = ()
    cache_remote: str | None = None  # a shared compile cache URL (checked by builder.compcache)
    launcher: str | None = None  # ccache | sccache | none; None: ccache when on PATH
    root: str | None = None  # a build root's name (builder.sysroot): compile inside it
    # ggml's CPU backend as loadable variants (spec.cpuvariants): () is one linked backend
    cpu_variants: tuple[str, ...] = ()

    @property
    def defines_dict(self) -> dict[str, str]:
        return dict(self.defines)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CudaSpec:
    archs: CudaArchs  # resolved from the families / SM numbers the recipe names
    toolkit_root: str | None = None
    host_compiler: str | None = None
    fa_all_quants: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class WindowsSpec:
    stack_reserve: str = "256MiB"  # a size for patchkit.core.units.parse_size (checked at load)
    stack_commit: str | None = None
    rpc_clients: tuple[str, ...] = ()  # targets whose .exe get the stack reserve

    @property
    def stack_reserve_bytes(self) -> int:
        return parse_size(self.stack_reserve)

    @property
    def stack_commit_bytes(self) -> int | None:
        return None if self.stack_commit is None else parse_size(self.stack_commit)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Recipe:
    name: str
    description: str
    path: Path
    sha256: str  # of the recipe file's bytes
    upstream: Upstream
    patches: tuple[Patch, ...]  # in series order
    allow_experimental: bool
    build: BuildSpec
    os: str
    arch: str
    cuda: CudaSpec | None
    windows: WindowsSpec | None
    smoke_enabled: bool = True
    smoke_skip: tuple[str, ...] = ()
    smoke_tools: tuple[str, ...] = ()  # extra targets built for the smoke stage, not shipped
    # system libraries beyond the built-in set that its releases may import (libssl.so.3 …)
    release_allow_system: tuple[str, ...] = ()
    # the C library floor its releases keep to: {"GLIBC": "2.31", "GLIBCXX": "3.4.28", ...}
    release_floor: tuple[tuple[str, str], ...] = ()

    @property
    def patch_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.patches)


# -- the file: its tables as records (what core.record checks: keys, required, types) ------


@dataclasses.dataclass(frozen=True, kw_only=True)
class _UpstreamTable:
    url: str
    commit: str
    ref: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class _BuildTable:
    targets: tuple[str, ...]
    defines: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # values: _define_value
    build_type: str = "Release"
    generator: str = "Ninja"
    toolchain: str | None = None
    sparse_exclude: tuple[str, ...] = ()
    cache_remote: str | None = None
    launcher: str | None = None
    root: str | None = None
    cpu_variants: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class _PlatformTable:
    os: str = "linux"
    arch: str = "x86_64"


@dataclasses.dataclass(frozen=True, kw_only=True)
class _CudaTable:
    archs: tuple[str | int, ...]  # families or SM numbers (spec.cuda.resolve_archs)
    toolkit_root: str | None = None
    host_compiler: str | None = None
    fa_all_quants: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class _WindowsTable:
    stack_reserve: str = "256MiB"
    stack_commit: str | None = None
    rpc_clients: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class _SmokeTable:
    enabled: bool = True
    skip: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class _ReleaseTable:
    allow_system: tuple[str, ...] = ()
    glibc: str | None = None  # the newest GLIBC_ symbol version a shipped file may need
    glibcxx: str | None = None  # GLIBCXX_ (libstdc++)
    cxxabi: str | None = None  # CXXABI_ (libstdc++)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _RecipeFile:
    name: str
    upstream: _UpstreamTable
    allow_experimental: bool = False
    patches: tuple[str, ...] | None = None  # None: every patch with `Default: yes`
    build: _BuildTable
    platform: _PlatformTable = dataclasses.field(default_factory=_PlatformTable)
    cuda: _CudaTable | None = None
    windows: _WindowsTable | None = None
    smoke: _SmokeTable = dataclasses.field(default_factory=_SmokeTable)
    release: _ReleaseTable = dataclasses.field(default_factory=_ReleaseTable)
    description: str = ""


# -- the checks after: names, patterns, files ----------------------------------------------


class _Ctx:
    def __init__(self, path: Path, project: Path, sha256: str = "") -> None:
        self.path = path
        self.project = project
        self.sha256 = sha256
        try:
            self.label = str(path.relative_to(project))
        except ValueError:
            self.label = str(path)

    def fail(self, key: str, msg: str) -> RecipeError:
        return RecipeError(f"{self.label}: {printable(key)}: {msg}")  # a key is the file's text

    def record_error(self, e: RecordError) -> RecipeError:
        """The one line for what the converter found: an unknown key (did you mean), a
        missing one, a value of the wrong type (a list item: "must be a string")."""
        if e.problem == "unknown":
            return self.fail(e.path, "unknown key" + did_you_mean(str(e.value), e.allowed))
        if e.problem == "missing":
            return self.fail(e.path, "is required")
        if e.path.endswith("]"):
            return self.fail(e.path, f"must be a string, not {e.value!r}")
        return self.fail(e.path, f"must be {e.expected}, not {type(e.value).__name__} {e.value!r}")

    def names(
        self,
        values: tuple[str | int, ...],
        where: str,
        *,
        required: bool = False,
        pattern: re.Pattern[str] | None = None,
    ) -> tuple[str, ...]:
        """A list of names: each matching ``pattern``, none twice; not empty if ``required``."""
        out: list[str] = []
        for i, value in enumerate(values):
            item = str(value)
            if pattern is not None and not pattern.fullmatch(item):
                raise self.fail(f"{where}[{i}]", f"{item!r} is not a valid name")
            if item in out:
                raise self.fail(f"{where}[{i}]", f"{item!r} is listed twice")
            out.append(item)
        if required and not out:
            raise self.fail(where, "must not be empty")
        return tuple(out)

    def one_of(self, value: str, choices: tuple[str, ...], where: str) -> str:
        if value not in choices:
            raise self.fail(
                where, f"{value!r} is not one of {', '.join(choices)}" + did_you_mean(value, choices)
            )
        return value

    def project_path(self, value: str, key: str) -> Path:
        p = Path(value)
        if p.is_absolute():
            raise self.fail(key, f"{value!r} must be relative to the project folder")
        resolved = (self.project / p).resolve()
        if not resolved.is_relative_to(self.project.resolve()):
            raise self.fail(key, f"{value!r} escapes the project folder")
        if not resolved.is_file():
            raise self.fail(key, f"{value!r} does not exist")
        return resolved


def _define_value(ctx: _Ctx, key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "ON" if value else "OFF"
    if isinstance(value, (int, str)):
        return str(value)
    raise ctx.fail(f"build.defines.{key}", f"must be a string, integer or boolean, not {value!r}")


def _check_stack_sizes(ctx: _Ctx, w: WindowsSpec) -> None:
    sizes: dict[str, int] = {}
    for key, text in (("stack_reserve", w.stack_reserve), ("stack_commit", w.stack_commit)):
        if text is None:
            continue
        try:
            n = parse_size(text)
        except PEError as e:
            raise ctx.fail(f"windows.{key}", e.message) from None
        if n <= 0 or n % PAGE_SIZE:
            raise ctx.fail(
                f"windows.{key}", f"{text!r} must be a positive multiple of the page size ({PAGE_SIZE} bytes)"
            )
        sizes[key] = n
    if "stack_commit" in sizes and sizes["stack_commit"] > sizes["stack_reserve"]:
        raise ctx.fail(
            "windows.stack_commit", f"{w.stack_commit!r} is larger than stack_reserve {w.stack_reserve!r}"
        )


def _patches(ctx: _Ctx, f: _RecipeFile, series: Series) -> tuple[Patch, ...]:
    if f.patches is None:
        return tuple(p for p in series.patches if p.default)
    names = ctx.names(f.patches, "patches")
    for i, pname in enumerate(names):
        try:
            patch = series.get(pname)
        except KeyError:
            raise ctx.fail(
                f"patches[{i}]", f"{pname!r} is not in patches/series" + series.suggest(pname)
            ) from None
        if patch.experimental and not f.allow_experimental:
            raise ctx.fail(
                f"patches[{i}]", f"{pname!r} is experimental: set allow_experimental = true to opt in"
            )
    return series.select(tuple(series.get(n).name for n in names))


def _build(ctx: _Ctx, b: _BuildTable) -> BuildSpec:
    targets = ctx.names(b.targets, "build.targets", required=True, pattern=_TARGET)
    defines = []
    for key, value in b.defines.items():
        if not _DEFINE.fullmatch(key):
            raise ctx.fail(f"build.defines.{key}", "is not a valid CMake variable name")
        defines.append((key, _define_value(ctx, key, value)))
    build_type = ctx.one_of(b.build_type, BUILD_TYPES, "build.build_type")
    sparse = ctx.names(b.sparse_exclude, "build.sparse_exclude")
    if b.launcher is not None:
        ctx.one_of(b.launcher, LAUNCHERS, "build.launcher")
    if b.root is not None:
        ctx.one_of(b.root, BUILD_ROOTS, "build.root")
    return BuildSpec(
        targets=targets,
        defines=tuple(defines),
        build_type=build_type,
        generator=b.generator,
        toolchain=ctx.project_path(b.toolchain, "build.toolchain") if b.toolchain else None,
        sparse_exclude=sparse,
        cache_remote=b.cache_remote,
        launcher=b.launcher,
        root=b.root,
        cpu_variants=ctx.names(b.cpu_variants, "build.cpu_variants"),
    )


# defines that loadable CPU variants need (patchkit sets them; a recipe may not say otherwise)
_VARIANT_DEFINES = {
    "GGML_BACKEND_DL": "ON",
    "GGML_CPU_ALL_VARIANTS": "ON",
    "GGML_NATIVE": "OFF",
    "BUILD_SHARED_LIBS": "ON",
    "GGML_CPU": "ON",
}


def _check_cpu_variants(ctx: _Ctx, build: BuildSpec, arch: str) -> None:
    """``[build] cpu_variants``: names of the pin's x86-64 variants, on an x86-64 recipe,
    with no define that contradicts loadable backends."""
    if not build.cpu_variants:
        return
    if arch not in ("x86_64", "amd64"):
        raise ctx.fail(
            "build.cpu_variants",
            f"lists x86-64 CPU variants, but platform.arch is {arch!r}: remove it (one CPU backend)",
        )
    known = tuple(v.name for v in cpuvariants.VARIANTS)
    for i, name in enumerate(build.cpu_variants):
        if name not in known:
            hint = did_you_mean(name, known) or f" (it has {', '.join(known)})"
            raise ctx.fail(
                f"build.cpu_variants[{i}]", f"{name!r} is not a CPU variant of ggml at the pin{hint}"
            )
    defines = build.defines_dict
    for key, need in _VARIANT_DEFINES.items():
        if key in defines and defines[key] != need:
            raise ctx.fail(
                f"build.defines.{key}",
                f"is {defines[key]}, but build.cpu_variants needs {key}={need} "
                "(loadable backends): remove the define, or set cpu_variants = [] for one CPU backend",
            )


def _windows(ctx: _Ctx, w: _WindowsTable, targets: tuple[str, ...]) -> WindowsSpec:
    clients = ctx.names(w.rpc_clients, "windows.rpc_clients", pattern=_TARGET)
    for i, t in enumerate(clients):
        if t not in targets:
            raise ctx.fail(
                f"windows.rpc_clients[{i}]", f"{t!r} is not in build.targets" + did_you_mean(t, targets)
            )
    windows = WindowsSpec(stack_reserve=w.stack_reserve, stack_commit=w.stack_commit, rpc_clients=clients)
    _check_stack_sizes(ctx, windows)
    return windows


def _parse(ctx: _Ctx, data: dict[str, Any], series: Series) -> Recipe:
    try:
        f = decode(_RecipeFile, data, unknown="forbid")
    except RecordError as e:
        raise ctx.record_error(e) from None
    if not _NAME.fullmatch(f.name):
        raise ctx.fail("name", f"{f.name!r} must be lowercase letters, digits, '.', '_' or '-'")
    url = f.upstream.url.strip()
    if not url:
        raise ctx.fail("upstream.url", "must not be empty")
    commit = f.upstream.commit.strip()
    if not _COMMIT.fullmatch(commit):
        raise ctx.fail("upstream.commit", f"{commit!r} must be a full 40-hex-digit commit sha (lowercase)")
    patches = _patches(ctx, f, series)
    build = _build(ctx, f.build)
    os_name = ctx.one_of(f.platform.os, OS_NAMES, "platform.os")

    cuda = None
    if f.cuda is not None:
        raw_archs = ctx.names(f.cuda.archs, "cuda.archs", required=True)
        cuda = CudaSpec(
            archs=resolve_archs(raw_archs, source=ctx.label),
            toolkit_root=f.cuda.toolkit_root,
            host_compiler=f.cuda.host_compiler,
            fa_all_quants=f.cuda.fa_all_quants,
        )
    windows = _windows(ctx, f.windows, build.targets) if f.windows is not None else None
    _check_cpu_variants(ctx, build, f.platform.arch)

    check_cuda_build(
        ctx.label,
        defines=build.defines_dict,
        has_cuda=cuda is not None,
        os_name=os_name,
        cross_toolchain=build.toolchain is not None,
        generator=build.generator,
    )
    return Recipe(
        name=f.name,
        description=f.description,
        path=ctx.path,
        sha256=ctx.sha256,
        upstream=Upstream(url=url, commit=commit, ref=f.upstream.ref),
        patches=patches,
        allow_experimental=f.allow_experimental,
        build=build,
        os=os_name,
        arch=f.platform.arch,
        cuda=cuda,
        windows=windows,
        smoke_enabled=f.smoke.enabled,
        smoke_skip=ctx.names(f.smoke.skip, "smoke.skip"),
        smoke_tools=ctx.names(f.smoke.tools, "smoke.tools", pattern=_TARGET),
        release_allow_system=ctx.names(f.release.allow_system, "release.allow_system", pattern=_LIBRARY),
        release_floor=_floor(ctx, f.release),
    )


def _floor(ctx: _Ctx, r: _ReleaseTable) -> tuple[tuple[str, str], ...]:
    """The `[release]` floors as (symbol-version prefix, version) pairs."""
    out: list[tuple[str, str]] = []
    for key, prefix, value in (
        ("glibc", "GLIBC", r.glibc),
        ("glibcxx", "GLIBCXX", r.glibcxx),
        ("cxxabi", "CXXABI", r.cxxabi),
    ):
        if value is None:
            continue
        if not _VERSION.fullmatch(value):
            raise ctx.fail(f"release.{key}", f'{value!r} is not a version like "2.31" (numbers and dots)')
        out.append((prefix, value))
    return tuple(out)


def list_recipes(project: Path) -> list[Path]:
    """Every ``recipes/*.toml`` entry (a folder or a broken link too: loading it says why)."""
    return sorted((project / "recipes").glob("*.toml"))


def is_recipe_name(arg: str) -> bool:
    """A bare name (no folder separator, no ``.toml`` suffix, no drive): looked up in
    recipes/ only. Anything else is a path."""
    return not (
        "/" in arg or "\\" in arg or arg.endswith(".toml") or re.match(r"^[A-Za-z]:", arg) is not None
    )


def resolve_recipe_path(arg: str, project: Path) -> Path:
    """A recipe argument: a bare NAME is ``recipes/NAME.toml`` (always: a file or folder
    named NAME in the current directory does not hide it); a path (it has a folder
    separator or ends in ``.toml``) is that file."""
    names = [r.stem for r in list_recipes(project)]
    if is_recipe_name(arg):
        candidate = project / "recipes" / f"{arg}.toml"
        if os.path.lexists(candidate):
            return candidate  # load_recipe says what is wrong with it, if anything
        missing = RecipeNotFound(
            arg=arg,
            by="name",
            recipes=project / "recipes",
            known=tuple(names),
            file_here=os.path.lexists(arg),
        )
        raise RecipeError(problem=missing)
    p = Path(arg)
    if not os.path.lexists(p):
        stem = p.name.removesuffix(".toml")
        known = (stem,) if stem in names and p.name == f"{stem}.toml" else ()
        raise RecipeError(
            problem=RecipeNotFound(arg=arg, by="path", recipes=project / "recipes", known=known)
        )
    if p.is_dir():
        raise RecipeError(
            f"recipe {arg} is a folder, not a recipe file",
            hint="a recipe is a .toml file; a bare NAME means recipes/NAME.toml",
        )
    return p.resolve()


def load_recipe(path: Path, project: Path, series: Series) -> Recipe:
    label = _Ctx(path, project).label
    if not os.path.exists(path):
        why = "a link to nothing" if os.path.lexists(path) else "missing"
        raise RecipeError(f"{label}: the recipe file is {why}")
    if path.is_dir():
        raise RecipeError(f"{label}: is a folder, not a recipe file")
    data = read_capped(path, limit=RECIPE_MAX, error=RecipeError, what=label)
    ctx = _Ctx(path, project, sha256_bytes(data))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise RecipeError(
            f"{ctx.label}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x})", hint="recipes are UTF-8 TOML"
        ) from None
    try:
        parsed = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise RecipeError(f"{ctx.label}: not valid TOML: {e}") from None
    except RecursionError:
        raise RecipeError(f"{ctx.label}: not valid TOML: nested too deeply") from None
    return _parse(ctx, parsed, series)
