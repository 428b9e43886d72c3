"""`patchkit release`: a finished build -> one reproducible archive + manifest + SHA256SUMS.

Input: a build output folder as `patchkit build` writes it::

    out/<recipe>/bin/...          executables and the shared libraries they need
    out/<recipe>/LICENSE          llama.cpp's LICENSE
    out/<recipe>/build-info.json

Output in the ``--out`` folder:

    llama-<sha7>-pk<series8>-<os>-<arch>-<variant>.tar.gz   (.zip for Windows)
    llama-...-<variant>.manifest.json                       (a copy of the manifest inside)
    llama-...-<variant>.oci.tar                             (``image``: the container image, release.image)
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
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from patchkit.binary.elf import ElfDynamic
from patchkit.core.environ import process_env
from patchkit.core.errors import ConfigError, Problem, ReleaseError
from patchkit.core.fs import atomic_write_bytes, contained, sha256_file
from patchkit.release import contents, floor, image, provenance, sources
from patchkit.release.archive import Member, read_archive, write_archive
from patchkit.release.bundle import (
    StagedRuntime,
    check_runtime,
    download_wheels,
    runtime_manifest,
    runtime_needed,
    runtime_spec,
    select_wheels,
    stage_runtime,
    write_runtime,
)
from patchkit.release.imports import LIBRARY_NAME, Binary, ImportReport, check_imports, read_binary
from patchkit.release.names import archive_name
from patchkit.spec.buildinfo import BuildInfo, SmokeStatus, read_build_info
from patchkit.spec.manifest import (
    MANIFEST_SCHEMA,
    FileEntry,
    FloorSummary,
    ImportSummary,
    ReleaseManifest,
    RuntimeRef,
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
    image: image.ImageOptions | None = None  # also a container image beside it (release.image)


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
    image: image.ImageRecord | None = None  # the container image beside it


def _allowed_system(opts: ReleaseOptions) -> tuple[str, ...]:
    """The extra system libraries: the recipe's `[release] allow_system`, then --allow-system."""
    from_recipe = opts.recipe.release_allow_system if opts.recipe is not None else ()
    return tuple(dict.fromkeys((*from_recipe, *opts.allow_system)))


