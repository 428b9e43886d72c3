"""`patchkit rebuild ARCHIVE_OR_DIST`: rebuild a release from what it carries, compare bytes.

For each archive (a release folder is verified first, as `patchkit verify` does):

1. read it with release.archive's caps (sizes, counts, deadline; nothing unpacked): the
   manifest and the ``source/`` members (release.sources) are kept in memory, every
   member hashed;
2. check the sources against the manifest (recipe sha256, each patch's sha256 in order);
3. write them as a project in a scratch folder (recipe, patches/series, patches,
   toolchain) and load the recipe from there, as `patchkit build` would;
4. build it in a fresh patchkit cache (``--cache`` or a temporary one), from the
   manifest's upstream url (``--upstream`` for an offline mirror), configured as the
   release's build was: with the smoke tools when it ran the smoke stage (they set build
   defines and targets); the smoke checks themselves run only when asked (``smoke``);
5. compare every file the manifest lists (bin/, LICENSE) with the rebuilt one by sha256,
   and the tools, CMake defines and targets with the manifest's.

``identical``: every file has the release's bytes. Otherwise the report names each
differing file and each tool whose version differs (the likely cause).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from patchkit.builder import cmake as cm
from patchkit.builder import compcache, sandbox, sysroot
from patchkit.builder.pipeline import BuildOptions, run_build
from patchkit.builder.repro import is_launcher_define
from patchkit.builder.sandbox import Sandbox
from patchkit.core.errors import ConfigError, ReleaseError
from patchkit.core.fs import sha256_bytes, sha256_file
from patchkit.core.paths import cache_dir, cache_layout
from patchkit.core.record import RecordError
from patchkit.core.text import printable
from patchkit.rebuild.problems import (
    CacheNotAFolder,
    NoCarriedSources,
    NotAReleaseArchive,
    ReleaseNotVerified,
    SandboxRefuses,
)
from patchkit.release.archive import (
    ARCHIVE_SUFFIXES,
    DEFAULT_LIMITS,
    ArchiveRefused,
    EntryInfo,
    Limits,
    archive_kind,
    read_archive,
    unsafe_member_name,
)
from patchkit.release.image import rebuilt_image_diffs
from patchkit.release.sources import PREFIX, SOURCE_MAX
from patchkit.release.verify import check_members, verify_dir
from patchkit.spec.buildinfo import BuildInfo
from patchkit.spec.manifest import (
    Manifest,
    ReleaseManifest,
    SourceRecord,
    parse_manifest,
)
from patchkit.spec.recipe import Recipe, load_recipe
from patchkit.spec.series import load_series

__all__ = ["ArchiveRebuild", "RebuildOptions", "archives_of", "rebuild_archive"]

SOURCE_FILES = 256  # recipe, series, toolchain (+ helpers) and the patches an archive may carry


@dataclasses.dataclass(frozen=True, kw_only=True)
class RebuildOptions:
    env: Mapping[str, str]  # what cmake and the compilers run with (the caller's, as for a build)
    upstream: str | None = None  # beats the manifest's upstream url (offline mirror)
    cache: Path | None = None  # the fresh patchkit cache; None: a temporary one, removed
    out: Path | None = None  # keep the rebuilt build output here; None: in the scratch dir
    jobs: int | None = None
    smoke: bool = False  # also run the smoke checks (the tools are built either way when
    # the release's build ran its smoke stage)
    compile_cache: compcache.CacheSettings | None = None  # None: resolved with the recipe
    # run the release's configure and build in builder.sandbox (bubblewrap): False only
    # when the user trusts the release (--no-sandbox)
    sandbox: bool = True


@dataclasses.dataclass(frozen=True, kw_only=True)
class ArchiveRebuild:
    archive: str
    files: int  # files compared
    differs: tuple[str, ...]  # one line per differing / missing / extra file
    tools: tuple[str, ...]  # "cmake: 4.1.2 in the manifest, 4.2.0 here"
    config: tuple[str, ...]  # define / target differences
    out_dir: Path | None  # the rebuilt output, when kept
    expected: str = ""  # the manifest says a rebuild elsewhere differs, and why

    @property
    def identical(self) -> bool:
        return not self.differs


def archives_of(target: Path) -> list[Path]:
    """The archives to rebuild: ``target`` itself, or every archive of a verified folder."""
    if target.is_dir():
        report = verify_dir(target)
        if not report.ok:
            n = len(report.differences)
            raise ReleaseError(
                problem=ReleaseNotVerified(target=target, differences=n),
                detail="\n".join(report.differences[:20]),
            )
        # a CUDA runtime archive holds NVIDIA's files: nothing to rebuild
        return [target / a for a in report.archives if not report.is_runtime(a)]
    if not target.name.endswith(ARCHIVE_SUFFIXES):
        raise ReleaseError(f"{target} is neither a release folder nor a .tar.gz/.zip archive")
    if target.is_symlink() or not target.is_file():
        raise ReleaseError(f"{target} is not a regular file")
    return [target]


def _manifest(data: bytes | None, what: str) -> Manifest:
    try:
        obj = json.loads((data or b"").decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        obj = None
    if not isinstance(obj, dict):
        raise ReleaseError(problem=NotAReleaseArchive(found=f"{what} is not a JSON object"))
    try:
        return parse_manifest(obj)
    except RecordError as e:
        raise ReleaseError(
            problem=NotAReleaseArchive(found=f"{what}: {e.key} is missing or not the expected type")
        ) from None


def _entries(path: Path, keep: list[str], limits: Limits) -> list[EntryInfo]:
    try:
        return read_archive(path, keep=keep, limits=limits)
    except ArchiveRefused as e:
        raise ReleaseError(problem=NotAReleaseArchive(found=f"{path.name}: refused: {e}")) from None
    except ValueError as e:
        raise ReleaseError(problem=NotAReleaseArchive(found=f"{path.name}: {e}")) from None


def _read(path: Path) -> tuple[str, Manifest, dict[str, EntryInfo]]:
    """(top folder, manifest, {member path: entry}) with the source members' bytes kept.

    Two capped passes: the manifest first (every member hashed), then only the (at most
    SOURCE_FILES) sources it names, each at most SOURCE_MAX bytes, so a hostile archive
    costs bounded memory. A name twice is refused (``tar x`` keeps the last one, so the
    hashes of the first would not be what an unpacker gets); a source read in the second
    pass must have the bytes it had in the first.
    """
    root = path.name[: -len("." + archive_kind(path.name))]
    members: dict[str, EntryInfo] = {}
    for entry in _entries(path, [f"{root}/manifest.json"], DEFAULT_LIMITS):
        why = unsafe_member_name(entry.name)
        if why or not entry.name.startswith(f"{root}/") or not entry.is_file:
            found = (
                f"{path.name}: member {printable(entry.name[:200])!r}: "
                f"{why or 'not a file in the top folder ' + printable(root)}"
            )
            raise ReleaseError(problem=NotAReleaseArchive(found=found))
        rel = entry.name[len(root) + 1 :]
        if rel in members:
            found = (
                f"{path.name}: member {printable(entry.name[:200])!r} appears twice "
                "(an unpacker keeps the last one)"
            )
            raise ReleaseError(problem=NotAReleaseArchive(found=found))
        members[rel] = entry
    manifest = _manifest(
        members["manifest.json"].data if "manifest.json" in members else None, f"{path.name}: manifest.json"
    )
    source = manifest.source if isinstance(manifest, ReleaseManifest) else None
    if source is not None:
        keep = sorted({f"{root}/{n}" for n in _named(source)})
        if len(keep) > SOURCE_FILES:
            found = f"{path.name}: the manifest names {len(keep)} source files (at most {SOURCE_FILES})"
            raise ReleaseError(problem=NotAReleaseArchive(found=found))
        limits = dataclasses.replace(DEFAULT_LIMITS, keep=SOURCE_MAX)
        for entry in _entries(path, keep, limits):
            rel = entry.name[len(root) + 1 :]
            if entry.name in keep and members[rel].sha256 == entry.sha256:
                members[rel] = entry
            elif entry.name in keep:
                raise ReleaseError(
                    problem=NotAReleaseArchive(found=f"{path.name}: {rel} changed while it was read")
                )
    return root, manifest, members


def _named(source: SourceRecord) -> list[str]:
    """Every member path the manifest's ``source`` names: recipe, series, patches, toolchain."""
    return [
        source.recipe,
        source.series,
        *source.patches,
        *([source.toolchain] if source.toolchain else []),
        *source.toolchain_files,
    ]


