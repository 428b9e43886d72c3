"""build-info.json (written by `patchkit build`) and the release names derived from it.

The archive name is ``llama-<upstream sha7>-pk<series hash 8>-<os>-<arch>-<variant>``;
the variant is ``cuda<nvcc major>-sm<archs>`` (e.g. ``cuda12-sm60-61-75-86``) for CUDA
builds and the recipe name (e.g. ``cpu-rpc``) otherwise. The manifest carries the same
fields, so verify recomputes the name from a manifest with the same functions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from patchkit.core.errors import ReleaseError

__all__ = ["BUILD_INFO_SCHEMA", "archive_name", "load_build_info", "variant_name"]

BUILD_INFO_SCHEMA = 1
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _need(info: Mapping[str, Any], dotted: str, typ: type | tuple[type, ...],
          *, optional: bool = False) -> Any:
    value: Any = info
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None and optional:
        return None
    if not isinstance(value, typ) or isinstance(value, bool) and typ in (int, str):
        raise ReleaseError(f"build-info.json: {dotted} is missing or not the expected type",
                           hint="rebuild with `patchkit build <recipe>`")
    return value


def load_build_info(build_dir: Path) -> dict[str, Any]:
    """build-info.json of a finished build; ReleaseError when there is no usable build."""
    path = build_dir / "build-info.json"
    if not path.is_file():
        what = "does not exist" if not build_dir.exists() else "has no build-info.json"
        raise ReleaseError(f"no finished build: {build_dir} {what}",
                           hint="run `patchkit build <recipe>` first")
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ReleaseError(f"{path}: not valid JSON ({e})",
                           hint="rebuild with `patchkit build <recipe>`") from None
    if not isinstance(info, dict) or info.get("schema") != BUILD_INFO_SCHEMA:
        raise ReleaseError(f"{path}: unknown build-info schema {info.get('schema') if isinstance(info, dict) else None!r}"
                           " (this patchkit reads schema 1)")
    for key, typ in (("recipe.name", str), ("recipe.sha256", str), ("upstream.url", str),
                     ("upstream.commit", str), ("upstream.commit_date", str), ("patches", list),
                     ("series_hash", str), ("platform.os", str), ("platform.arch", str),
                     ("cmake", dict), ("artifacts", list), ("tools", dict)):
        _need(info, key, typ)
    for key in ("platform.os", "platform.arch", "recipe.name"):
        if not _SAFE.match(_need(info, key, str)):
            raise ReleaseError(f"build-info.json: {key} {_need(info, key, str)!r} cannot be part of a file name")
    if not re.fullmatch(r"[0-9a-f]{40}", info["upstream"]["commit"]):
        raise ReleaseError(f"build-info.json: upstream.commit {info['upstream']['commit']!r} is not a 40-hex sha")
    if not re.fullmatch(r"[0-9a-f]{8,}", info["series_hash"]):
        raise ReleaseError(f"build-info.json: series_hash {info['series_hash']!r} is not hex")
    return info


def _cuda_major(cuda: Mapping[str, Any], tools: Mapping[str, Any]) -> str:
    version = str(cuda.get("nvcc") or tools.get("nvcc") or "")
    m = re.search(r"(\d+)\.\d+", version) or re.search(r"(\d+)", version)
    if not m:
        raise ReleaseError(f"build-info.json: cannot tell the CUDA version from nvcc {version!r}")
    return m.group(1)


def _arch_labels(archs: list[Any]) -> list[str]:
    labels: dict[str, int] = {}
    for a in archs:
        m = re.match(r"^(?:sm_|compute_)?(\d+)([a-z]?)", str(a))
        if not m:
            raise ReleaseError(f"build-info.json: cuda.archs entry {a!r} is not a CUDA arch")
        labels[m.group(1) + m.group(2)] = int(m.group(1))
    return sorted(labels, key=lambda k: (labels[k], k))


def variant_name(info: Mapping[str, Any]) -> str:
    """``cuda12-sm60-61-75-86`` for CUDA builds, else the recipe name (``cpu-rpc``)."""
    cuda = info.get("cuda")
    if cuda:
        archs = _arch_labels(list(cuda.get("archs") or []))
        if not archs:
            raise ReleaseError("build-info.json: cuda.archs is empty")
        return f"cuda{_cuda_major(cuda, info['tools'])}-sm" + "-".join(archs)
    return str(info["recipe"]["name"])


def archive_name(info: Mapping[str, Any]) -> tuple[str, str]:
    """(top folder / stem, suffix): ``llama-<sha7>-pk<series8>-<os>-<arch>-<variant>``."""
    plat = info["platform"]
    stem = (f"llama-{info['upstream']['commit'][:7]}-pk{info['series_hash'][:8]}"
            f"-{plat['os']}-{plat['arch']}-{variant_name(info)}")
    return stem, ".zip" if plat["os"] == "windows" else ".tar.gz"
