"""build-info.json: what went into a build and what came out. One typed schema, one
reader (:func:`read_build_info`), one writer (:func:`write_build_info`).

`patchkit build` writes it into the output folder; the smoke stage records its report in
it; `release`, `smoke` and `bench` read it. Every section is a record (patchkit.core.record):
its field types are the file format (schema 1), read and written by the one converter;
``from_json`` checks every field and says which one is wrong, then the checks no type can
say (names that become file names, the commit, the series hash).

Files written by older patchkits still read: a field they lack takes its default, and the
keys newer fields add are left out while they are empty (``compile_cache``,
``rpc_protocol``, ``cpu_variants``, ``upstream.build_number``, a check's
``model``/``kld``/``speed``), so
such a file is written back with the bytes it had.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from patchkit.core.enums import StrEnum
from patchkit.core.errors import ConfigError, FatalError
from patchkit.core.fs import atomic_write_json
from patchkit.core.record import JsonValue, Record, RecordError, decode, meta
from patchkit.spec.problems import BuildInfoUnusable, NoFinishedBuild
from patchkit.spec.rpcproto import ProtoVersion

__all__ = [
    "BUILD_INFO",
    "PROTO",
    "SCHEMA",
    "ApplyResult",
    "ArtifactRecord",
    "BuildInfo",
    "CMakeRecord",
    "CheckResult",
    "CheckStatus",
    "CompileCacheRecord",
    "CpuModelRecord",
    "CpuVariantRecord",
    "CpuVariantsRecord",
    "CudaRecord",
    "KldRecord",
    "PatchRecord",
    "PeEditRecord",
    "Platform",
    "RecipeRef",
    "SmokeReport",
    "SmokeStatus",
    "SpeedRecord",
    "StackSizes",
    "UpstreamRef",
    "read_build_info",
    "write_build_info",
]

BUILD_INFO = "build-info.json"
SCHEMA = 1
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # may become part of a file name
_SHA = re.compile(r"^[0-9a-f]{40}$")
_HEX = re.compile(r"^[0-9a-f]{8,}$")


class ApplyResult(StrEnum):
    APPLIED = "applied"
    ALREADY_PRESENT = "already-present"  # it reverse-applies: upstream has it


class CheckStatus(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"


class SmokeStatus(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    PARTIAL = "partial"  # some checks left out on request (--only/--skip): release refuses it


def _proto_decode(raw: JsonValue) -> ProtoVersion:
    if not isinstance(raw, str):
        raise TypeError(raw)
    return ProtoVersion.parse(raw)


# a ``ProtoVersion | None`` field written as ``"5.1.0"``
PROTO = meta(encode=str, decode=_proto_decode)


def _positive(n: int | None) -> bool:
    return n is None or n > 0


def _seconds(s: float) -> float:
    return round(s, 2)


# -- the sections ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecipeRef(Record):
    name: str
    # relative to the project, or absolute for a recipe outside it
    file: str = dataclasses.field(metadata=meta(absent=""))
    sha256: str  # of the recipe file's bytes


@dataclasses.dataclass(frozen=True, kw_only=True)
class UpstreamRef(Record):
    url: str
    commit: str
    commit_date: str  # ISO 8601, committer date
    subject: str = ""
    ref: str | None = None
    # llama.cpp's build number (`git rev-list --count <commit>`, as its cmake computes it);
    # None: not known (a shallow clone, or a build-info from an older patchkit)
    build_number: int | None = dataclasses.field(default=None, metadata=meta(omit="none", check=_positive))


@dataclasses.dataclass(frozen=True, kw_only=True)
class PatchRecord(Record):
    name: str
    file: str
    sha256: str
    upstream_status: str
    when: str
    experimental: bool
    result: ApplyResult


@dataclasses.dataclass(frozen=True, kw_only=True)
class Platform(Record):
    os: str  # linux | windows | macos
    arch: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class CMakeRecord(Record):
    generator: str
    build_type: str
    defines: Mapping[str, str]
    toolchain: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ArtifactRecord(Record):
    target: str
    type: str  # EXECUTABLE | SHARED_LIBRARY | MODULE_LIBRARY
    path: str  # bin/<file>
    sha256: str
    size: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class StackSizes(Record):
    stack_reserve: int
    stack_commit: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class PeEditRecord(Record):
    file: str  # bin/<name>.exe
    before: StackSizes
    after: StackSizes


@dataclasses.dataclass(frozen=True, kw_only=True)
class KldRecord(Record):
    """One KL-divergence comparison of the smoke's kld check (llama-perplexity on a real
    model): a setup's next-token distributions against a baseline's, and its thresholds."""

    setup: str  # e.g. "tensor split over two RPC servers"
    kind: str  # the comparison kind whose thresholds apply (smoke.kld.THRESHOLDS)
    mean_kld: float
    max_kld: float
    top1_pct: float  # how often both runs have the same most likely token, in %
    max_mean_kld: float  # the thresholds it was judged by
    min_top1_pct: float
    passed: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpeedRecord(Record):
    """One llama-bench test of the smoke's speed check: this build's median tok/s and,
    with a reference build, the reference's, their ratio and the tolerance it was judged by."""

    test: str  # "prompt pp64" / "decode tg16"
    tps: float  # median tokens/s of this build
    samples: int
    reference_tps: float | None = None
    ratio: float | None = None  # tps / reference_tps
    tolerance: float | None = None  # a drop beyond 1 - tolerance fails
    noise: float | None = None  # the larger relative median absolute deviation of both
    passed: bool | None = None  # None: nothing to compare with


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckResult(Record):
    """One smoke check: pass / fail / skip, and why (and what it measured, if anything)."""

    name: str
    status: CheckStatus
    why: str
    seconds: float = dataclasses.field(default=0.0, metadata=meta(encode=_seconds))
    # the measurement keys only when there are measurements: older files stay as they were
    # the real model a measuring check used: "<file> sha256=<hex>"
    model: str = dataclasses.field(default="", metadata=meta(omit="empty"))
    kld: tuple[KldRecord, ...] = dataclasses.field(default=(), metadata=meta(omit="empty"))
    speed: tuple[SpeedRecord, ...] = dataclasses.field(default=(), metadata=meta(omit="empty"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class SmokeReport(Record):
    status: SmokeStatus
    checks: tuple[CheckResult, ...]

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.checks if c.status is CheckStatus.FAIL)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CudaRecord(Record):
    """What a CUDA build asked for, what built it, and which archs are proven in it."""

    archs: tuple[int, ...]
    cmake_architectures: str
    nvcc: str
    # file -> ["sm_75", "sm_86", "compute_86"]
    proven: Mapping[str, tuple[str, ...]] = dataclasses.field(metadata=meta(absent={}))
    ptx: int | None = None
    requested: tuple[str, ...] = ()
    toolkit: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def no_vmm(self) -> bool:
        return bool(self.toolkit.get("no_vmm"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompileCacheRecord(Record):
    """What the compiler cache did in the build (patchkit.builder.compcache); no credentials."""

    launcher: str  # ccache | sccache
    version: str | None = None
    remote: str | None = None  # redacted URL of the remote used, None: local only
    compiles: int = 0  # cacheable compiler calls
    local_hits: int = 0
    remote_hits: int = 0
    misses: int = 0
    remote_errors: int = 0  # calls where the remote failed or timed out (they went local)
    miss_seconds: float | None = None  # mean seconds of one compile (estimated)
    seconds_saved: float | None = None  # hits x miss_seconds; None: nothing to measure by
    fallback: str = ""  # the warning when the remote was down or failed, "" when it was fine
    distributed: int = 0  # compiles that ran on sccache-dist build servers
    dist_scheduler: str | None = None  # redacted URL of the sccache-dist scheduler used


@dataclasses.dataclass(frozen=True, kw_only=True)
class CpuVariantRecord(Record):
    """One CPU backend variant built as a loadable module (spec.cpuvariants)."""

    name: str  # haswell: the target ggml-cpu-haswell
    file: str  # bin/libggml-cpu-haswell.so; its sha256 and size are in ``artifacts``
    features: tuple[str, ...]  # the GGML_<feature>s it was compiled with


@dataclasses.dataclass(frozen=True, kw_only=True)
class CpuModelRecord(Record):
    """Which of the built variants a CPU model loads (ggml's score; None: none runs)."""

    model: str
    qemu: str | None  # qemu-x86_64 -cpu NAME, when qemu has the model
    variant: str | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class CpuVariantsRecord(Record):
    """ggml's CPU backend as loadable variants: what was built, which CPU loads which."""

    variants: tuple[CpuVariantRecord, ...]
    models: tuple[CpuModelRecord, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.variants)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildInfo(Record):
    patchkit_version: str = dataclasses.field(metadata=meta(absent=""))
    recipe: RecipeRef
    # sha256 of recipe + source + configure inputs
    identity: str = dataclasses.field(metadata=meta(absent=""))
    upstream: UpstreamRef
    patches: tuple[PatchRecord, ...]
    series_hash: str
    experimental: bool = dataclasses.field(metadata=meta(absent=False))
    platform: Platform
    cmake: CMakeRecord
    targets: tuple[str, ...] = dataclasses.field(metadata=meta(absent=()))
    tools: Mapping[str, str | None]  # cmake, ninja, c_compiler, cxx_compiler, ccache, nvcc
    cuda: CudaRecord | None = None
    pe_edits: tuple[PeEditRecord, ...] = ()
    smoke: SmokeReport | None = None
    runtime_env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # seconds per stage, as measured (an int in the file stays an int)
    timings: Mapping[str, int | float] = dataclasses.field(default_factory=dict)
    log: str = ""
    build_dir: str = ""
    artifacts: tuple[ArtifactRecord, ...] = dataclasses.field(default=(), metadata=meta(required=True))
    # only when there was a launcher: files of builds without one stay as they were
    compile_cache: CompileCacheRecord | None = dataclasses.field(default=None, metadata=meta(omit="none"))
    # ggml's RPC protocol its clients and server speak (ggml-rpc.h at build time); None:
    # not an RPC build, or built before patchkit recorded it
    rpc_protocol: ProtoVersion | None = dataclasses.field(
        default=None, metadata=meta(omit="none", encode=str, decode=_proto_decode)
    )
    # the CPU backend's loadable variants ([build] cpu_variants); None: one linked backend
    cpu_variants: CpuVariantsRecord | None = dataclasses.field(default=None, metadata=meta(omit="none"))
    schema: int = SCHEMA

    @property
    def in_build(self) -> frozenset[str]:
        """The patches this build has (applied, or already present upstream)."""
        return frozenset(p.name for p in self.patches)

    @property
    def windows(self) -> bool:
        return self.platform.os == "windows"

    @classmethod
    def from_json(
        cls, data: Any, *, where: str = BUILD_INFO, error: type[FatalError] = ConfigError
    ) -> BuildInfo:
        """Check and read the JSON form; ``error`` (one line naming the key) if it is wrong."""
        if not isinstance(data, Mapping):
            raise error(problem=BuildInfoUnusable(found=f"{where} is not a JSON object"))
        if data.get("schema") != SCHEMA:
            found = (
                f"{where}: unknown build-info schema {data.get('schema')!r} "
                f"(this patchkit reads schema {SCHEMA})"
            )
            raise error(problem=BuildInfoUnusable(found=found))
        try:
            info = decode(cls, dict(data))
        except RecordError as e:
            found = f"{where}: {e.key} is missing or not the expected type"
            raise error(problem=BuildInfoUnusable(found=found)) from None
        for key, value in (
            ("platform.os", info.platform.os),
            ("platform.arch", info.platform.arch),
            ("recipe.name", info.recipe.name),
        ):
            if not _SAFE.match(value):
                raise error(f"{where}: {key} {value!r} cannot be part of a file name")
        if not _SHA.match(info.upstream.commit):
            raise error(f"{where}: upstream.commit {info.upstream.commit!r} is not a 40-hex sha")
        if not _HEX.match(info.series_hash):
            raise error(f"{where}: series_hash {info.series_hash!r} is not hex")
        if info.cpu_variants is not None and info.artifacts:
            listed = {a.path for a in info.artifacts}
            for i, v in enumerate(info.cpu_variants.variants):
                if v.file not in listed:
                    found = f"{where}: cpu_variants.variants[{i}].file {v.file!r} is not in artifacts"
                    raise error(problem=BuildInfoUnusable(found=found))
        return info


def read_build_info(out_dir: Path, *, error: type[FatalError] = ConfigError) -> BuildInfo:
    """The build-info.json of a finished build in ``out_dir``.

    ``error`` is the class of the one-line error when there is none or it is unusable:
    ConfigError (exit 2) for commands that take an output folder, ReleaseError (exit 12)
    for `release`, which refuses it.
    """
    path = out_dir / BUILD_INFO
    if not path.is_file():
        raise error(problem=NoFinishedBuild(out_dir=out_dir, exists=out_dir.exists()))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise error(problem=BuildInfoUnusable(found=f"{path} is not valid JSON ({e})")) from None
    return BuildInfo.from_json(data, where=str(path), error=error)


def write_build_info(out_dir: Path, info: BuildInfo) -> None:
    """Write ``out_dir/build-info.json`` atomically."""
    atomic_write_json(out_dir / BUILD_INFO, info.to_json())
