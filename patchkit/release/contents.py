"""What a release holds: the build's files, checked against its build-info, and the
release manifest assembled from build-info and what ``release`` checked.

Every artifact must be the file build-info lists (path in ``bin/``, sha256, size), inside
the build folder (a link to a host file is refused, never read), with only `$ORIGIN`-based
search paths; nothing else may be in ``bin/``. Only declared inputs reach the manifest,
and known host folders in its strings are replaced by labels (:func:`scrubbed`).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from patchkit import __version__
from patchkit.binary.elf import ElfDynamic, ElfFormatError, read_dynamic, rpath_problems
from patchkit.core.errors import ReleaseError
from patchkit.core.fs import contained, sha256_file
from patchkit.core.paths import cache_dir
from patchkit.core.record import JsonValue, decode, encode
from patchkit.release import sources
from patchkit.release.archive import Member
from patchkit.release.bundle import version_key
from patchkit.release.names import variant_name
from patchkit.spec.buildinfo import BuildInfo, CMakeRecord, SmokeReport
from patchkit.spec.cuda import NVCC_OBJTEMP_SINCE
from patchkit.spec.manifest import (
    MANIFEST_SCHEMA,
    CheckSummary,
    CudaSummary,
    FileEntry,
    FloorSummary,
    ImportSummary,
    ManifestPatch,
    ManifestUpstream,
    ReleaseManifest,
    Reproducibility,
    RuntimeRef,
    SmokeSummary,
)

__all__ = ["SCCACHE_PATHS", "artifact_members", "release_manifest", "reproducibility", "scrubbed"]

_EXEC_TYPES = ("EXECUTABLE", "SHARED_LIBRARY", "MODULE_LIBRARY")


def artifact_members(
    info: BuildInfo, build_dir: Path, elves: dict[str, ElfDynamic] | None = None
) -> list[tuple[Member, FileEntry]]:
    """The build's files (checked against build-info); each ELF file's dynamic section
    into ``elves`` by its path in the archive."""
    out: list[tuple[Member, FileEntry]] = []
    seen: set[str] = set()
    for i, art in enumerate(info.artifacts):
        rel = art.path
        if not rel.startswith("bin/") or ".." in rel.split("/") or "\\" in rel:
            raise ReleaseError(f"build-info.json: artifacts[{i}].path {rel!r} is not a file in bin/")
        if rel in seen:
            raise ReleaseError(f"build-info.json: {rel} is listed twice in artifacts")
        seen.add(rel)
        path = build_dir / rel
        if not path.is_file():
            raise ReleaseError(
                f"{rel} is missing from {build_dir}",
                hint="the build folder was changed after the build: rebuild",
            )
        # packed from the build folder only: a link to a host file is refused, never read
        path = contained(path, build_dir, error=ReleaseError, what=rel)
        size, sha = path.stat().st_size, sha256_file(path)
        if sha != art.sha256 or size != art.size:
            raise ReleaseError(
                f"{rel} changed after the build (sha256 {sha[:12]}…, size {size}; "
                f"build-info.json says {art.sha256[:12]}…, {art.size})",
                hint="rebuild with `patchkit build <recipe>`",
            )
        dyn = _refuse_bad_runpath(path, rel)
        if dyn is not None and elves is not None:
            elves[rel] = dyn
        kind = art.type or "FILE"
        mode = 0o755 if kind in _EXEC_TYPES else 0o644
        out.append(
            (
                Member(name=rel, mode=mode, source=path),
                FileEntry(path=rel, sha256=sha, size=size, mode=f"{mode:o}", type=kind),
            )
        )
    if not out:
        raise ReleaseError("build-info.json lists no artifacts: nothing to release")
    bin_dir = build_dir / "bin"
    extra = sorted(
        p.relative_to(build_dir).as_posix()
        for p in bin_dir.rglob("*")
        if not p.is_dir() and p.relative_to(build_dir).as_posix() not in seen
    )
    if extra:
        raise ReleaseError(
            f"{extra[0]} is in {bin_dir} but not in build-info.json's artifacts"
            + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""),
            hint="the build folder was changed after the build: rebuild",
        )
    return out


def _refuse_bad_runpath(path: Path, rel: str) -> ElfDynamic | None:
    """ReleaseError unless an ELF file searches only `$ORIGIN`-based folders (an empty
    entry is the current directory: a library planted there would run); its dynamic
    section (None: not ELF)."""
    try:
        dyn = read_dynamic(path)
    except (ElfFormatError, OSError) as e:
        raise ReleaseError(
            f"{rel}: cannot read its ELF dynamic section ({e})", hint="rebuild with `patchkit build <recipe>`"
        ) from None
    problems = rpath_problems(dyn) if dyn is not None else ()
    if problems:
        raise ReleaseError(
            f"{rel}: {problems[0].describe()}; refusing to ship a binary that searches outside $ORIGIN",
            hint="rebuild with this patchkit (it links with RUNPATH $ORIGIN)",
        )
    return dyn


def _scrub(obj: JsonValue, subs: list[tuple[str, str]]) -> JsonValue:
    """Every string value of JSON data (not the keys) with host folders replaced."""
    if isinstance(obj, str):
        for host, label in subs:
            obj = obj.replace(host, label)
        return obj
    if isinstance(obj, list):
        return [_scrub(x, subs) for x in obj]
    if isinstance(obj, dict):
        return {k: _scrub(v, subs) for k, v in obj.items()}
    return obj


def _host_subs(info: BuildInfo, build_dir: Path, out_dir: Path) -> list[tuple[str, str]]:
    subs: list[tuple[str, str]] = []
    for raw, label in (
        (info.build_dir, "<build>"),
        (str(build_dir.resolve()), "<out>"),
        (str(out_dir.resolve()), "<dist>"),
        (str(cache_dir()), "<cache>"),
        (str(Path.home()), "~"),
    ):
        if len(raw) > 1:
            subs.append((raw, label))
    if info.log:
        subs.append((str(Path(info.log).parent), "<logs>"))
    # longest first, so /home/u/proj/out wins over /home/u
    return sorted(subs, key=lambda s: -len(s[0]))


def _relative_file(value: str) -> str:
    if Path(value).is_absolute() or re.match(r"^[A-Za-z]:[\\/]", value):
        return re.split(r"[\\/]", value)[-1]
    return value


def scrubbed(manifest: ReleaseManifest, info: BuildInfo, build_dir: Path, out_dir: Path) -> ReleaseManifest:
    """``manifest`` with host folders out of every string (a smoke check's command line, a
    define), read back through the manifest's record: what is written is what verify reads."""
    return decode(ReleaseManifest, _scrub(encode(manifest), _host_subs(info, build_dir, out_dir)))


