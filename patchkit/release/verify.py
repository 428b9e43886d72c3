"""`patchkit verify DIR`: recompute everything a release folder claims; list each difference.

Checked, each difference one line naming the file:
- SHA256SUMS: well-formed, every listed file present with that sha256, and every
  archive / manifest copy in DIR listed;
- each archive: readable; one top folder named after the archive; a manifest.json
  in canonical form that reads as a manifest (spec.manifest: else one line naming the
  key that does not fit, and the checks below that need its fields are not made)
  whose ``name``/``archive`` match the file and whose name can be
  recomputed from its own fields; every member listed in the manifest's ``files``
  with the same sha256, size and mode and no member missing or extra; the layout a
  release writes (sorted, declared mtime, owner 0:0, gzip header without name/time);
  smoke not passed only with an ``unsmoked`` waiver;
- ``<name>.manifest.json`` beside the archive: identical to the manifest inside
  (else the differing keys are named);
- every ELF member: RUNPATH/RPATH entries `$ORIGIN`-based only (no empty entry, which
  is the current directory, no relative or absolute path);
- the C library floor (release.floor): recomputed from the ELF members' version needs,
  equal to the manifest's ``floor``, no file above the floor it states;
- the import check (release.imports) on the archive's bin/, with the CUDA runtime
  archive its manifest names (present, that sha256), and its recorded ``imports``;
- ``<name>.intoto.json`` beside the archive: the in-toto provenance statement that
  follows from the archive's sha256 and its manifest (release.provenance); with
  ``allowed_signers``, its ``.sig`` must be a good ssh-keygen signature of a trusted key;
  with a container image beside the archive, the statement names it too;
- each ``<name>.oci.tar`` (release.image): read without unpacking (release.oci_read: every
  blob's digest, each layer's diff_id, every layer member safe), its files under
  /opt/llama the archive manifest's ``bin/`` and ``LICENSE`` with their sha256 (and the
  CUDA runtime archive's), its manifest.json the archive's, its annotations and layout.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from patchkit.binary.elf import rpath_problems
from patchkit.core.errors import ReleaseError
from patchkit.core.fs import sha256_file
from patchkit.core.record import JsonValue, RecordError
from patchkit.core.text import diff_keys, printable
from patchkit.release import floor, image, oci_read, provenance
from patchkit.release.archive import (
    ARCHIVE_SUFFIXES,
    DEFAULT_LIMITS,
    ArchiveRefused,
    EntryInfo,
    archive_kind,
    check_archive,
    read_archive,
)
from patchkit.release.imports import LIBRARY_NAME, archive_binaries, check_imports
from patchkit.release.names import archive_name, runtime_name, variant_name
from patchkit.release.release import SUMS, read_sums
from patchkit.spec import cpuvariants
from patchkit.spec.manifest import (
    FileEntry,
    Manifest,
    ReleaseManifest,
    RuntimeFile,
    RuntimeManifest,
    RuntimeRef,
    dump_manifest,
    parse_manifest,
)

__all__ = ["VerifyReport", "verify_dir"]

_MAX_KEYS = 6
SUMS_MAX = 1 << 20  # SHA256SUMS: a line per file
SIGNERS_MAX = 1 << 20  # --allowed-signers: a line per trusted key
_REFUSED_HINT = "it is not an archive `patchkit release` wrote; do not unpack it"


def _not_plain(path: Path) -> str:
    """Why ``path`` is not a plain file verify may read ('' if it is): a link is never
    followed (it could lead anywhere on this host), a FIFO or device never opened."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink (not followed)"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    return ""


def _json(data: bytes) -> JsonValue:
    """JSON from bytes; ValueError for anything that is not (too deep included)."""
    try:
        value: JsonValue = json.loads(data.decode("utf-8"))
        return value
    except RecursionError:
        raise ValueError("nested too deeply") from None


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifyReport:
    directory: Path
    archives: tuple[str, ...]
    differences: tuple[str, ...]
    # each archive's manifest as verify read it (from inside the archive)
    manifests: tuple[tuple[str, Manifest], ...] = ()
    images: tuple[str, ...] = ()  # the container image files (release.image)

    @property
    def ok(self) -> bool:
        return not self.differences

    @property
    def floors(self) -> tuple[tuple[str, ReleaseManifest], ...]:
        """Each archive whose manifest states a C library floor, with that manifest."""
        return tuple(
            (name, m) for name, m in self.manifests if isinstance(m, ReleaseManifest) and m.floor is not None
        )

    def is_runtime(self, archive: str) -> bool:
        """Whether ``archive`` is a CUDA runtime archive (NVIDIA's files) by its manifest."""
        return isinstance(dict(self.manifests).get(archive), RuntimeManifest)


