"""Release names, from a build-info's or a manifest's fields (verify recomputes them).

The archive name is ``llama-<upstream sha7>-pk<series hash 8>-<os>-<arch>-<variant>``;
the variant is ``cuda<nvcc major>-sm<archs>`` (e.g. ``cuda12-sm60-61-75-86``) for CUDA
builds and the recipe name (e.g. ``cpu-rpc``) otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from patchkit.core.errors import ReleaseError

__all__ = ["archive_name", "variant_name"]


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
