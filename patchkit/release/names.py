"""Release names, from a build-info's or a manifest's fields (verify recomputes them).

The archive name is ``llama-b<build>-<upstream sha7>-pk<series hash 8>-<os>-<arch>-<variant>``;
``b<build>`` is llama.cpp's build number as its own binaries print it (``version: 10309
(82bb48500)`` -> ``b10309``): the number of commits reachable from the upstream commit,
which is how upstream's cmake computes it. A build-info or manifest without it (older
patchkit) gives the name without that part. The variant is ``cuda<nvcc major>-sm<archs>``
(e.g. ``cuda12-sm60-61-75-86``) for CUDA builds and the recipe name (e.g. ``cpu-rpc``)
otherwise. Both come from a :class:`BuildInfo` (at release) or the
:class:`ReleaseManifest` it gave (at verify); a CUDA runtime archive's name is
:func:`runtime_name`.
"""

from __future__ import annotations

import re

from patchkit.core.errors import ReleaseError
from patchkit.spec.buildinfo import BuildInfo
from patchkit.spec.manifest import RUNTIME_KIND, ReleaseManifest

__all__ = [
    "RUNTIME_KIND",
    "archive_name",
    "build_number",
    "parse_build_number",
    "runtime_name",
    "variant_name",
]

# `version: 10309 (82bb48500)` (to mid 2026) and `0.2.0-dev (build 10566, commit bb4caa754)`
_VERSION_FORMATS = (
    re.compile(r"^version:\s*(?P<n>\d+)\s*\((?P<c>[0-9a-f]{4,40})\)", re.MULTILINE),
    re.compile(r"\(build\s+(?P<n>\d+),\s*commit\s+(?P<c>[0-9a-f]{4,40})\)"),
)
_MAX_BUILD = 10**9

# a build's own record (at release) or the manifest it wrote (at verify): the name follows
# from the same fields of either
Named = BuildInfo | ReleaseManifest


def _cuda_major(nvcc: str) -> str:
    m = re.search(r"(\d+)\.\d+", nvcc) or re.search(r"(\d+)", nvcc)
    if not m:
        raise ReleaseError(f"build-info.json: cannot tell the CUDA version from nvcc {nvcc!r}")
    return m.group(1)


def runtime_name(os_name: str, arch: str, cuda_version: str) -> tuple[str, str]:
    """The CUDA runtime archive shared by a folder's CUDA builds (llama.cpp calls its own
    ``cudart-llama-bin-win-cuda-12.4-x64.zip``): ``cudart-llama-<os>-<arch>-cuda<X.Y>``."""
    if not re.fullmatch(r"\d{1,3}\.\d{1,3}", cuda_version):
        raise ReleaseError(f"{cuda_version!r} is not a CUDA version (X.Y)")
    return (
        f"cudart-llama-{os_name}-{arch}-cuda{cuda_version}",
        ".zip" if os_name == "windows" else ".tar.gz",
    )


def variant_name(info: Named) -> str:
    """``cuda12-sm60-61-75-86`` for CUDA builds (the archs sorted, each once), else the
    recipe name (``cpu-rpc``)."""
    if info.cuda is None:
        return info.recipe.name
    if not info.cuda.archs:
        raise ReleaseError("build-info.json: cuda.archs is empty")
    archs = sorted(set(info.cuda.archs))
    nvcc = info.cuda.nvcc or info.tools.get("nvcc") or ""
    return f"cuda{_cuda_major(nvcc)}-sm" + "-".join(str(a) for a in archs)


def parse_build_number(text: str) -> tuple[int, str] | None:
    """(build number, commit prefix) from a llama.cpp binary's ``--version`` output, in
    either format upstream has printed; None when neither is there."""
    for pattern in _VERSION_FORMATS:
        m = pattern.search(text)
        if m and len(m.group("n")) <= 9:
            return int(m.group("n")), m.group("c")
    return None


def build_number(info: Named) -> int | None:
    """``upstream.build_number`` of a build-info or manifest; None when not recorded."""
    raw = info.upstream.build_number
    if raw is not None and not 0 < raw < _MAX_BUILD:
        raise ReleaseError(f"upstream.build_number {raw!r} is not a build number")
    return raw


def archive_name(info: Named) -> tuple[str, str]:
    """(top folder / stem, suffix):
    ``llama-b<build>-<sha7>-pk<series8>-<os>-<arch>-<variant>``."""
    plat = info.platform
    number = build_number(info)
    build = f"b{number}-" if number is not None else ""
    stem = (
        f"llama-{build}{info.upstream.commit[:7]}-pk{info.series_hash[:8]}"
        f"-{plat.os}-{plat.arch}-{variant_name(info)}"
    )
    return stem, ".zip" if plat.os == "windows" else ".tar.gz"