def source_date_epoch_from_env(env: Mapping[str, str] | None = None) -> int | None:
    raw = process_env(env).get("SOURCE_DATE_EPOCH", "").strip()
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReleaseCheck:
    """What `release` learnt about a build's imports, and the runtime archive it packed
    (in the staging folder, not yet in the out folder)."""

    report: ImportReport
    runtime: StagedRuntime | None
    runtime_archive: Path | None = None
    runtime_sha256: str = ""
    runtime_manifest: bytes = b""
    note: str = ""
    artifacts: tuple[str, ...] = ()  # the build's own files (the manifest's imports are theirs)

    @property
    def imports(self) -> ImportSummary:
        """The manifest's ``imports``: what the build's own files need."""
        return self.report.summary(of=self.artifacts)

    @property
    def runtime_ref(self) -> RuntimeRef | None:
        """The manifest's ``runtime``: the runtime archive it needs beside it."""
        rt = self.runtime
        if rt is None:
            return None
        return RuntimeRef(
            archive=rt.archive, sha256=self.runtime_sha256, cuda=rt.spec.version, files=tuple(rt.paths)
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImportCheckFailed(Problem):
    """The import check of a release refused it."""

    stage: str  # "unreadable" (an artifact's imports cannot be read), "runtime" (the CUDA
    # runtime bundle's own imports), "build" (the build's imports)
    problems: tuple[str, ...]  # one per file and library, as release.imports says them


def _problems_error(stage: str, problems: Sequence[str]) -> ReleaseError:
    return ReleaseError(problem=ImportCheckFailed(stage=stage, problems=tuple(problems)))


def check_release(
    info: BuildInfo,
    build_dir: Path,
    artifacts: Sequence[str],
    *,
    bundle: bool,
    wheels: Path | None,
    stage: Path,
    sde: int | None,
    allow: Sequence[str] = (),
) -> ReleaseCheck:
    """Read every artifact's imports; for a CUDA build (unless ``bundle`` is off) take the
    runtime it imports from the wheels and pack the runtime archive into ``stage``; then
    prove every import resolves. ReleaseError (exit 12) naming file and library if not."""
    bad = [a for a in allow if not LIBRARY_NAME.match(a)]
    if bad:
        raise ReleaseError(f"--allow-system {bad[0]!r} is not a library file name (libssl.so.3)")
    binaries: list[Binary] = []
    unreadable: list[str] = []
    for rel in artifacts:
        try:
            b = read_binary(build_dir / rel, rel)
        except ValueError as e:
            unreadable.append(str(e))
            continue
        if b is not None:
            binaries.append(b)
    if unreadable:
        raise _problems_error("unreadable", unreadable)
    runtime = None
    note = ""
    if info.cuda is not None and not bundle:
        note = "no CUDA runtime bundle (--no-bundle-runtime): the target needs the toolkit's"
    elif info.cuda is not None:
        spec = runtime_spec(info)
        needed = runtime_needed(binaries)
        if not needed:
            note = "the binaries link no NVIDIA runtime library: no runtime bundle"
        else:
            chosen = select_wheels(wheels, spec) if wheels is not None else download_wheels(spec)
            runtime = stage_runtime(spec, chosen, needed, stage / "runtime")
            own = check_runtime(runtime)
            if own:
                raise _problems_error("runtime", own)
    files = [*artifacts, *(runtime.paths if runtime else [])]
    report = check_imports(
        [*binaries, *(runtime.binaries if runtime else ())],
        os_name=info.platform.os,
        files=files,
        allow=allow,
    )
    if report.problems:
        raise _problems_error("build", report.problems)
    if runtime is None:
        return ReleaseCheck(report=report, runtime=None, note=note, artifacts=tuple(artifacts))
    rt_report = check_imports(runtime.binaries, os_name=runtime.spec.os, files=runtime.paths)
    data = dump_manifest(runtime_manifest(runtime, sde=sde, imports=rt_report.summary()))
    mtime = sde if sde is not None else runtime.mtime
    packed = stage / "packed"
    digest, _ = write_runtime(runtime, packed, data, mtime)
    return ReleaseCheck(
        report=report,
        runtime=runtime,
        runtime_archive=packed / runtime.archive,
        runtime_sha256=digest,
        runtime_manifest=data,
        note=note,
        artifacts=tuple(artifacts),
    )


def publish(check: ReleaseCheck, out: Path) -> dict[str, str]:
    """Put the staged runtime archive and its manifest copy into ``out``: {name: sha256}
    for SHA256SUMS. The same archive already there is kept; another one is refused (the
    releases already in ``out`` name its sha256)."""
    rt = check.runtime
    if rt is None or check.runtime_archive is None:
        return {}
    dest = out / rt.archive
    side = out / f"{rt.name}.manifest.json"
    if os.path.lexists(dest):
        if os.path.islink(dest) or not dest.is_file() or sha256_file(dest) != check.runtime_sha256:
            raise ReleaseError(
                f"{dest} already holds another CUDA {rt.spec.version} runtime "
                "bundle (other wheels?), which releases in that folder name",
                hint="release into a fresh --out folder, or pass --runtime-wheels "
                "with the wheels used before",
            )
    else:
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / f".{rt.archive}.tmp"
        shutil.copyfile(check.runtime_archive, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    atomic_write_bytes(side, check.runtime_manifest, mode=0o644)
    return {dest.name: check.runtime_sha256, side.name: sha256_file(side)}


_UNDO_PREFIX = ".patchkit-release-undo-"


@contextlib.contextmanager
def _all_or_nothing(out: Path) -> Iterator[None]:
    """The files a release writes into ``out`` appear together or not at all: on any error
    while writing (a full disk half way, a signature that fails) the ones it wrote go again
    and the ones it replaced (SHA256SUMS, a re-release) get their old bytes back; an ``out``
    it made goes too. The old files are kept as hard links in a hidden folder meanwhile."""
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob(_UNDO_PREFIX + "*"):  # a killed release's: its files are whole
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
    undo = Path(tempfile.mkdtemp(prefix=_UNDO_PREFIX, dir=out))
    try:
        kept: dict[str, Path | None] = {}
        for p in out.iterdir():
            if p.name.startswith(_UNDO_PREFIX):
                continue
            kept[p.name] = None
            if p.is_file() and not p.is_symlink():
                with contextlib.suppress(OSError):  # not restorable: never replaced by a release
                    os.link(p, undo / p.name)
                    kept[p.name] = undo / p.name
        try:
            yield
        except BaseException:
            for p in list(out.iterdir()):
                if p.name.startswith(_UNDO_PREFIX):
                    continue
                if p.name not in kept:
                    if p.is_dir() and not p.is_symlink():
                        shutil.rmtree(p, ignore_errors=True)
                    else:
                        p.unlink(missing_ok=True)
                elif (old := kept[p.name]) is not None and not os.path.samefile(old, p):
                    os.replace(old, p)
            if made:
                shutil.rmtree(undo, ignore_errors=True)
                with contextlib.suppress(OSError):
                    out.rmdir()
            raise
    finally:
        shutil.rmtree(undo, ignore_errors=True)


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
    arts = contents.artifact_members(info, build_dir, elves)
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
    checked = check_release(
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
    raw = contents.release_manifest(
        info,
        stem=stem,
        suffix=suffix,
        mtime=mtime,
        sde=opts.source_date_epoch is not None,
        waivers=waivers,
        files=files,
        src=src,
        imports=checked.imports,
        runtime=checked.runtime_ref,
        floor_summary=floor_summary,
    )
    manifest = contents.scrubbed(raw, info, build_dir, opts.out_dir)
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
    if opts.image is not None:  # nor may the image stop it half written
        image.preflight(manifest, out, opts.image)
    stack.enter_context(_all_or_nothing(out))
    sums.update(publish(checked, out))
    archive = out / (stem + suffix)
    digest = write_archive(archive, stem, members, mtime=mtime)
    side = out / f"{stem}.manifest.json"
    atomic_write_bytes(side, data, mode=0o644)
    made: image.ImageRecord | None = None
    if opts.image is not None:  # from the archive just written: its very bytes
        made = image.make_release_image(
            out,
            archive.name,
            system_root=opts.image.system_root,
            system_label=opts.image.system_label,
            stage=stage / "image",
        )
        sums[made.file] = made.sha256
    beside = provenance.write_beside(
        out,
        stem=stem,
        archive=archive.name,
        sha256=digest,
        manifest=manifest,
        manifest_data=data,
        sign_key=opts.sign_key,
        image=None
        if made is None
        else provenance.ImageSubject(file=made.file, sha256=made.sha256, ref=made.ref, digest=made.digest),
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
        image=made,
    )


def _floor_line(summary: FloorSummary | None) -> str:
    if summary is None:
        return ""
    stated = " ".join(f"{k}_{v}" for k, v in summary.stated.items())
    return floor.describe(summary) + (f" (the recipe's floor: {stated})" if stated else " (no floor stated)")
