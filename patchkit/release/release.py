"""`patchkit release`: a finished build -> one reproducible archive + manifest + SHA256SUMS.

Input: a build output folder as `patchkit build` writes it::

    out/<recipe>/bin/...          executables and the shared libraries they need
    out/<recipe>/LICENSE          llama.cpp's LICENSE
    out/<recipe>/build-info.json

Output in the ``--out`` folder:

    llama-<sha7>-pk<series8>-<os>-<arch>-<variant>.tar.gz   (.zip for Windows)
    llama-...-<variant>.manifest.json                       (a copy of the manifest inside)
    SHA256SUMS                                              (``sha256sum -c`` format, merged)

The archive holds ``<name>/bin/...``, ``<name>/LICENSE`` and ``<name>/manifest.json``.

Refusals (ReleaseError, nothing written): no build; build-info.json unreadable; a file
in bin/ missing, changed since the build (sha256/size) or not listed in build-info;
no LICENSE; smoke not passed (unless ``allow_unsmoked``); a build made from another
recipe file, upstream commit or patch bytes than the current recipe (unless
``allow_stale``); an archive of that name in ``--out`` from another recipe. A waived
check is recorded in the manifest's ``waivers``; an unneeded waiver flag is not (the
bytes do not depend on it).

Only declared inputs reach the manifest: build-info's ``log``, ``build_dir`` and
``timings`` are dropped, and known host folders in any remaining string (build dir,
out dir, cache, home) are replaced by ``<build>``, ``<out>``, ``<cache>``, ``~``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

from patchkit import __version__
from patchkit.binary.elf import ElfDynamic, ElfFormatError, read_dynamic, rpath_problems
from patchkit.core.errors import ConfigError, ReleaseError
from patchkit.core.fs import atomic_write_bytes, contained, sha256_file
from patchkit.core.paths import cache_dir
from patchkit.core.record import JsonValue, decode, encode
from patchkit.release import bundle, floor, provenance, sources
from patchkit.release.archive import Member, read_archive, write_archive
from patchkit.release.names import archive_name, variant_name
from patchkit.spec.buildinfo import BuildInfo, CMakeRecord, SmokeReport, SmokeStatus, read_build_info
from patchkit.spec.cuda import NVCC_OBJTEMP_SINCE
from patchkit.spec.manifest import (
    MANIFEST_SCHEMA,
    CheckSummary,
    CudaSummary,
    FileEntry,
    FloorSummary,
    ManifestPatch,
    ManifestUpstream,
    ReleaseManifest,
    Reproducibility,
    SmokeSummary,
    dump_manifest,
    load_manifest,
)
from patchkit.spec.recipe import Recipe

__all__ = [
    "MANIFEST_SCHEMA",
    "SUMS",
    "ReleaseOptions",
    "ReleaseResult",
    "dump_manifest",
    "read_sums",
    "release",
    "source_date_epoch_from_env",
    "write_sums",
]

SUMS = "SHA256SUMS"
_EXEC_TYPES = ("EXECUTABLE", "SHARED_LIBRARY", "MODULE_LIBRARY")
_SUM_LINE = re.compile(r"^(?P<sha>[0-9a-fA-F]{64}) [ *](?P<name>.+)$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReleaseOptions:
    build_dir: Path
    out_dir: Path
    recipe: Recipe | None = None  # given: the build is checked against it (stale build)
    allow_unsmoked: bool = False
    allow_stale: bool = False
    source_date_epoch: int | None = None  # None: the upstream commit date
    project: Path | None = None  # the recipe's project: its files go into source/
    sign_key: Path | None = None  # ssh-keygen -Y sign the provenance statement
    bundle_runtime: bool = True  # CUDA builds: NVIDIA's runtime archive beside (release.bundle)
    runtime_wheels: Path | None = None  # None: pip downloads them into the cache
    allow_system: tuple[str, ...] = ()  # more system libraries (recorded in the manifest)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReleaseResult:
    name: str
    archive: Path
    sha256: str
    manifest: Path
    sums: Path
    waivers: tuple[str, ...]
    files: int
    provenance: tuple[Path, ...] = ()  # the in-toto statement (and its signature)
    no_sources: str = ""  # why the archive carries no sources ("" when it does)
    imports: tuple[str, ...] = ()  # the import check, one line per file (release.imports)
    runtime: Path | None = None  # the CUDA runtime archive beside it
    note: str = ""
    floor: str = ""  # the C library floor: "GLIBC_2.30 GLIBCXX_3.4.26 CXXABI_1.3.11 (floor ...)"


def _allowed_system(opts: ReleaseOptions) -> tuple[str, ...]:
    """The extra system libraries: the recipe's `[release] allow_system`, then --allow-system."""
    from_recipe = opts.recipe.release_allow_system if opts.recipe is not None else ()
    return tuple(dict.fromkeys((*from_recipe, *opts.allow_system)))


