"""The release manifests: ``manifest.json`` inside each archive (and its copy beside it).

Two kinds, one reader (:func:`parse_manifest` / :func:`load_manifest`) and one writer
(:func:`dump_manifest`, the canonical serialisation of patchkit.core.record):

- :class:`ReleaseManifest`: a build's archive (``patchkit release``): what went into the
  build (from its build-info, host paths scrubbed), the files with their sha256, size and
  mode, the smoke verdict, waivers, the sources it carries, the imports the target must
  provide and the CUDA runtime archive it needs;
- :class:`RuntimeManifest`: the CUDA runtime archive beside CUDA builds (``"kind":
  "cuda-runtime"``): NVIDIA's wheels, the files taken from them.

Manifests written by older patchkits still read: the keys added since (``rpc_protocol``,
``reproducible``, ``source``, ``imports``, ``runtime``, ``upstream.build_number``,
``source.toolchain_files``, ``cpu_variants``, ``floor``) take their defaults when absent.
Keys a manifest has but these records do not are ignored (verify compares the bytes and
the copy beside it).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from patchkit.core.record import Record, canonical_json, decode, meta
from patchkit.spec.buildinfo import (
    PROTO,
    ApplyResult,
    CheckStatus,
    CMakeRecord,
    CpuVariantsRecord,
    PeEditRecord,
    Platform,
    RecipeRef,
    SmokeStatus,
)
from patchkit.spec.rpcproto import ProtoVersion

__all__ = [
    "MANIFEST_SCHEMA",
    "RUNTIME_KIND",
    "CheckSummary",
    "CudaSummary",
    "FileEntry",
    "FileFloor",
    "FloorSummary",
    "ImportSummary",
    "Manifest",
    "ManifestPatch",
    "ManifestUpstream",
    "ReleaseManifest",
    "Reproducibility",
    "RuntimeCuda",
    "RuntimeFile",
    "RuntimeManifest",
    "RuntimeRef",
    "SmokeSummary",
    "SourceRecord",
    "WheelRecord",
    "dump_manifest",
    "load_manifest",
    "parse_manifest",
]

MANIFEST_SCHEMA = 1
RUNTIME_KIND = "cuda-runtime"  # the "kind" of a CUDA runtime archive's manifest


def _positive(n: int | None) -> bool:
    return n is None or n > 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class ManifestUpstream(Record):
    url: str
    commit: str
    commit_date: str
    ref: str | None = None
    # llama.cpp's build number; left out when not known (older build-infos)
    build_number: int | None = dataclasses.field(default=None, metadata=meta(omit="none", check=_positive))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ManifestPatch(Record):
    name: str
    file: str
    sha256: str
    status: str  # Upstream-Status
    when: str
    experimental: bool
    result: ApplyResult


@dataclasses.dataclass(frozen=True, kw_only=True)
class CudaSummary(Record):
    """A CUDA build's archs (the variant name follows from them), nvcc and the proof."""

    archs: tuple[int, ...]
    cmake_architectures: str
    nvcc: str
    proven: Mapping[str, tuple[str, ...]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckSummary(Record):
    name: str
    status: CheckStatus
    why: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class SmokeSummary(Record):
    """Smoke results without their timings, so equal builds give equal manifests."""

    status: SmokeStatus
    checks: tuple[CheckSummary, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Reproducibility(Record):
    """Whether a rebuild in another folder gives the release's bytes, and if not, why."""

    launcher: str
    any_folder: bool
    why: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class FileEntry(Record):
    """One file of an archive: ``path`` below its top folder, ``mode`` in octal ("755")."""

    path: str
    sha256: str
    size: int
    mode: str
    type: str  # EXECUTABLE | SHARED_LIBRARY | MODULE_LIBRARY | LICENSE | SOURCE | FILE


@dataclasses.dataclass(frozen=True, kw_only=True)
class SourceRecord(Record):
    """The project files an archive carries under ``source/`` (release.sources)."""

    recipe: str
    series: str
    patches: tuple[str, ...]
    toolchain: str | None = None
    toolchain_files: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImportSummary(Record):
    """What the machine that runs the files must provide (release.imports)."""

    system: tuple[str, ...]
    driver: tuple[str, ...]
    # system libraries allowed beyond the documented set (--allow-system, the recipe's)
    allowed_extra: tuple[str, ...] = dataclasses.field(default=(), metadata=meta(omit="empty"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class FileFloor(Record):
    """One ELF file's C library floor: the newest symbol version it needs of each family
    (``GLIBC``, ``GLIBCXX``, ``CXXABI``, ``GCC``) and the system libraries it imports."""

    path: str
    versions: Mapping[str, str]  # {"GLIBC": "2.30", "GLIBCXX": "3.4.26", ...}
    system: tuple[str, ...]  # NEEDED libraries that are not files of the archive


@dataclasses.dataclass(frozen=True, kw_only=True)
class FloorSummary(Record):
    """The archive's C library floor (release.floor): the newest symbol version of each
    family over all its ELF files, the floor its recipe states (``[release] glibc`` ...;
    empty: none stated) and each file's own."""

    newest: Mapping[str, str]
    stated: Mapping[str, str]
    system: tuple[str, ...]  # the system libraries any of its files imports
    files: tuple[FileFloor, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeRef(Record):
    """The CUDA runtime archive a build's archive needs beside it."""

    archive: str
    sha256: str
    cuda: str  # X.Y
    files: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReleaseManifest(Record):
    name: str  # the archive's top folder
    archive: str  # its file name
    variant: str
    released_by: str  # "patchkit <version>"
    patchkit_version: str | None  # the patchkit that built it
    recipe: RecipeRef
    identity: str | None
    upstream: ManifestUpstream
    patches: tuple[ManifestPatch, ...]
    series_hash: str
    experimental: bool
    platform: Platform
    cmake: CMakeRecord
    targets: tuple[str, ...]
    tools: Mapping[str, str | None]
    cuda: CudaSummary | None
    pe_edits: tuple[PeEditRecord, ...]
    smoke: SmokeSummary | None  # None: the smoke stage did not run
    waivers: tuple[str, ...]  # "stale", "unsmoked"
    source_date_epoch: int  # every member's mtime
    mtime_from: str  # "SOURCE_DATE_EPOCH" | "upstream.commit_date"
    files: tuple[FileEntry, ...]
    # the ggml RPC protocol its clients and server speak (None: not recorded)
    rpc_protocol: ProtoVersion | None = dataclasses.field(default=None, metadata=PROTO)
    reproducible: Reproducibility | None = None
    source: SourceRecord | None = None  # None: it carries no sources (cannot be rebuilt)
    imports: ImportSummary | None = None
    runtime: RuntimeRef | None = None
    # the C library floor (None: an older patchkit's manifest, or no ELF files)
    floor: FloorSummary | None = dataclasses.field(default=None, metadata=meta(omit="none"))
    # the CPU backend's loadable variants and the CPU model table, from build-info
    # (absent: one linked CPU backend, or a manifest older than them)
    cpu_variants: CpuVariantsRecord | None = dataclasses.field(default=None, metadata=meta(omit="none"))
    schema: int = MANIFEST_SCHEMA


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeCuda(Record):
    version: str  # X.Y
    major: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class WheelRecord(Record):
    distribution: str
    version: str
    file: str
    sha256: str
    size: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeFile(Record):
    """One file of the runtime archive and the wheel member it was taken from."""

    path: str
    sha256: str
    size: int
    mode: str
    type: str  # SHARED_LIBRARY | LICENSE
    wheel: str
    member: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeManifest(Record):
    name: str
    archive: str
    variant: str  # cuda<X.Y>
    released_by: str
    platform: Platform
    cuda: RuntimeCuda
    wheels: tuple[WheelRecord, ...]
    imports: ImportSummary
    source_date_epoch: int
    mtime_from: str  # "SOURCE_DATE_EPOCH" | "wheels"
    files: tuple[RuntimeFile, ...]
    waivers: tuple[str, ...] = ()
    kind: str = RUNTIME_KIND
    schema: int = MANIFEST_SCHEMA


Manifest = ReleaseManifest | RuntimeManifest


def parse_manifest(data: Any) -> Manifest:
    """The record of a manifest's JSON data (its ``kind`` says which);
    patchkit.core.record.RecordError naming the key that does not fit."""
    if isinstance(data, dict) and data.get("kind") == RUNTIME_KIND:
        return decode(RuntimeManifest, data)
    return decode(ReleaseManifest, data)


def load_manifest(data: bytes) -> Manifest:
    """A manifest from its bytes; ValueError if they are not JSON (RecordError, a
    ValueError too, if it does not fit)."""
    try:
        obj = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError("nested too deeply") from None
    return parse_manifest(obj)


def dump_manifest(manifest: Manifest | Mapping[str, object]) -> bytes:
    """The one canonical serialisation (verify re-serialises and compares)."""
    return canonical_json(manifest)