def _sources(
    name: str, manifest: Manifest, members: Mapping[str, EntryInfo]
) -> tuple[ReleaseManifest, dict[str, bytes], str]:
    """The build's manifest, the {project path: bytes} of its carried sources, checked, and
    the recipe's project path."""
    source = manifest.source if isinstance(manifest, ReleaseManifest) else None
    if not isinstance(manifest, ReleaseManifest) or source is None:
        raise ReleaseError(problem=NoCarriedSources(archive=name))
    listed = {f.path: f for f in manifest.files}
    out: dict[str, bytes] = {}
    for rel in _named(source):  # at most SOURCE_FILES: checked in _read
        if not rel.startswith(PREFIX) or unsafe_member_name(rel):
            found = f"{name}: manifest source entry {rel[:200]!r} is not a path under {PREFIX}"
            raise ReleaseError(problem=NotAReleaseArchive(found=found))
        entry = members.get(rel)
        if entry is None or entry.data is None:
            found = f"{name}: {rel} is named by the manifest but not in the archive"
            raise ReleaseError(problem=NotAReleaseArchive(found=found))
        if rel not in listed or listed[rel].sha256 != entry.sha256:
            found = f"{name}: {rel} does not match the manifest's files list"
            raise ReleaseError(problem=NotAReleaseArchive(found=found, against="files"))
        out[rel[len(PREFIX) :]] = entry.data
    recipe_rel = source.recipe[len(PREFIX) :]
    if sha256_bytes(out[recipe_rel]) != manifest.recipe.sha256:
        found = (
            f"{name}: the carried recipe is not the one the manifest names "
            f"(sha256 {manifest.recipe.sha256:.12}…)"
        )
        raise ReleaseError(problem=NotAReleaseArchive(found=found))
    carried = [p[len(PREFIX) :] for p in source.patches]
    shas = [p.sha256 for p in manifest.patches]
    if [sha256_bytes(out[p]) for p in carried] != shas:
        raise ReleaseError(
            problem=NotAReleaseArchive(
                found=f"{name}: the carried patches are not the manifest's (sha256, order)"
            )
        )
    return manifest, out, recipe_rel


