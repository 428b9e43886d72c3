"""build-info.json: what went into a build and what came out. One typed schema, one
reader (:func:`read_build_info`), one writer (:func:`write_build_info`).

`patchkit build` writes it into the output folder; the smoke stage records its report in
it; `release`, `smoke` and `bench` read it. The JSON form (``to_json``) is the file format
(schema 1); ``from_json`` checks every field it needs and says which one is wrong.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from patchkit.core.enums import StrEnum
from patchkit.core.errors import ConfigError, FatalError
from patchkit.core.fs import atomic_write_json
from patchkit.spec.rpcproto import ProtoVersion

__all__ = [
    "BUILD_INFO",
    "SCHEMA",
    "ApplyResult",
    "ArtifactRecord",
    "BuildInfo",
    "CMakeRecord",
    "CheckResult",
    "CheckStatus",
    "CompileCacheRecord",
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
_REBUILD = "rebuild with `patchkit build <recipe>`"


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


class _BadField(Exception):
    def __init__(self, dotted: str) -> None:
        super().__init__(dotted)
        self.dotted = dotted


E = TypeVar("E", bound=enum.Enum)


class _Obj:
    """Typed access to one JSON object, naming the dotted key of whatever is wrong."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, Mapping):
            raise _BadField(where or "(whole)")
        self.data, self.where = data, where

    def _key(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(
        self, key: str, typ: type | tuple[type, ...], *, optional: bool = False, default: Any = None
    ) -> Any:
        value = self.data.get(key)
        if value is None and optional:
            return default
        types = typ if isinstance(typ, tuple) else (typ,)
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise _BadField(self._key(key))
        return value

    def text(self, key: str, **kw: Any) -> Any:
        return self.get(key, str, **kw)

    def obj(self, key: str, *, optional: bool = False) -> _Obj | None:
        value = self.data.get(key)
        if value is None and optional:
            return None
        return _Obj(value, self._key(key))

    def objs(self, key: str) -> list[_Obj]:
        return [_Obj(v, f"{self._key(key)}[{i}]") for i, v in enumerate(self.get(key, list))]

    def strs(self, key: str, *, optional: bool = False) -> tuple[str, ...]:
        items = self.get(key, list, optional=optional, default=[])
        if not all(isinstance(s, str) for s in items):
            raise _BadField(self._key(key))
        return tuple(items)

    def str_map(
        self, key: str, *, optional: bool = False, values: type | tuple[type, ...] = str
    ) -> dict[str, Any]:
        m = self.get(key, dict, optional=optional, default={})
        types = values if isinstance(values, tuple) else (values,)
        for k, v in m.items():
            if (
                not isinstance(k, str)
                or (v is not None and not isinstance(v, types))
                or (v is None and type(None) not in types)
            ):
                raise _BadField(f"{self._key(key)}.{k}")
        return dict(m)

    def enum(self, key: str, cls: type[E]) -> E:
        try:
            return cls(self.text(key))
        except ValueError:
            raise _BadField(self._key(key)) from None


# -- the sections ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecipeRef:
    name: str
    file: str  # relative to the project, or absolute for a recipe outside it
    sha256: str  # of the recipe file's bytes

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "file": self.file, "sha256": self.sha256}

    @classmethod
    def from_obj(cls, o: _Obj) -> RecipeRef:
        return cls(
            name=o.text("name"), file=o.text("file", optional=True, default=""), sha256=o.text("sha256")
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class UpstreamRef:
    url: str
    commit: str
    commit_date: str  # ISO 8601, committer date
    subject: str = ""
    ref: str | None = None
    # llama.cpp's build number (`git rev-list --count <commit>`, as its cmake computes it);
    # None: not known (a shallow clone, or a build-info from an older patchkit)
    build_number: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "url": self.url,
            "commit": self.commit,
            "commit_date": self.commit_date,
            "subject": self.subject,
            "ref": self.ref,
        }
        if self.build_number is not None:
            out["build_number"] = self.build_number
        return out

    @classmethod
    def from_obj(cls, o: _Obj) -> UpstreamRef:
        number = o.get("build_number", int, optional=True)
        if number is not None and number <= 0:
            raise _BadField(o._key("build_number"))
        return cls(
            url=o.text("url"),
            commit=o.text("commit"),
            commit_date=o.text("commit_date"),
            subject=o.text("subject", optional=True, default=""),
            ref=o.text("ref", optional=True),
            build_number=number,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class PatchRecord:
    name: str
    file: str
    sha256: str
    upstream_status: str
    when: str
    experimental: bool
    result: ApplyResult

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "file": self.file,
            "sha256": self.sha256,
            "upstream_status": self.upstream_status,
            "when": self.when,
            "experimental": self.experimental,
            "result": self.result.value,
        }

    @classmethod
    def from_obj(cls, o: _Obj) -> PatchRecord:
        return cls(
            name=o.text("name"),
            file=o.text("file"),
            sha256=o.text("sha256"),
            upstream_status=o.text("upstream_status"),
            when=o.text("when"),
            experimental=o.get("experimental", bool),
            result=o.enum("result", ApplyResult),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Platform:
    os: str  # linux | windows | macos
    arch: str

    def to_json(self) -> dict[str, Any]:
        return {"os": self.os, "arch": self.arch}

    @classmethod
    def from_obj(cls, o: _Obj) -> Platform:
        return cls(os=o.text("os"), arch=o.text("arch"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class CMakeRecord:
    generator: str
    build_type: str
    defines: Mapping[str, str]
    toolchain: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "generator": self.generator,
            "build_type": self.build_type,
            "defines": dict(self.defines),
            "toolchain": self.toolchain,
        }

    @classmethod
    def from_obj(cls, o: _Obj) -> CMakeRecord:
        return cls(
            generator=o.text("generator"),
            build_type=o.text("build_type"),
            defines=o.str_map("defines"),
            toolchain=o.text("toolchain", optional=True),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ArtifactRecord:
    target: str
    type: str  # EXECUTABLE | SHARED_LIBRARY | MODULE_LIBRARY
    path: str  # bin/<file>
    sha256: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "type": self.type,
            "path": self.path,
            "sha256": self.sha256,
            "size": self.size,
        }

    @classmethod
    def from_obj(cls, o: _Obj) -> ArtifactRecord:
        return cls(
            target=o.text("target"),
            type=o.text("type"),
            path=o.text("path"),
            sha256=o.text("sha256"),
            size=o.get("size", int),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class StackSizes:
    stack_reserve: int
    stack_commit: int

    def to_json(self) -> dict[str, Any]:
        return {"stack_reserve": self.stack_reserve, "stack_commit": self.stack_commit}

    @classmethod
    def from_obj(cls, o: _Obj) -> StackSizes:
        return cls(stack_reserve=o.get("stack_reserve", int), stack_commit=o.get("stack_commit", int))


@dataclasses.dataclass(frozen=True, kw_only=True)
class PeEditRecord:
    file: str  # bin/<name>.exe
    before: StackSizes
    after: StackSizes

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "before": self.before.to_json(), "after": self.after.to_json()}

    @classmethod
    def from_obj(cls, o: _Obj) -> PeEditRecord:
        before, after = o.obj("before"), o.obj("after")
        assert before is not None and after is not None
        return cls(file=o.text("file"), before=StackSizes.from_obj(before), after=StackSizes.from_obj(after))


@dataclasses.dataclass(frozen=True, kw_only=True)
class KldRecord:
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

    def to_json(self) -> dict[str, Any]:
        return {
            "setup": self.setup,
            "kind": self.kind,
            "mean_kld": self.mean_kld,
            "max_kld": self.max_kld,
            "top1_pct": self.top1_pct,
            "max_mean_kld": self.max_mean_kld,
            "min_top1_pct": self.min_top1_pct,
            "passed": self.passed,
        }

    @classmethod
    def from_obj(cls, o: _Obj) -> KldRecord:
        def num(key: str) -> float:
            return float(o.get(key, (int, float)))

        return cls(
            setup=o.text("setup"),
            kind=o.text("kind"),
            mean_kld=num("mean_kld"),
            max_kld=num("max_kld"),
            top1_pct=num("top1_pct"),
            max_mean_kld=num("max_mean_kld"),
            min_top1_pct=num("min_top1_pct"),
            passed=o.get("passed", bool),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpeedRecord:
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

    def to_json(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "tps": self.tps,
            "samples": self.samples,
            "reference_tps": self.reference_tps,
            "ratio": self.ratio,
            "tolerance": self.tolerance,
            "noise": self.noise,
            "passed": self.passed,
        }

    @classmethod
    def from_obj(cls, o: _Obj) -> SpeedRecord:
        def opt(key: str) -> float | None:
            v = o.get(key, (int, float), optional=True)
            return None if v is None else float(v)

        return cls(
            test=o.text("test"),
            tps=float(o.get("tps", (int, float))),
            samples=o.get("samples", int),
            reference_tps=opt("reference_tps"),
            ratio=opt("ratio"),
            tolerance=opt("tolerance"),
            noise=opt("noise"),
            passed=o.get("passed", bool, optional=True),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckResult:
    """One smoke check: pass / fail / skip, and why (and what it measured, if anything)."""

    name: str
    status: CheckStatus
    why: str
    seconds: float = 0.0
    model: str = ""  # the real model a measuring check used: "<file> sha256=<hex>"
    kld: tuple[KldRecord, ...] = ()
    speed: tuple[SpeedRecord, ...] = ()

    def to_json(self) -> dict[str, Any]:
        # the measurement keys only when there are measurements: older files stay as they were
        return {
            "name": self.name,
            "status": self.status.value,
            "why": self.why,
            "seconds": round(self.seconds, 2),
            **({"model": self.model} if self.model else {}),
            **({"kld": [k.to_json() for k in self.kld]} if self.kld else {}),
            **({"speed": [s.to_json() for s in self.speed]} if self.speed else {}),
        }

    @classmethod
    def from_obj(cls, o: _Obj) -> CheckResult:
        return cls(
            name=o.text("name"),
            status=o.enum("status", CheckStatus),
            why=o.text("why"),
            seconds=float(o.get("seconds", (int, float), optional=True, default=0.0)),
            model=o.text("model", optional=True, default=""),
            kld=tuple(KldRecord.from_obj(k) for k in o.objs("kld")) if o.data.get("kld") is not None else (),
            speed=tuple(SpeedRecord.from_obj(s) for s in o.objs("speed"))
            if o.data.get("speed") is not None
            else (),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class SmokeReport:
    status: SmokeStatus
    checks: tuple[CheckResult, ...]

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.checks if c.status is CheckStatus.FAIL)

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "checks": [c.to_json() for c in self.checks]}

    @classmethod
    def from_obj(cls, o: _Obj) -> SmokeReport:
        return cls(
            status=o.enum("status", SmokeStatus),
            checks=tuple(CheckResult.from_obj(c) for c in o.objs("checks")),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class CudaRecord:
    """What a CUDA build asked for, what built it, and which archs are proven in it."""

    archs: tuple[int, ...]
    cmake_architectures: str
    nvcc: str
    proven: Mapping[str, tuple[str, ...]]  # file -> ["sm_75", "sm_86", "compute_86"]
    ptx: int | None = None
    requested: tuple[str, ...] = ()
    toolkit: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def no_vmm(self) -> bool:
        return bool(self.toolkit.get("no_vmm"))

    def to_json(self) -> dict[str, Any]:
        return {
            "archs": list(self.archs),
            "ptx": self.ptx,
            "requested": list(self.requested),
            "cmake_architectures": self.cmake_architectures,
            "nvcc": self.nvcc,
            "proven": {k: list(v) for k, v in self.proven.items()},
            "toolkit": dict(self.toolkit),
            "notes": list(self.notes),
        }

    @classmethod
    def from_obj(cls, o: _Obj) -> CudaRecord:
        archs = o.get("archs", list)
        if not all(isinstance(a, int) and not isinstance(a, bool) for a in archs):
            raise _BadField(o._key("archs"))
        proven = {k: tuple(v) for k, v in o.str_map("proven", optional=True, values=list).items()}
        return cls(
            archs=tuple(archs),
            cmake_architectures=o.text("cmake_architectures"),
            nvcc=o.text("nvcc"),
            proven=proven,
            ptx=o.get("ptx", int, optional=True),
            requested=o.strs("requested", optional=True),
            toolkit=o.get("toolkit", dict, optional=True, default={}),
            notes=o.strs("notes", optional=True),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompileCacheRecord:
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

    def to_json(self) -> dict[str, Any]:
        return {
            "launcher": self.launcher,
            "version": self.version,
            "remote": self.remote,
            "compiles": self.compiles,
            "local_hits": self.local_hits,
            "remote_hits": self.remote_hits,
            "misses": self.misses,
            "remote_errors": self.remote_errors,
            "miss_seconds": self.miss_seconds,
            "seconds_saved": self.seconds_saved,
            "fallback": self.fallback,
            "distributed": self.distributed,
            "dist_scheduler": self.dist_scheduler,
        }

    @classmethod
    def from_obj(cls, o: _Obj) -> CompileCacheRecord:
        def count(key: str) -> int:
            return int(o.get(key, int, optional=True, default=0))

        def secs(key: str) -> float | None:
            v = o.get(key, (int, float), optional=True)
            return None if v is None else float(v)

        return cls(
            launcher=o.text("launcher"),
            version=o.text("version", optional=True),
            remote=o.text("remote", optional=True),
            compiles=count("compiles"),
            local_hits=count("local_hits"),
            remote_hits=count("remote_hits"),
            misses=count("misses"),
            remote_errors=count("remote_errors"),
            miss_seconds=secs("miss_seconds"),
            seconds_saved=secs("seconds_saved"),
            fallback=o.text("fallback", optional=True, default=""),
            distributed=count("distributed"),
            dist_scheduler=o.text("dist_scheduler", optional=True),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildInfo:
    patchkit_version: str
    recipe: RecipeRef
    identity: str  # sha256 of recipe + source + configure inputs
    upstream: UpstreamRef
    patches: tuple[PatchRecord, ...]
    series_hash: str
    experimental: bool
    platform: Platform
    cmake: CMakeRecord
    targets: tuple[str, ...]
    tools: Mapping[str, str | None]  # cmake, ninja, c_compiler, cxx_compiler, ccache, nvcc
    cuda: CudaRecord | None = None
    pe_edits: tuple[PeEditRecord, ...] = ()
    smoke: SmokeReport | None = None
    runtime_env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    timings: Mapping[str, float] = dataclasses.field(default_factory=dict)
    log: str = ""
    build_dir: str = ""
    artifacts: tuple[ArtifactRecord, ...] = ()
    compile_cache: CompileCacheRecord | None = None  # optional in the file (older builds)
    # ggml's RPC protocol its clients and server speak (ggml-rpc.h at build time); None:
    # not an RPC build, or built before patchkit recorded it
    rpc_protocol: ProtoVersion | None = None
    schema: int = SCHEMA

    @property
    def in_build(self) -> frozenset[str]:
        """The patches this build has (applied, or already present upstream)."""
        return frozenset(p.name for p in self.patches)

    @property
    def windows(self) -> bool:
        return self.platform.os == "windows"

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "patchkit_version": self.patchkit_version,
            "recipe": self.recipe.to_json(),
            "identity": self.identity,
            "upstream": self.upstream.to_json(),
            "patches": [p.to_json() for p in self.patches],
            "series_hash": self.series_hash,
            "experimental": self.experimental,
            "platform": self.platform.to_json(),
            "cmake": self.cmake.to_json(),
            "targets": list(self.targets),
            "tools": dict(self.tools),
            "cuda": self.cuda.to_json() if self.cuda else None,
            "pe_edits": [e.to_json() for e in self.pe_edits],
            "smoke": self.smoke.to_json() if self.smoke else None,
            "runtime_env": dict(self.runtime_env),
            "timings": dict(self.timings),
            "log": self.log,
            "build_dir": self.build_dir,
            "artifacts": [a.to_json() for a in self.artifacts],
            # only when there was a launcher: files of builds without one stay as they were
            **({"compile_cache": self.compile_cache.to_json()} if self.compile_cache else {}),
            **({"rpc_protocol": str(self.rpc_protocol)} if self.rpc_protocol else {}),
        }

    @classmethod
    def from_json(
        cls, data: Any, *, where: str = BUILD_INFO, error: type[FatalError] = ConfigError
    ) -> BuildInfo:
        """Check and read the JSON form; ``error`` (one line naming the key) if it is wrong."""
        if not isinstance(data, Mapping):
            raise error(f"{where} is not a JSON object", hint=_REBUILD)
        if data.get("schema") != SCHEMA:
            raise error(
                f"{where}: unknown build-info schema {data.get('schema')!r} "
                f"(this patchkit reads schema {SCHEMA})",
                hint=_REBUILD,
            )
        try:
            info = cls._parse(_Obj(data, ""))
        except _BadField as e:
            raise error(f"{where}: {e.dotted} is missing or not the expected type", hint=_REBUILD) from None
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
        return info

    @classmethod
    def _parse(cls, o: _Obj) -> BuildInfo:
        def sub(key: str) -> _Obj:
            found = o.obj(key)
            assert found is not None
            return found

        cuda, smoke = o.obj("cuda", optional=True), o.obj("smoke", optional=True)
        ccache = o.obj("compile_cache", optional=True)
        return cls(
            patchkit_version=o.text("patchkit_version", optional=True, default=""),
            recipe=RecipeRef.from_obj(sub("recipe")),
            identity=o.text("identity", optional=True, default=""),
            upstream=UpstreamRef.from_obj(sub("upstream")),
            patches=tuple(PatchRecord.from_obj(p) for p in o.objs("patches")),
            series_hash=o.text("series_hash"),
            experimental=o.get("experimental", bool, optional=True, default=False),
            platform=Platform.from_obj(sub("platform")),
            cmake=CMakeRecord.from_obj(sub("cmake")),
            targets=o.strs("targets", optional=True),
            tools=o.str_map("tools", values=(str, type(None))),
            cuda=CudaRecord.from_obj(cuda) if cuda is not None else None,
            pe_edits=tuple(PeEditRecord.from_obj(e) for e in o.objs("pe_edits"))
            if o.data.get("pe_edits") is not None
            else (),
            smoke=SmokeReport.from_obj(smoke) if smoke is not None else None,
            runtime_env=o.str_map("runtime_env", optional=True),
            timings=o.str_map("timings", optional=True, values=(int, float)),
            log=o.text("log", optional=True, default=""),
            build_dir=o.text("build_dir", optional=True, default=""),
            artifacts=tuple(ArtifactRecord.from_obj(a) for a in o.objs("artifacts")),
            compile_cache=CompileCacheRecord.from_obj(ccache) if ccache is not None else None,
            rpc_protocol=_proto(o),
        )


def _proto(o: _Obj) -> ProtoVersion | None:
    raw = o.text("rpc_protocol", optional=True)
    if raw is None:
        return None
    try:
        return ProtoVersion.parse(raw)
    except ValueError:
        raise _BadField("rpc_protocol") from None


def read_build_info(out_dir: Path, *, error: type[FatalError] = ConfigError) -> BuildInfo:
    """The build-info.json of a finished build in ``out_dir``.

    ``error`` is the class of the one-line error when there is none or it is unusable:
    ConfigError (exit 2) for commands that take an output folder, ReleaseError (exit 12)
    for `release`, which refuses it.
    """
    path = out_dir / BUILD_INFO
    if not path.is_file():
        what = "does not exist" if not out_dir.exists() else f"holds no {BUILD_INFO}"
        raise error(f"no finished build: {out_dir} {what}", hint="run `patchkit build RECIPE` first")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise error(f"{path} is not valid JSON ({e})", hint=_REBUILD) from None
    return BuildInfo.from_json(data, where=str(path), error=error)


def write_build_info(out_dir: Path, info: BuildInfo) -> None:
    """Write ``out_dir/build-info.json`` atomically."""
    atomic_write_json(out_dir / BUILD_INFO, info.to_json())