def _short(sha: str) -> str:
    return f"{sha[:12]}…"


def check_members(
    label: str, root: str, entries: list[EntryInfo], files: Sequence[FileEntry | RuntimeFile]
) -> list[str]:
    diffs: list[str] = []
    listed = {f.path: f for f in files}
    present = {e.name[len(root) + 1 :]: e for e in entries if e.name.startswith(f"{root}/")}
    for rel in sorted(set(listed) - set(present)):
        diffs.append(f"{label}: {rel} is in the manifest but missing from the archive")
    for rel in sorted(set(present) - set(listed) - {"manifest.json"}):
        diffs.append(f"{label}: {rel} is in the archive but not in the manifest")
    for rel in sorted(set(listed) & set(present)):
        want, got = listed[rel], present[rel]
        if got.sha256 != want.sha256:
            diffs.append(
                f"{label}: {rel}: sha256 is {_short(got.sha256)}, the manifest says {_short(want.sha256)}"
            )
        if got.size != want.size:
            diffs.append(f"{label}: {rel}: size is {got.size}, the manifest says {want.size}")
        if f"{got.mode:o}" != want.mode:
            diffs.append(f"{label}: {rel}: mode is {got.mode:o}, the manifest says {want.mode}")
    return diffs


def _check_runpaths(label: str, root: str, entries: list[EntryInfo]) -> list[str]:
    """One line per ELF member that searches outside `$ORIGIN` (its first bad entry) or
    whose dynamic section cannot be read."""
    diffs: list[str] = []
    for e in entries:
        rel = e.name[len(root) + 1 :] if e.name.startswith(f"{root}/") else e.name
        if e.elf_error is not None:
            diffs.append(f"{label}: {rel}: cannot read its ELF dynamic section ({e.elf_error})")
        elif e.elf is not None:
            problems = rpath_problems(e.elf)
            if problems:
                diffs.append(
                    f"{label}: {rel}: {problems[0].describe()}; a shipped binary may only search $ORIGIN"
                )
    return diffs