def _refuse_command_defines(name: str, recipe_rel: str, recipe: Recipe) -> None:
    """A carried recipe may not name a program, a script or a command line the build would
    run, nor hold what a shell runs in a define (builder.sandbox.command_define), sandbox
    or not: the rebuild would run what the release chose on this machine. Its ``[cuda]``
    toolkit_root (where nvcc is run from) and host_compiler are programs too."""
    hint = (
        "a release's recipe may not choose what runs on the machine that rebuilds it "
        '(docs/release.md, "Trust")'
    )
    for key, value in sorted(recipe.build.defines_dict.items()):
        why = sandbox.command_define(key, value)
        if why:
            raise ReleaseError(
                f"{name}: carried recipe {recipe_rel}: [build.defines] {why}; not rebuilding it", hint=hint
            )
    cuda = recipe.cuda
    programs = (
        {} if cuda is None else {"toolkit_root": cuda.toolkit_root, "host_compiler": cuda.host_compiler}
    )
    for field, program in programs.items():
        if program:
            raise ReleaseError(
                f"{name}: carried recipe {recipe_rel}: [cuda] {field} names a program the build "
                "would run; not rebuilding it",
                hint=hint + "; rebuild with this machine's toolkit (PATH, CUDA_PATH)",
            )


def _sandbox_cache_settings(opts: RebuildOptions, env: Mapping[str, str]) -> compcache.CacheSettings:
    """The compile cache inside the sandbox: no remote (no network there, and the carried
    recipe's remote is someone else's server), no sccache (its server runs outside and is
    reached over TCP); ccache or none, as the user says, never as the recipe says."""
    settings = opts.compile_cache or compcache.resolve(env=env, remote_flag="off", dist_flag="off")
    if settings.launcher == "sccache" or settings.dist is not None:
        raise ConfigError(problem=SandboxRefuses(asked="sccache", launcher_from=settings.launcher_from))
    return dataclasses.replace(settings, remote=None)


def _check_members(
    path: Path, root: str, manifest: ReleaseManifest, members: Mapping[str, EntryInfo]
) -> None:
    """The archive holds exactly the files its manifest lists, with their bytes: the rebuild
    is compared with the manifest, so a member swapped behind an untouched manifest must be
    caught here (as `verify` catches it), never reported as "identical"."""
    diffs = check_members(
        path.name,
        root,
        [dataclasses.replace(e, name=f"{root}/{n}") for n, e in members.items()],
        manifest.files,
    )
    if diffs:
        n = len(diffs)
        found = (
            f"{path.name}: its members are not the files its manifest lists "
            f"({n} difference{'s' if n != 1 else ''}): not rebuilding it"
        )
        raise ReleaseError(
            problem=NotAReleaseArchive(found=found, against="members"),
            detail="\n".join(printable(d) for d in diffs[:20]),
        )