def release_manifest(
    info: BuildInfo,
    *,
    stem: str,
    suffix: str,
    mtime: int,
    sde: bool,
    waivers: list[str],
    files: list[FileEntry],
    src: sources.Sources,
    imports: ImportSummary,
    runtime: RuntimeRef | None,
    floor_summary: FloorSummary | None = None,
) -> ReleaseManifest:
    """The manifest of ``info``'s release (host paths not yet scrubbed)."""
    cmake, cuda, up = info.cmake, info.cuda, info.upstream
    return ReleaseManifest(
        schema=MANIFEST_SCHEMA,
        name=stem,
        archive=stem + suffix,
        variant=variant_name(info),
        released_by=f"patchkit {__version__}",
        patchkit_version=info.patchkit_version,
        recipe=dataclasses.replace(info.recipe, file=_relative_file(info.recipe.file)),
        identity=info.identity,
        upstream=ManifestUpstream(
            url=up.url, commit=up.commit, commit_date=up.commit_date, ref=up.ref, build_number=up.build_number
        ),
        rpc_protocol=info.rpc_protocol,
        patches=tuple(
            ManifestPatch(
                name=p.name,
                file=p.file,
                sha256=p.sha256,
                status=p.upstream_status,
                when=p.when,
                experimental=p.experimental,
                result=p.result,
            )
            for p in info.patches
        ),
        series_hash=info.series_hash,
        experimental=info.experimental,
        platform=info.platform,
        cmake=CMakeRecord(
            generator=cmake.generator,
            build_type=cmake.build_type,
            defines=cmake.defines,
            toolchain=_relative_file(cmake.toolchain) if cmake.toolchain is not None else None,
        ),
        targets=info.targets,
        tools=info.tools,
        cuda=None
        if cuda is None
        else CudaSummary(
            archs=cuda.archs, cmake_architectures=cuda.cmake_architectures, nvcc=cuda.nvcc, proven=cuda.proven
        ),
        pe_edits=info.pe_edits,
        smoke=_smoke_summary(info.smoke),
        waivers=tuple(sorted(waivers)),
        source_date_epoch=mtime,
        mtime_from="SOURCE_DATE_EPOCH" if sde else "upstream.commit_date",
        reproducible=reproducibility(info),
        files=tuple(sorted(files, key=lambda f: f.path)),
        source=src.record,
        imports=imports,
        runtime=runtime,
        floor=floor_summary,
        cpu_variants=info.cpu_variants,
    )


SCCACHE_PATHS = (
    "compiled through sccache, which keeps each object's absolute source paths "
    "(__FILE__ in ggml's assert messages): a build in another folder gives other "
    "bytes; build with --launcher ccache or none for a release any folder rebuilds"
)


def reproducibility(info: BuildInfo) -> Reproducibility:
    """Whether a rebuild in another folder gives these bytes, and if not, why: what a user
    running ``patchkit rebuild`` on the archive should expect."""
    launcher = (info.compile_cache.launcher if info.compile_cache is not None else "") or "none"
    if launcher == "sccache":
        return Reproducibility(launcher=launcher, any_folder=False, why=SCCACHE_PATHS)
    nvcc = info.cuda.nvcc if info.cuda is not None else ""
    if nvcc and version_key(nvcc) < NVCC_OBJTEMP_SINCE:
        return Reproducibility(
            launcher=launcher,
            any_folder=False,
            why=f"nvcc {nvcc} names its temporary host files after its process id, and "
            "each CUDA object keeps that name (nvcc 12.0 and newer do not: "
            "--objdir-as-tempdir): a rebuild gives other bytes in libggml-cuda",
        )
    return Reproducibility(
        launcher=launcher,
        any_folder=True,
        why="source paths relative to the build folder (ccache's base dir, or "
        "-ffile-prefix-map without a launcher), SOURCE_DATE_EPOCH = the upstream "
        "commit time, nvcc's temporary files named after the object",
    )


def _smoke_summary(smoke: SmokeReport | None) -> SmokeSummary | None:
    """Smoke results without their timings, so equal builds give equal manifests."""
    if smoke is None:
        return None
    return SmokeSummary(
        status=smoke.status,
        checks=tuple(CheckSummary(name=c.name, status=c.status, why=c.why) for c in smoke.checks),
    )