def source_date_epoch_from_env(env: Mapping[str, str] | None = None) -> int | None:
    raw = (os.environ if env is None else env).get("SOURCE_DATE_EPOCH", "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise ConfigError(f"SOURCE_DATE_EPOCH={raw!r} is not a whole number of seconds")
    return int(raw)


def _mtime(info: BuildInfo, sde: int | None) -> int:
    if sde is not None:
        return sde
    raw = info.upstream.commit_date
    try:
        when = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ReleaseError(f"build-info.json: upstream.commit_date {raw!r} is not an ISO date") from None
    if when.tzinfo is None:
        raise ReleaseError(f"build-info.json: upstream.commit_date {raw!r} has no time zone")
    return int(when.timestamp())


def _stale_reasons(info: BuildInfo, recipe: Recipe) -> list[str]:
    reasons = []
    if info.recipe.name != recipe.name:
        raise ReleaseError(f"the build is of recipe {info.recipe.name!r}, not {recipe.name!r}")
    if info.recipe.sha256 != recipe.sha256:
        reasons.append(f"{recipe.path.name} changed since the build")
    if info.upstream.commit != recipe.upstream.commit:
        reasons.append(
            f"the recipe now pins upstream {recipe.upstream.commit[:12]}, "
            f"the build used {info.upstream.commit[:12]}"
        )
    built = {p.name: p for p in info.patches}
    if set(built) != set(recipe.patch_names):
        reasons.append("the recipe's patch list changed since the build")
    for patch in recipe.patches:
        if patch.name in built and patch.sha256 != built[patch.name].sha256:
            reasons.append(f"patch {patch.name} changed since the build")
    return reasons


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


def _artifact_members(
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


_NOT_PASSED = {
    None: "was not run",
    SmokeStatus.FAILED: "failed",
    SmokeStatus.SKIPPED: "was skipped",
    SmokeStatus.PARTIAL: "ran only some checks (--only/--skip)",
}


def _smoke_waiver(info: BuildInfo, allow: bool) -> list[str]:
    status = info.smoke.status if info.smoke is not None else None
    if status is SmokeStatus.PASSED:
        return []
    what = _NOT_PASSED[status]
    if not allow:
        raise ReleaseError(
            f"the build's smoke stage {what}: refusing to release an untested build",
            hint="fix the build and rebuild, or pass --allow-unsmoked (recorded in the manifest)",
        )
    return ["unsmoked"]


def _manifest(
    info: BuildInfo,
    *,
    stem: str,
    suffix: str,
    mtime: int,
    sde: bool,
    waivers: list[str],
    files: list[FileEntry],
    src: sources.Sources,
    checked: bundle.ReleaseCheck,
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
        imports=checked.imports,
        runtime=checked.runtime_ref,
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
    if nvcc and bundle.version_key(nvcc) < NVCC_OBJTEMP_SINCE:
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


def read_sums(path: Path) -> tuple[dict[str, str], list[str]]:
    """SHA256SUMS -> ({name: sha256}, [problems with line numbers])."""
    sums: dict[str, str] = {}
    problems: list[str] = []
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return {}, [f"{path.name}: not UTF-8 text"]
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _SUM_LINE.match(line)
        if not m:
            problems.append(f"{path.name} line {n}: not `<sha256>  <file>`: {line[:60]!r}")
            continue
        name = m.group("name")
        if "/" in name or "\\" in name or name in (".", ".."):
            problems.append(f"{path.name} line {n}: {name!r} is not a file beside it")
        elif name in sums:
            problems.append(f"{path.name} line {n}: {name} is listed twice")
        else:
            sums[name] = m.group("sha").lower()
    return sums, problems


def write_sums(path: Path, sums: Mapping[str, str]) -> None:
    atomic_write_bytes(path, "".join(f"{sums[n]}  {n}\n" for n in sorted(sums)).encode(), mode=0o644)


def _check_collision(out_dir: Path, stem: str, suffix: str, recipe_name: str) -> None:
    side = out_dir / f"{stem}.manifest.json"
    existing = out_dir / (stem + suffix)
    if not existing.exists() and not side.exists():
        return
    other = None
    try:
        if side.is_file():
            data = side.read_bytes()
        else:
            inner = read_archive(existing, keep=[f"{stem}/manifest.json"])
            data = next((e.data for e in inner if e.name == f"{stem}/manifest.json"), None) or b""
        found = load_manifest(data)
        other = found.recipe.name if isinstance(found, ReleaseManifest) else None
    except (ValueError, OSError):  # unreadable: not another recipe's release
        other = None
    if other is not None and other != recipe_name:
        raise ReleaseError(
            f"{out_dir / (stem + suffix)} already holds a release of recipe "
            f"{other!r} with the same name as {recipe_name!r}",
            hint="give each recipe its own --out folder, or make the recipes differ",
        )


def release(opts: ReleaseOptions) -> ReleaseResult:
    """Check the build, pack it, write manifest copy, then SHA256SUMS (last)."""
    with contextlib.ExitStack() as stack:
        return _release(opts, stack)


def _release(opts: ReleaseOptions, stack: contextlib.ExitStack[bool | None]) -> ReleaseResult:
    build_dir = opts.build_dir
    info = read_build_info(build_dir, error=ReleaseError)
    waivers: list[str] = []
    if opts.recipe is not None:
        reasons = _stale_reasons(info, opts.recipe)
        if reasons and not opts.allow_stale:
            raise ReleaseError(
                f"the build in {build_dir} is stale: {reasons[0]}"
                + (f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else ""),
                hint=f"rebuild with `patchkit build {opts.recipe.name}`, or pass "
                "--allow-stale to release the old build (recorded)",
            )
        if reasons:
            waivers.append("stale")
    waivers += _smoke_waiver(info, opts.allow_unsmoked)
    elves: dict[str, ElfDynamic] = {}
    arts = _artifact_members(info, build_dir, elves)
    stated = dict(opts.recipe.release_floor) if opts.recipe is not None else {}
    floor_summary = floor.compute_floor(elves, stated)
    floor.refuse_above(floor_summary, info.recipe.name)
    license_path = build_dir / "LICENSE"
    if not license_path.is_file():
        raise ReleaseError(
            f"{build_dir} has no LICENSE (llama.cpp's licence must ship)",
            hint="rebuild with `patchkit build <recipe>`",
        )
    license_path = contained(license_path, build_dir, error=ReleaseError, what="LICENSE")

    stem, suffix = archive_name(info)
    mtime = _mtime(info, opts.source_date_epoch)
    stage = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="patchkit-release-")))
    checked = bundle.check_release(
        info,
        build_dir,
        [m.name for m, _ in arts],
        bundle=opts.bundle_runtime,
        wheels=opts.runtime_wheels,
        stage=stage,
        sde=opts.source_date_epoch,
        allow=_allowed_system(opts),
    )
    members = [m for m, _ in arts] + [Member(name="LICENSE", mode=0o644, source=license_path)]
    files = [f for _, f in arts] + [
        FileEntry(
            path="LICENSE",
            sha256=sha256_file(license_path),
            size=license_path.stat().st_size,
            mode="644",
            type="LICENSE",
        )
    ]
    src = sources.collect(info, opts.recipe, opts.project)
    members += src.members
    files += src.files
    raw = _manifest(
        info,
        stem=stem,
        suffix=suffix,
        mtime=mtime,
        sde=opts.source_date_epoch is not None,
        waivers=waivers,
        files=files,
        src=src,
        checked=checked,
        floor_summary=floor_summary,
    )
    # host folders out of every string (a smoke check's command line, a define), then read
    # back through the manifest's record: what is written is what verify will read
    manifest = decode(ReleaseManifest, _scrub(encode(raw), _host_subs(info, build_dir, opts.out_dir)))
    data = dump_manifest(manifest)
    members.append(Member(name="manifest.json", mode=0o644, data=data))

    out = opts.out_dir
    if out.exists() and not out.is_dir():
        raise ReleaseError(f"--out {out} is not a folder")
    _check_collision(out, stem, suffix, info.recipe.name)
    sums_path = out / SUMS
    sums: dict[str, str] = {}
    if sums_path.is_file():
        sums, problems = read_sums(sums_path)
        if problems:
            raise ReleaseError(f"{out}: {problems[0]}", hint="fix or delete it, then release again")
    if opts.sign_key is not None:  # a key that cannot sign stops the release before writing
        from patchkit.release.signing import sign

        sign(b"patchkit key check", opts.sign_key)
    sums.update(bundle.publish(checked, out))
    archive = out / (stem + suffix)
    digest = write_archive(archive, stem, members, mtime=mtime)
    side = out / f"{stem}.manifest.json"
    atomic_write_bytes(side, data, mode=0o644)
    beside = provenance.write_beside(
        out,
        stem=stem,
        archive=archive.name,
        sha256=digest,
        manifest=manifest,
        manifest_data=data,
        sign_key=opts.sign_key,
    )
    sums[archive.name] = digest
    sums[side.name] = sha256_file(side)
    sums.update({n: sha256_file(p) for n, p in beside.items()})
    write_sums(sums_path, sums)
    return ReleaseResult(
        name=stem,
        archive=archive,
        sha256=digest,
        manifest=side,
        sums=sums_path,
        waivers=tuple(sorted(waivers)),
        files=len(members),
        provenance=tuple(beside.values()),
        no_sources=src.why_not,
        imports=tuple(checked.report.lines()),
        runtime=out / checked.runtime.archive if checked.runtime else None,
        note=checked.note,
        floor=_floor_line(floor_summary),
    )


def _floor_line(summary: FloorSummary | None) -> str:
    if summary is None:
        return ""
    stated = " ".join(f"{k}_{v}" for k, v in summary.stated.items())
    return floor.describe(summary) + (f" (the recipe's floor: {stated})" if stated else " (no floor stated)")