def _compare(manifest: ReleaseManifest, out_dir: Path, info: BuildInfo) -> tuple[int, list[str]]:
    want = {f.path: f for f in manifest.files if not f.path.startswith(PREFIX)}
    built = {a.path for a in info.artifacts} | {"LICENSE"}
    diffs: list[str] = []
    for rel in sorted(want):
        path = out_dir / rel
        if not path.is_file():
            diffs.append(f"{rel}: not made by the rebuild")
            continue
        got = sha256_file(path)
        if got != want[rel].sha256:
            diffs.append(f"{rel}: sha256 {got[:16]}… rebuilt, {want[rel].sha256[:16]}… released")
    for rel in sorted(built - set(want)):
        diffs.append(f"{rel}: made by the rebuild but not in the release")
    return len(want), diffs


def _tool_diffs(manifest: ReleaseManifest, info: BuildInfo) -> list[str]:
    was, now = manifest.tools, info.tools
    out = []
    for k in sorted(set(was) | set(now)):
        if k in ("ccache", "sccache"):
            continue  # launchers, not compilers: never in the bytes
        if was.get(k) != now.get(k):
            out.append(f"{k}: {was.get(k) or 'none'} in the manifest, {now.get(k) or 'none'} here")
    return out


def _config_diffs(manifest: ReleaseManifest, info: BuildInfo) -> list[str]:
    was, now = manifest.cmake.defines, info.cmake.defines
    out = [
        f"define {k}: {was.get(k)!r} in the manifest, {now.get(k)!r} here"
        for k in sorted(set(was) | set(now))
        if was.get(k) != now.get(k) and not is_launcher_define(k)
    ]
    if manifest.targets != info.targets:
        out.append(f"targets: {list(manifest.targets)} in the manifest, {list(info.targets)} here")
    return out


def _private_cache(given: Path | None, scratch: Path) -> Path:
    """The rebuild's own patchkit cache: always a new folder, never one a build reads.

    Without ``--cache`` it is in the scratch folder (removed); with ``--cache DIR`` it is a
    new ``DIR/rebuild-XXXXXXXX/`` (kept, for its logs), so a ``DIR`` that is the user's own
    cache (or one a CI job builds in) gets nothing its builds would reuse: `patchkit build`
    reads ``DIR/work``, ``DIR/repos`` and the compile cache, never ``DIR/rebuild-*``, and a
    later rebuild makes a new folder too. The release's code wrote into it (work folder,
    compile cache): nothing in it is trusted again."""
    if given is None:
        return (scratch / "cache").resolve()
    base = given.expanduser()
    if base.is_symlink() or (base.exists() and not base.is_dir()):
        raise ConfigError(problem=CacheNotAFolder(given=given))
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="rebuild-", dir=base)).resolve()


def _sandbox(recipe: Recipe, upstream: str, cache: Path, project: Path, env: Mapping[str, str]) -> Sandbox:
    """The sandbox the release's configure and build run in: its worktree, build dir and
    compile cache writable; read-only the carried project, the rebuild's cache (its clone: the
    build's own git reads it), a build root, and every program the build runs, wherever it
    lives (cmake and its modules, ninja, the launcher, the compilers on PATH)."""
    tools = cm.find_tools(env)
    programs = [tools.cmake.cmake_path, tools.ninja, *([tools.ccache] if tools.ccache else [])]
    compilers = []
    for name in (env.get("CC"), env.get("CXX"), env.get("CUDACXX"), "cc", "c++", "gcc", "g++"):
        found = shutil.which(name.split()[0], path=env.get("PATH")) if name and name.split() else None
        if found:
            compilers.append(Path(found))
    readonly = [project, cache]
    roots = _roots_cache() if recipe.build.root is not None else None
    if roots is not None and recipe.build.root is not None:
        readonly.append(sysroot.root_dir(roots, recipe.build.root))
    work = cache_layout(cache).work(recipe.name, upstream)
    # writable: what the build writes (worktree, build dir, compile cache); not the work
    # folder itself, where patchkit keeps its log, state and wrappers and reads them back
    return sandbox.prepare(
        [work.src, work.build, cache / "ccache"],
        env,
        readonly=readonly,
        programs=[Path(p) for p in programs],
        compilers=compilers,
        # a build root's compilers run under their own (unprivileged) bwrap
        nested=recipe.build.root is not None,
    )


