"""Reproducible-build settings: the same recipe gives the same bytes from any cache path.

What made two builds of one recipe differ, and what this module does about it:

- ``__FILE__`` (``GGML_ASSERT``/``GGML_ABORT`` messages) holds the absolute source path
  when the compiler gets the command line as CMake wrote it (no launcher; sccache, which
  keeps it; and ccache itself whenever it does not rewrite it: ``CCACHE_DISABLE=1``, a call
  it cannot cache, a fallback), and a path relative to the build dir when ccache rewrites
  the command line under its base dir (the cache root: ``../src/ggml/src/ggml.c``). The
  prefix maps below turn the absolute form into that same relative form, and they are
  passed with ccache as well as without a launcher, so the bytes never depend on whether
  ccache rewrote a command line. ccache still hits across cache folders:
  the maps are named in ``CCACHE_IGNOREOPTIONS`` (their absolute paths out of its hash;
  ccache 4.7 hashes a gcc ``-ffile-prefix-map=`` without its paths anyway, but nvcc's
  ``-Xcompiler=`` form whole), and its base dir and ``hash_dir=false`` (builder.compcache)
  do the rest; checked by tests/integration/builder/test_repro_ccache.py. With sccache they are not passed (it
  hashes their absolute paths: a second machine would get no remote hits), so an sccache
  build holds its absolute source paths and is NOT byte-identical to a build in another
  folder (docs/release.md says so; the manifest records it).
- Include dirs CMake passes with ``.``/``..`` in them (llama.cpp's ``common/../vendor``,
  ``ggml/src/..``): a header found through one is named ``<dir>/../vendor/x.hpp`` by the
  compiler, while ccache normalises the dir (``../src/vendor/x.hpp``). After the configure,
  ``include_maps`` reads those dirs from the File API and maps each to its normalised
  relative form; the build dir is then configured once more with them (not with sccache).
- nvcc names its intermediate host file ``/tmp/tmpxft_<pid>_…cudafe1.cpp``, and that name
  lands in each object's symbol table (an STT_FILE symbol in libggml-cuda.so): two builds
  never match. ``--objdir-as-tempdir`` (nvcc >= 12.0 here) writes it beside the object
  under a stable name (``<object>.cudafe1.cpp``); passed with or without ccache (a cached
  object is as good as the compile that stored it).
- ``SOURCE_DATE_EPOCH`` (the upstream commit time) for every tool that stamps a date
  (mingw's linker writes it as the PE TimeDateStamp, else the clock; GGML_NATIVE's
  default; ``__DATE__``/``__TIME__``).

The maps are passed through the environment (CFLAGS, CXXFLAGS, CUDAFLAGS, which CMake
reads on a fresh configure), never as defines, so no machine path lands in a manifest.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Mapping
from pathlib import Path

from patchkit.core.fs import read_regular
from patchkit.spec.cuda import NVCC_OBJTEMP_SINCE  # the oldest toolkit it is passed to

__all__ = [
    "NVCC_OBJTEMP",
    "NVCC_OBJTEMP_SINCE",
    "SETTINGS_ID",
    "build_env",
    "configured_with",
    "include_maps",
    "is_launcher_define",
    "launcher_defines",
    "maps_paths",
    "prefix_maps",
    "source_date_epoch",
    "with_maps",
]

# bump when the settings change: the build dir is configured afresh (flags come from the env
# only on a fresh configure)
SETTINGS_ID = "repro-3"  # + the launcher (in the config id through the defines)
NVCC_OBJTEMP = "--objdir-as-tempdir"
_REPLY_FILE_MAX = 64 << 20  # a File API reply file (llama.cpp's largest: ~200 KiB)


def prefix_maps(work_root: Path, build_dir: Path) -> list[str]:
    """GCC/Clang flags mapping ``work_root`` to ``..`` and ``build_dir`` to ``.``.

    GCC tries the maps given last first, so the build dir (inside ``work_root``) comes last.
    The compiler runs in ``build_dir``; ``work_root`` is its parent (``src/`` beside it).
    """
    root, build = str(work_root), str(build_dir)
    return [f"-ffile-prefix-map={root}=..", f"-ffile-prefix-map={build}=."]


def maps_paths(launcher: str | None) -> bool:
    """Whether a build with ``launcher`` gets the prefix maps: every launcher but sccache.

    With ccache the compiler sees absolute paths whenever ccache does not rewrite the
    command line (``CCACHE_DISABLE``, an uncacheable call, a fallback), so the maps are
    passed there too; sccache would hash their absolute paths (no hits from elsewhere)
    and its record says its bytes depend on the build folder (builder.record).
    """
    return launcher != "sccache"


def launcher_defines(launcher: str | None) -> dict[str, str]:
    """Without a launcher, ggml's own ccache rule off too (GGML_CCACHE, default ON, makes
    ccache the launch rule whenever it is on PATH): "no launcher" then means no ccache."""
    return {"GGML_CCACHE": "OFF"} if launcher is None else {}


def is_launcher_define(key: str) -> bool:
    """A define that only says which compiler launcher ran (never in the bytes)."""
    return key.endswith("_COMPILER_LAUNCHER") or key in launcher_defines(None)


def source_date_epoch(commit_date: str) -> str:
    """The upstream commit time (ISO 8601 with a zone) as seconds since the epoch."""
    when = dt.datetime.fromisoformat(commit_date.replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return str(int(when.timestamp()))


def build_env(
    env: Mapping[str, str],
    *,
    work_root: Path,
    build_dir: Path,
    commit_date: str,
    launcher: str | None,
    nvcc: tuple[int, ...] | None = None,
) -> dict[str, str]:
    """What to add to the configure/build environment (the user's own flags kept first).

    ``launcher``: the compile cache in use. The maps go with every launcher but sccache
    (:func:`maps_paths`): ccache rewrites paths only when it runs the compile itself.
    ``nvcc``: the CUDA toolkit's version for a CUDA build (None: no CUDA).
    """
    out = {"SOURCE_DATE_EPOCH": env.get("SOURCE_DATE_EPOCH") or source_date_epoch(commit_date)}
    maps = prefix_maps(work_root, build_dir) if maps_paths(launcher) else []
    if maps:
        out["CFLAGS"] = _join(env.get("CFLAGS"), " ".join(maps))
        out["CXXFLAGS"] = _join(env.get("CXXFLAGS"), " ".join(maps))
    xmaps = [f"-Xcompiler={m}" for m in maps] if nvcc is not None else []
    if nvcc is not None:
        cuda = [NVCC_OBJTEMP] if tuple(nvcc) >= NVCC_OBJTEMP_SINCE else []
        cuda += xmaps
        if cuda:
            out["CUDAFLAGS"] = _join(env.get("CUDAFLAGS"), " ".join(cuda))
    if launcher == "ccache" and maps:
        out["CCACHE_IGNOREOPTIONS"] = _join(env.get("CCACHE_IGNOREOPTIONS"), " ".join([*maps, *xmaps]))
    return out


def _join(user: str | None, ours: str) -> str:
    return f"{user} {ours}" if user and user.strip() else ours


def include_maps(work_root: Path, build_dir: Path) -> list[str]:
    """Prefix maps for the include dirs under ``work_root`` that are not in normal form.

    Read from the CMake File API reply in ``build_dir`` as written (the raw JSON: a
    ``Path`` would drop the ``.`` components the compiler sees). Each maps ``<dir>/`` to
    the path ccache would give it (normalised, relative to the build dir). Sorted shortest
    first: GCC tries the maps given last first, so a longer dir wins over its prefix.
    """
    root = os.path.normpath(str(work_root))
    found: set[str] = set()
    for f in sorted((build_dir / ".cmake" / "api" / "v1" / "reply").glob("target-*.json")):
        try:  # the configure wrote that folder: no link followed, no FIFO waited on
            target = json.loads(read_regular(f, limit=_REPLY_FILE_MAX))
        except (OSError, ValueError):
            continue
        for group in target.get("compileGroups") or () if isinstance(target, dict) else ():
            for inc in group.get("includes") or () if isinstance(group, dict) else ():
                p = inc.get("path") if isinstance(inc, dict) else None
                if not isinstance(p, str) or not os.path.isabs(p):
                    continue
                norm = os.path.normpath(p)
                if p.rstrip("/") != norm and (norm + os.sep).startswith(root + os.sep):
                    found.add(p.rstrip("/"))
    out = []
    for p in sorted(found, key=lambda x: (len(x), x)):
        rel = os.path.relpath(os.path.normpath(p), build_dir).replace(os.sep, "/")
        out.append(f"-ffile-prefix-map={p}/={rel}/")
    return out


def configured_with(build_dir: Path, maps: list[str]) -> bool:
    """Whether the build dir's CMAKE_C_FLAGS and CMAKE_CXX_FLAGS (those it has: a C-only
    project has no CXX) already hold every one of ``maps``."""
    try:
        text = (build_dir / "CMakeCache.txt").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    lines = [ln for ln in text.splitlines() if ln.startswith(("CMAKE_C_FLAGS:", "CMAKE_CXX_FLAGS:"))]
    return bool(lines) and all(all(m in ln.partition("=")[2].split() for m in maps) for ln in lines)


def with_maps(env: Mapping[str, str], maps: list[str], *, launcher: str | None = None) -> dict[str, str]:
    """``env`` with ``maps`` added to CFLAGS, CXXFLAGS (and CUDAFLAGS, when set); with
    ccache, to the options it leaves out of its hash too (:func:`build_env`)."""
    out = dict(env)
    out["CFLAGS"] = _join(env.get("CFLAGS"), " ".join(maps))
    out["CXXFLAGS"] = _join(env.get("CXXFLAGS"), " ".join(maps))
    xmaps = [f"-Xcompiler={m}" for m in maps] if env.get("CUDAFLAGS") else []
    if xmaps:
        out["CUDAFLAGS"] = _join(env.get("CUDAFLAGS"), " ".join(xmaps))
    if launcher == "ccache" and maps:
        out["CCACHE_IGNOREOPTIONS"] = _join(env.get("CCACHE_IGNOREOPTIONS"), " ".join([*maps, *xmaps]))
    return out
