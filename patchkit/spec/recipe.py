"""Recipes: TOML files in recipes/, parsed once into frozen dataclasses.

Every problem is reported as one line naming the file and the key, with a
"did you mean" for unknown keys, sections and patch names.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from pathlib import Path
from typing import Any

from patchkit.core.errors import PEError, RecipeError
from patchkit.core.fs import read_capped, sha256_bytes
from patchkit.core.text import did_you_mean
from patchkit.core.units import PAGE_SIZE, parse_size
from patchkit.spec.cuda import CudaArchs, check_cuda_build, resolve_archs
from patchkit.spec.series import Patch, Series

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = [
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
OS_NAMES = ("linux", "windows", "macos")
BUILD_TYPES = ("Release", "RelWithDebInfo", "Debug", "MinSizeRel")
LAUNCHERS = ("ccache", "sccache", "none")  # build.launcher (patchkit.builder.compcache)

# section -> allowed keys (None = top level)
_SCHEMA: dict[str | None, tuple[str, ...]] = {
    None: (
        "name",
        "description",
        "patches",
        "allow_experimental",
        "upstream",
        "build",
        "platform",
        "cuda",
        "windows",
        "smoke",
        "release",
    ),
    "upstream": ("url", "commit", "ref"),
    "build": (
        "targets",
        "defines",
        "build_type",
        "generator",
        "toolchain",
        "sparse_exclude",
        "cache_remote",
        "launcher",
    ),
    "platform": ("os", "arch"),
    "cuda": ("archs", "toolkit_root", "host_compiler", "fa_all_quants"),
    "windows": ("stack_reserve", "stack_commit", "rpc_clients"),
    "smoke": ("enabled", "skip", "tools"),
    "release": ("allow_system",),
}
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

    @property
    def patch_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.patches)


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
        return RecipeError(f"{self.label}: {key}: {msg}")

    def check_keys(self, table: dict[str, Any], section: str | None) -> None:
        allowed = _SCHEMA[section]
        for key in table:
            if key not in allowed:
                where = f"{section}.{key}" if section else key
                raise self.fail(where, "unknown key" + did_you_mean(key, allowed))

    def get(
        self,
        table: dict[str, Any],
        key: str,
        typ: type | tuple[type, ...],
        section: str | None,
        *,
        required: bool = False,
        default: Any = None,
    ) -> Any:
        where = f"{section}.{key}" if section else key
        if key not in table:
            if required:
                raise self.fail(where, "is required")
            return default
        value = table[key]
        # bool is an int in Python; never accept it where int/str is asked
        if not isinstance(value, typ) or (isinstance(value, bool) and typ is not bool):
            want = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
            raise self.fail(where, f"must be {want}, not {type(value).__name__} {value!r}")
        return value

    def str_list(
        self,
        table: dict[str, Any],
        key: str,
        section: str | None,
        *,
        required: bool = False,
        pattern: re.Pattern[str] | None = None,
        allow_int: bool = False,
    ) -> tuple[str, ...]:
        where = f"{section}.{key}" if section else key
        value = self.get(table, key, list, section, required=required, default=[])
        out: list[str] = []
        kinds = (str, int) if allow_int else (str,)
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, kinds):
                raise self.fail(f"{where}[{i}]", f"must be a string, not {item!r}")
            item = str(item)
            if pattern is not None and not pattern.match(item):
                raise self.fail(f"{where}[{i}]", f"{item!r} is not a valid name")
            if item in out:
                raise self.fail(f"{where}[{i}]", f"{item!r} is listed twice")
            out.append(item)
        if required and not out:
            raise self.fail(where, "must not be empty")
        return tuple(out)

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

    def section(self, data: dict[str, Any], name: str, *, required: bool = False) -> dict[str, Any] | None:
        table: dict[str, Any] | None = self.get(data, name, dict, None, required=required)
        if table is not None:
            self.check_keys(table, name)
        return table


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


def _parse(ctx: _Ctx, data: dict[str, Any], series: Series) -> Recipe:
    ctx.check_keys(data, None)
    name = ctx.get(data, "name", str, None, required=True)
    if not _NAME.match(name):
        raise ctx.fail("name", f"{name!r} must be lowercase letters, digits, '.', '_' or '-'")

    up = ctx.section(data, "upstream", required=True)
    assert up is not None
    url = ctx.get(up, "url", str, "upstream", required=True).strip()
    if not url:
        raise ctx.fail("upstream.url", "must not be empty")
    commit = ctx.get(up, "commit", str, "upstream", required=True).strip()
    if not _COMMIT.match(commit):
        raise ctx.fail("upstream.commit", f"{commit!r} must be a full 40-hex-digit commit sha (lowercase)")
    ref = ctx.get(up, "ref", str, "upstream")

    allow_exp = ctx.get(data, "allow_experimental", bool, None, default=False)
    if "patches" in data:
        names = ctx.str_list(data, "patches", None)
        for i, pname in enumerate(names):
            try:
                patch = series.get(pname)
            except KeyError:
                raise ctx.fail(
                    f"patches[{i}]", f"{pname!r} is not in patches/series" + series.suggest(pname)
                ) from None
            if patch.experimental and not allow_exp:
                raise ctx.fail(
                    f"patches[{i}]", f"{pname!r} is experimental: set allow_experimental = true to opt in"
                )
        patches = series.select(tuple(series.get(n).name for n in names))
    else:
        patches = tuple(p for p in series.patches if p.default)

    b = ctx.section(data, "build", required=True)
    assert b is not None
    targets = ctx.str_list(b, "targets", "build", required=True, pattern=_TARGET)
    raw_defines = ctx.get(b, "defines", dict, "build", default={})
    defines = []
    for key, value in raw_defines.items():
        if not _DEFINE.match(key):
            raise ctx.fail(f"build.defines.{key}", "is not a valid CMake variable name")
        defines.append((key, _define_value(ctx, key, value)))
    build_type = ctx.get(b, "build_type", str, "build", default="Release")
    if build_type not in BUILD_TYPES:
        raise ctx.fail(
            "build.build_type",
            f"{build_type!r} is not one of {', '.join(BUILD_TYPES)}" + did_you_mean(build_type, BUILD_TYPES),
        )
    generator = ctx.get(b, "generator", str, "build", default="Ninja")
    toolchain = ctx.get(b, "toolchain", str, "build")
    sparse = ctx.str_list(b, "sparse_exclude", "build")
    launcher = ctx.get(b, "launcher", str, "build")
    if launcher is not None and launcher not in LAUNCHERS:
        raise ctx.fail(
            "build.launcher",
            f"{launcher!r} is not one of {', '.join(LAUNCHERS)}" + did_you_mean(launcher, LAUNCHERS),
        )
    build = BuildSpec(
        targets=targets,
        defines=tuple(defines),
        build_type=build_type,
        generator=generator,
        toolchain=ctx.project_path(toolchain, "build.toolchain") if toolchain else None,
        sparse_exclude=sparse,
        cache_remote=ctx.get(b, "cache_remote", str, "build"),
        launcher=launcher,
    )

    plat = ctx.section(data, "platform") or {}
    os_name = ctx.get(plat, "os", str, "platform", default="linux")
    if os_name not in OS_NAMES:
        raise ctx.fail(
            "platform.os",
            f"{os_name!r} is not one of {', '.join(OS_NAMES)}" + did_you_mean(os_name, OS_NAMES),
        )
    arch = ctx.get(plat, "arch", str, "platform", default="x86_64")

    cuda = None
    c = ctx.section(data, "cuda")
    if c is not None:
        raw_archs = ctx.str_list(c, "archs", "cuda", required=True, allow_int=True)
        cuda = CudaSpec(
            archs=resolve_archs(raw_archs, source=ctx.label),
            toolkit_root=ctx.get(c, "toolkit_root", str, "cuda"),
            host_compiler=ctx.get(c, "host_compiler", str, "cuda"),
            fa_all_quants=ctx.get(c, "fa_all_quants", bool, "cuda", default=False),
        )

    windows = None
    w = ctx.section(data, "windows")
    if w is not None:
        clients = ctx.str_list(w, "rpc_clients", "windows", pattern=_TARGET)
        for i, t in enumerate(clients):
            if t not in targets:
                raise ctx.fail(
                    f"windows.rpc_clients[{i}]", f"{t!r} is not in build.targets" + did_you_mean(t, targets)
                )
        windows = WindowsSpec(
            stack_reserve=ctx.get(w, "stack_reserve", str, "windows", default="256MiB"),
            stack_commit=ctx.get(w, "stack_commit", str, "windows"),
            rpc_clients=clients,
        )
        _check_stack_sizes(ctx, windows)

    check_cuda_build(
        ctx.label,
        defines=build.defines_dict,
        has_cuda=cuda is not None,
        os_name=os_name,
        cross_toolchain=build.toolchain is not None,
        generator=build.generator,
    )

    s = ctx.section(data, "smoke") or {}
    return Recipe(
        name=name,
        description=ctx.get(data, "description", str, None, default=""),
        path=ctx.path,
        sha256=ctx.sha256,
        upstream=Upstream(url=url, commit=commit, ref=ref),
        patches=patches,
        allow_experimental=allow_exp,
        build=build,
        os=os_name,
        arch=arch,
        cuda=cuda,
        windows=windows,
        smoke_enabled=ctx.get(s, "enabled", bool, "smoke", default=True),
        smoke_skip=ctx.str_list(s, "skip", "smoke"),
        smoke_tools=ctx.str_list(s, "tools", "smoke", pattern=_TARGET),
        release_allow_system=ctx.str_list(
            ctx.section(data, "release") or {}, "allow_system", "release", pattern=_LIBRARY
        ),
    )


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
        hint = "`patchkit list` shows the recipes"
        if os.path.lexists(arg):
            hint = (
                f"a bare name is looked up in {project / 'recipes'} only; for the file "
                f"{arg!r} here, write ./{arg}"
            )
        raise RecipeError(
            f"no recipe named {arg!r} in {project / 'recipes'}" + did_you_mean(arg, names), hint=hint
        )
    p = Path(arg)
    if not os.path.lexists(p):
        stem = p.name.removesuffix(".toml")
        hint = (
            f"the recipe {stem!r} in recipes/ is `patchkit build {stem}`"
            if stem in names and p.name == f"{stem}.toml"
            else ""
        )
        raise RecipeError(f"recipe file {arg} does not exist", hint=hint)
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