def _roots_cache() -> Path | None:
    """The user's cache, whose prepared build roots a root recipe's rebuild compiles in
    (builder.sysroot); None when there is none (the build then says to prepare one)."""
    try:
        return cache_dir()
    except ConfigError:
        return None


def rebuild_archive(
    path: Path, opts: RebuildOptions, on_build: Callable[[str], None] | None = None
) -> ArchiveRebuild:
    """Rebuild one archive in a fresh cache and compare; raises only when it cannot.

    Everything it reports (member names, manifest fields, tool versions) is the archive's
    text: every control character in it is escaped (an error's text is escaped where it
    is shown, in cli.rebuild)."""
    res = _rebuild(path, opts, on_build)
    return dataclasses.replace(
        res,
        archive=printable(res.archive),
        differs=tuple(printable(d) for d in res.differs),
        tools=tuple(printable(t) for t in res.tools),
        config=tuple(printable(c) for c in res.config),
        expected=printable(res.expected),
    )


def _rebuild(
    path: Path, opts: RebuildOptions, on_build: Callable[[str], None] | None = None
) -> ArchiveRebuild:
    if opts.smoke and opts.sandbox:
        raise ConfigError(problem=SandboxRefuses(asked="smoke"))
    root, found, members = _read(path)
    manifest, sources, recipe_rel = _sources(path.name, found, members)
    _check_members(path, root, manifest, members)
    scratch = Path(tempfile.mkdtemp(prefix="patchkit-rebuild-"))
    try:
        project = scratch / "project"
        for rel, data in sorted(sources.items()):
            dest = project / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        series = load_series(project / "patches")
        recipe = load_recipe(project / recipe_rel, project, series)
        _refuse_command_defines(path.name, recipe_rel, recipe)
        upstream = opts.upstream or manifest.upstream.url
        smoked = manifest.smoke is not None  # the release's build ran its smoke stage
        out = opts.out or scratch / "out" / recipe.name
        cache = _private_cache(opts.cache, scratch)
        env = dict(opts.env)
        # a compile cache of its own in the rebuild's cache, sandbox or not: the user's is
        # never read (a hit would make "identical" meaningless) nor written
        env["CCACHE_DIR"] = str(cache / "ccache")
        env["SCCACHE_DIR"] = str(cache / "sccache")
        box: Sandbox | None = None
        if opts.sandbox:
            settings = _sandbox_cache_settings(opts, env)
            box = _sandbox(recipe, upstream, cache, project, env)
        else:
            settings = opts.compile_cache or compcache.resolve(
                env=opts.env,
                recipe_remote=recipe.build.cache_remote,
                recipe_launcher=recipe.build.launcher,
                recipe_label=recipe_rel,
            )
        if on_build is not None:
            on_build(
                f"rebuilding {path.name}: recipe {recipe.name}, upstream "
                f"{recipe.upstream.commit[:12]}, {len(recipe.patches)} patch(es), cache {cache}, "
                + (
                    "in a sandbox (bubblewrap: unprivileged, no network, no home, the system read-only)"
                    if box
                    else "NOT sandboxed (--no-sandbox)"
                )
            )
        result = run_build(
            BuildOptions(
                recipe=recipe,
                project=project,
                cache=cache,
                out=out,
                compile_cache=settings,
                env=env,
                upstream=upstream,
                jobs=opts.jobs,
                roots=_roots_cache() if recipe.build.root is not None else None,
                clean=True,
                smoke=smoked,
                smoke_checks=opts.smoke,
                sandbox=box,
            )
        )
        assert result.info is not None  # a full build, never configure-only
        info = result.info
        count, diffs = _compare(manifest, result.out_dir, info)
        diffs += [] if diffs else rebuilt_image_diffs(path, result.out_dir)  # an image beside: its digest
        repro = manifest.reproducible
        expected = repro.why if repro is not None and not repro.any_folder else ""
        return ArchiveRebuild(
            archive=path.name,
            files=count,
            differs=tuple(diffs),
            tools=tuple(_tool_diffs(manifest, info)),
            config=tuple(_config_diffs(manifest, info)),
            out_dir=result.out_dir if opts.out else None,
            expected=expected if diffs else "",
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # the project, and cache/out unless given