def _check_archive_file(
    dist: Path,
    name: str,
    allowed_signers: Path | None = None,
    manifests: dict[str, Manifest] | None = None,
    *,
    images: dict[str, provenance.ImageSubject] | None = None,
    datas: dict[str, bytes] | None = None,
) -> list[str]:
    """``manifests``: where the archive's manifest goes, when it parses (and its bytes
    into ``datas``); ``images``: the container images found beside, by their stem."""
    path = dist / name
    root = name[: -len("." + archive_kind(name))]
    why = _not_plain(path)
    if why:
        return [f"{name}: {why}"]
    try:
        entries = read_archive(path, keep=[f"{root}/manifest.json"], inspect_elf=True)
    except ArchiveRefused as e:
        raise ReleaseError(printable(f"{name}: refused: {e}"), hint=_REFUSED_HINT) from None
    except ValueError as e:
        return [f"{name}: {e}"]
    inner = next((e for e in entries if e.name == f"{root}/manifest.json"), None)
    if inner is None or inner.data is None:
        return [f"{name}: has no {root}/manifest.json"]
    try:
        raw = _json(inner.data)
        if not isinstance(raw, dict):
            raise ValueError("not an object")
        canonical = dump_manifest(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        return [f"{name}: manifest.json is not valid JSON ({str(e)[:200]})"]

    diffs: list[str] = []
    if canonical != inner.data:
        diffs.append(f"{name}: manifest.json is not in canonical form (edited by hand?)")
    manifest: Manifest | None = None
    try:
        manifest = parse_manifest(raw)
    except RecordError as e:
        diffs.append(f"{name}: manifest.json: {e.key} is missing or not the expected type")
    if manifest is not None:
        diffs += _check_manifest(dist, name, root, path, entries, manifest)
        if manifests is not None:
            manifests[name] = manifest
        if datas is not None:
            datas[name] = inner.data
    side = dist / f"{root}.manifest.json"
    side_why = _not_plain(side) if os.path.lexists(side) else ""
    if not os.path.lexists(side):
        diffs.append(f"{side.name}: missing (the copy of {name}'s manifest)")
    elif side_why:
        diffs.append(f"{side.name}: {side_why}")
    elif side.stat().st_size > DEFAULT_LIMITS.keep:
        diffs.append(
            f"{side.name}: larger than {DEFAULT_LIMITS.keep >> 20} MiB, so not the manifest inside {name}"
        )
    elif side.read_bytes() != inner.data:
        try:
            keys = diff_keys(raw, _json(side.read_bytes()))
            what = ", ".join(keys[:_MAX_KEYS]) + (
                f" (+{len(keys) - _MAX_KEYS} more)" if len(keys) > _MAX_KEYS else ""
            )
            what = what or "formatting only"
        except (ValueError, UnicodeDecodeError, RecursionError):
            what = "it is not valid JSON"
        diffs.append(f"{side.name}: differs from the manifest inside {name}: {what}")
    if isinstance(manifest, ReleaseManifest):  # a runtime archive: NVIDIA's files, no build to attest
        diffs += provenance.check_beside(
            dist,
            archive=name,
            stem=root,
            manifest=manifest,
            manifest_data=inner.data,
            allowed_signers=allowed_signers,
            image=(images or {}).get(root),
        )
    return diffs


def _expected_name(manifest: Manifest) -> tuple[str, str, str]:
    """(stem, suffix, variant) that follow from a manifest's own fields."""
    if isinstance(manifest, ReleaseManifest):
        stem, suffix = archive_name(manifest)
        return stem, suffix, variant_name(manifest)
    stem, suffix = runtime_name(manifest.platform.os, manifest.platform.arch, manifest.cuda.version)
    return stem, suffix, f"cuda{manifest.cuda.version}"


def _check_manifest(
    dist: Path, name: str, root: str, path: Path, entries: list[EntryInfo], manifest: Manifest
) -> list[str]:
    """What the fields of an archive's manifest say that the archive does not hold."""
    diffs: list[str] = []
    if manifest.archive != name:
        diffs.append(f"{name}: the manifest names the archive {manifest.archive!r}")
    if manifest.name != root:
        diffs.append(f"{name}: the manifest names the top folder {manifest.name!r}")
    try:
        stem, suffix, variant = _expected_name(manifest)
        if stem + suffix != name:
            diffs.append(
                f"{name}: the manifest's upstream/series/platform/cuda fields give the name {stem + suffix}"
            )
        if manifest.variant != variant:
            diffs.append(
                f"{name}: the manifest's variant {manifest.variant!r} does not "
                f"follow from its fields ({variant!r})"
            )
    except ReleaseError as e:
        diffs.append(f"{name}: cannot recompute the archive name from the manifest ({str(e)[:200]})")
    diffs += check_members(name, root, entries, manifest.files)
    diffs += _check_runpaths(name, root, entries)
    diffs += _verify_imports(dist, name, root, manifest)
    mtime = manifest.source_date_epoch
    if 0 <= mtime < 1 << 40:
        diffs += [f"{name}: {p}" for p in check_archive(path, entries, root=root, mtime=mtime)]
    else:
        diffs.append(f"{name}: the manifest has no (valid) source_date_epoch")
    if isinstance(manifest, ReleaseManifest):
        status = manifest.smoke.status if manifest.smoke is not None else None
        if status != "passed" and "unsmoked" not in manifest.waivers:
            diffs.append(f"{name}: smoke {status or 'not run'} but the manifest records no 'unsmoked' waiver")
        diffs += _check_floor(name, root, entries, manifest)
        diffs += _check_cpu_variants(name, manifest)
    return diffs


def _check_floor(name: str, root: str, entries: list[EntryInfo], manifest: ReleaseManifest) -> list[str]:
    """The C library floor recomputed from the archive's ELF members (release.floor); a
    member with other bytes than the manifest says, or an unreadable ELF one, is reported
    by the checks above and not compared again."""
    listed = {f.path: f.sha256 for f in manifest.files}
    mine = {e.name[len(root) + 1 :]: e for e in entries if e.name.startswith(f"{root}/bin/")}
    elves = {rel: e.elf for rel, e in mine.items() if e.elf is not None}
    skip = frozenset(rel for rel, e in mine.items() if e.elf_error is not None or listed.get(rel) != e.sha256)
    return floor.verify_floor(name, manifest, elves, skip)


def _check_cpu_variants(name: str, manifest: ReleaseManifest) -> list[str]:
    """The CPU variants a manifest names are modules of its archive, and its CPU model
    table is the one they give (spec.cpuvariants; models this patchkit does not know are
    left as they are)."""
    record = manifest.cpu_variants
    if record is None:
        return []
    types = {f.path: f.type for f in manifest.files}
    diffs = [
        f"{name}: cpu_variants names {v.file}, which is not a module (MODULE_LIBRARY) of the archive"
        for v in record.variants
        if types.get(v.file) != "MODULE_LIBRARY"
    ]
    want = {m.name: v for m, v in cpuvariants.model_table(record.names)}
    for m in record.models:
        if m.model in want and want[m.model] != m.variant:
            diffs.append(
                f"{name}: cpu_variants says {m.model} loads {m.variant or 'none'}, but the built "
                f"variants give {want[m.model] or 'none'}"
            )
    return diffs


def _check_signers_file(path: Path) -> None:
    """``--allowed-signers`` is read by ssh-keygen once per statement: a FIFO (or a device)
    would stall each read until its deadline, /dev/zero would never end. It must be a
    regular file (a link to one is the user's own choice) of at most SIGNERS_MAX bytes."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise ReleaseError(f"--allowed-signers {path}: cannot be read ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ReleaseError(
            f"--allowed-signers {path}: not a regular file (a FIFO or device is never read)",
            hint="pass an OpenSSH allowed-signers file (man ssh-keygen, ALLOWED SIGNERS)",
        )
    if st.st_size > SIGNERS_MAX:
        raise ReleaseError(
            f"--allowed-signers {path}: larger than {SIGNERS_MAX >> 20} MiB, so not an allowed-signers file"
        )


def verify_dir(dist: Path, *, allowed_signers: Path | None = None) -> VerifyReport:
    """Every difference between what DIR claims and what it holds (empty: all good)."""
    if not dist.is_dir():
        raise ReleaseError(f"{dist} is not a folder", hint="pass the --out folder of `patchkit release`")
    if allowed_signers is not None:
        _check_signers_file(allowed_signers)
    diffs: list[str] = []
    sums_path = dist / SUMS
    sums: dict[str, str] = {}
    sums_why = _not_plain(sums_path) if os.path.lexists(sums_path) else ""
    if not os.path.lexists(sums_path):
        diffs.append(f"{SUMS}: missing")
    elif sums_why:
        diffs.append(f"{SUMS}: {sums_why}")
    elif sums_path.stat().st_size > SUMS_MAX:
        diffs.append(f"{SUMS}: larger than {SUMS_MAX >> 20} MiB, so not one a release wrote")
    else:
        sums, problems = read_sums(sums_path)
        diffs += problems
    for name, want in sorted(sums.items()):
        path = dist / name
        if not os.path.lexists(path):
            diffs.append(f"{name}: listed in {SUMS} but missing")
            continue
        why = _not_plain(path)
        if why:
            diffs.append(f"{name}: listed in {SUMS} but it {why}")
            continue
        got = sha256_file(path)
        if got != want:
            diffs.append(f"{name}: sha256 is {_short(got)}, {SUMS} says {_short(want)}")
    ours = sorted(
        p.name
        for p in dist.iterdir()
        if os.path.lexists(p)
        and not p.is_dir()
        and (
            p.name.endswith(ARCHIVE_SUFFIXES)
            or p.name.endswith(".manifest.json")
            or p.name.endswith(provenance.BESIDE_SUFFIXES)
            or p.name.endswith(image.IMAGE_SUFFIX)
        )
    )
    for name in ours:
        if name not in sums:
            diffs.append(f"{name}: not listed in {SUMS}")
    archives = sorted(
        {
            n
            for n in (*ours, *sums)
            if n.endswith(ARCHIVE_SUFFIXES) and os.path.lexists(dist / n) and not (dist / n).is_dir()
        }
    )
    if not archives and not diffs:
        diffs.append(f"{dist}: no archives to verify")
    images = sorted(
        {n for n in (*ours, *sums) if n.endswith(image.IMAGE_SUFFIX) and os.path.lexists(dist / n)}
    )
    read: dict[str, oci_read.ImageContents] = {}
    subjects: dict[str, provenance.ImageSubject] = {}
    for name in images:
        diffs += _read_image_file(dist, name, read, subjects)
    manifests: dict[str, Manifest] = {}
    datas: dict[str, bytes] = {}
    for name in archives:
        diffs += _check_archive_file(dist, name, allowed_signers, manifests, images=subjects, datas=datas)
    for name, contents in sorted(read.items()):
        diffs += _check_image(name, contents, manifests, datas)
    # member names, manifest and statement fields, file names in DIR: all someone else's
    # text, shown on a terminal: every control character escaped (one line each, no ESC)
    return VerifyReport(
        directory=dist,
        archives=tuple(archives),
        differences=tuple(printable(d) for d in diffs),
        manifests=tuple(sorted(manifests.items())),
        images=tuple(images),
    )


def _read_image_file(
    dist: Path,
    name: str,
    read: dict[str, oci_read.ImageContents],
    subjects: dict[str, provenance.ImageSubject],
) -> list[str]:
    """Read a container image file (release.oci_read: every blob and layer hashed, nothing
    unpacked) into ``read``, and its provenance subject into ``subjects`` by its stem."""
    path = dist / name
    why = _not_plain(path)
    if why:
        return [f"{name}: {why}"]
    try:
        contents = oci_read.read_image(path)
    except ArchiveRefused as e:
        raise ReleaseError(printable(f"{name}: refused: {e}"), hint=_REFUSED_HINT) from None
    except ValueError as e:
        return [f"{name}: {e}"]
    read[name] = contents
    stem = name.removesuffix(image.IMAGE_SUFFIX)
    subjects[stem] = provenance.ImageSubject(
        file=name, sha256=sha256_file(path), ref=f"{image.REPOSITORY}:{stem}", digest=contents.digest
    )
    return []


def _check_image(
    name: str, contents: oci_read.ImageContents, manifests: dict[str, Manifest], datas: dict[str, bytes]
) -> list[str]:
    """An image against the archive of the same name beside it (and the CUDA runtime
    archive that one names)."""
    archive = name.removesuffix(image.IMAGE_SUFFIX) + ".tar.gz"
    manifest = manifests.get(archive)
    if not isinstance(manifest, ReleaseManifest) or archive not in datas:
        return [f"{name}: no readable release archive {archive} beside it to check it against"]
    runtime = None
    if manifest.runtime is not None:
        found = manifests.get(manifest.runtime.archive)
        if not isinstance(found, RuntimeManifest):
            return [f"{name}: the CUDA runtime archive {manifest.runtime.archive} is not beside it"]
        runtime = found
    return image.check_release_image(name, contents, manifest, datas[archive], runtime)


def _verify_imports(dist: Path, name: str, root: str, manifest: Manifest) -> list[str]:
    """verify: the import check on an archive's own bin/ (plus, for a build, the files of
    the CUDA runtime archive its manifest names, which must be in ``dist`` with that
    sha256); the manifest's recorded ``imports`` must be what the archive gives."""
    os_name = manifest.platform.os
    if os_name not in ("linux", "windows"):
        return []
    diffs: list[str] = []
    try:
        binaries, unreadable, files = archive_binaries(dist / name, root)
    except ValueError as e:
        return [f"{name}: import check: {e}"]
    extra: list[str] = []
    if isinstance(manifest, ReleaseManifest) and manifest.runtime is not None:
        extra, why = _runtime_files(dist, manifest.runtime)
        diffs += [f"{name}: {w}" for w in why]
    recorded = manifest.imports
    allow = [a for a in recorded.allowed_extra if LIBRARY_NAME.match(a)] if recorded is not None else []
    report = check_imports(
        binaries, os_name=os_name, files=[*files, *extra], unreadable=unreadable, allow=allow
    )
    diffs += [f"{name}: import check: {p}" for p in report.problems]
    if isinstance(manifest, RuntimeManifest):  # NVIDIA's files: each library must be one
        fmt = "pe" if os_name == "windows" else "elf"
        found = {b.path: b.format for b in binaries}
        for f in manifest.files:
            if f.type == "SHARED_LIBRARY" and found.get(f.path) != fmt:
                diffs.append(
                    f"{name}: {printable(f.path[:200])}: not an {fmt.upper()} shared library "
                    "(a runtime archive ships only NVIDIA's libraries)"
                )
    if recorded is not None and recorded != report.summary():
        diffs.append(
            f"{name}: the manifest's imports {recorded.to_json()!r:.200} are not what its "
            f"binaries import ({report.summary().to_json()!r:.200})"
        )
    return diffs


def _runtime_files(dist: Path, rt: RuntimeRef) -> tuple[list[str], list[str]]:
    archive = rt.archive
    if "/" in archive or "\\" in archive or not archive.startswith("cudart-llama-"):
        return [], [f"the manifest's runtime archive {archive!r:.80} is not a runtime archive name"]
    path = dist / archive
    if not path.is_file() or path.is_symlink():
        return [], [f"the CUDA runtime archive it names, {archive}, is missing"]
    got = sha256_file(path)
    if got != rt.sha256:
        return [], [
            f"the CUDA runtime archive {archive} has sha256 {got[:12]}…, the manifest says {rt.sha256[:12]}…"
        ]
    return list(rt.files), []
