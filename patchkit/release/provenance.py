"""Provenance beside each archive: an in-toto Statement v1 with a SLSA provenance v1 predicate.

``<name>.intoto.json`` (canonical JSON, no timestamps: one release gives one statement)::

    _type          https://in-toto.io/Statement/v1
    subject        [{name: <archive file>, digest: {sha256: <archive sha256>}}]
                   + with a container image beside it (release.image): the image file
                   {name: <name>.oci.tar, digest: {sha256: <file sha256>}} and the image
                   {name: localhost/patchkit/llama:<name>, digest: {sha256: <image manifest digest>}}
    predicateType  https://slsa.dev/provenance/v1
    predicate.buildDefinition
      buildType            BUILD_TYPE
      externalParameters   recipe (name, file, sha256), upstream (url, commit, ref),
                           patches (names, in order), platform, targets
      internalParameters   cmake (generator, build type, defines, toolchain), cuda,
                           source_date_epoch, pe_edits, waivers
      resolvedDependencies llama.cpp (gitCommit), each patch and the recipe (sha256),
                           patchkit and each tool with its version
    predicate.runDetails   builder.id BUILDER_ID (+ patchkit's version);
                           byproducts: the manifest (sha256)

Everything in it follows from the manifest inside the archive, the archive's sha256 and
the image's (when there is one), so `verify` recomputes it and names each key that
differs (``statement_for``). The statement is a :class:`Statement` record (in-toto's
camelCase keys are field metadata), written with the one canonical serialisation
(patchkit.core.record.canonical_json).
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

from patchkit.core.fs import atomic_write_bytes, sha256_bytes, sha256_file
from patchkit.core.record import Record, canonical_json, encode, meta
from patchkit.core.text import diff_keys
from patchkit.release.signing import SIG_SUFFIX, SIGNATURE_MAX, check, sign
from patchkit.spec.buildinfo import CMakeRecord, PeEditRecord, Platform, RecipeRef
from patchkit.spec.manifest import CudaSummary, ReleaseManifest

__all__ = [
    "BESIDE_SUFFIXES",
    "BUILDER_ID",
    "BUILD_TYPE",
    "PREDICATE_TYPE",
    "STATEMENT_MAX",
    "STATEMENT_SUFFIX",
    "STATEMENT_TYPE",
    "BuildDefinition",
    "Builder",
    "ExternalParameters",
    "ImageSubject",
    "InternalParameters",
    "Predicate",
    "ResourceDescriptor",
    "RunDetails",
    "RunMetadata",
    "Statement",
    "UpstreamParameters",
    "check_beside",
    "dump_statement",
    "statement_for",
    "statement_name",
    "write_beside",
]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:patchkit:buildtype:release:v1"
BUILDER_ID = "urn:patchkit:builder:v1"
STATEMENT_SUFFIX = ".intoto.json"
BESIDE_SUFFIXES = (STATEMENT_SUFFIX, STATEMENT_SUFFIX + ".sig")  # listed in SHA256SUMS


# -- the statement (in-toto Statement v1, SLSA provenance v1: their camelCase keys) --------


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResourceDescriptor(Record):
    name: str
    uri: str = dataclasses.field(default="", metadata=meta(omit="empty"))
    digest: Mapping[str, str] = dataclasses.field(default_factory=dict, metadata=meta(omit="empty"))
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict, metadata=meta(omit="empty"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class UpstreamParameters(Record):
    url: str
    commit: str
    ref: str | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExternalParameters(Record):
    recipe: RecipeRef
    upstream: UpstreamParameters
    patches: tuple[str, ...]  # names, in order
    platform: Platform
    targets: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class InternalParameters(Record):
    cmake: CMakeRecord
    cuda: CudaSummary | None
    source_date_epoch: int
    pe_edits: tuple[PeEditRecord, ...]
    waivers: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildDefinition(Record):
    build_type: str = dataclasses.field(metadata=meta(key="buildType"))
    external_parameters: ExternalParameters = dataclasses.field(metadata=meta(key="externalParameters"))
    internal_parameters: InternalParameters = dataclasses.field(metadata=meta(key="internalParameters"))
    resolved_dependencies: tuple[ResourceDescriptor, ...] = dataclasses.field(
        metadata=meta(key="resolvedDependencies")
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Builder(Record):
    id: str
    version: Mapping[str, str]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunMetadata(Record):
    invocation_id: str = dataclasses.field(metadata=meta(key="invocationId"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunDetails(Record):
    builder: Builder
    metadata: RunMetadata
    byproducts: tuple[ResourceDescriptor, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Predicate(Record):
    build_definition: BuildDefinition = dataclasses.field(metadata=meta(key="buildDefinition"))
    run_details: RunDetails = dataclasses.field(metadata=meta(key="runDetails"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Statement(Record):
    type: str = dataclasses.field(default=STATEMENT_TYPE, metadata=meta(key="_type"))
    subject: tuple[ResourceDescriptor, ...]
    predicate_type: str = dataclasses.field(default=PREDICATE_TYPE, metadata=meta(key="predicateType"))
    predicate: Predicate


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImageSubject:
    """A container image of the release: its file and the image itself (its manifest's
    digest, what a registry and ``podman images --digests`` show)."""

    file: str
    sha256: str
    ref: str
    digest: str  # "sha256:<hex>"

    def descriptors(self) -> tuple[ResourceDescriptor, ...]:
        return (
            ResourceDescriptor(name=self.file, digest={"sha256": self.sha256}),
            ResourceDescriptor(name=self.ref, digest={"sha256": self.digest.removeprefix("sha256:")}),
        )


def statement_name(stem: str) -> str:
    return stem + STATEMENT_SUFFIX


def _purl_version(v: str) -> str:
    return urllib.parse.quote(v, safe=".+-_")


def _tool(name: str, version: str) -> ResourceDescriptor:
    return ResourceDescriptor(
        name=name,
        uri=f"pkg:generic/{urllib.parse.quote(name, safe='')}@{_purl_version(version)}",
        annotations={"version": version},
    )


def _deps(manifest: ReleaseManifest) -> list[ResourceDescriptor]:
    up, recipe = manifest.upstream, manifest.recipe
    deps = [
        ResourceDescriptor(
            name="llama.cpp", uri=f"git+{up.url}@{up.commit}", digest={"gitCommit": up.commit}
        ),
        ResourceDescriptor(
            name=f"recipe:{recipe.name}", uri=f"file:{recipe.file}", digest={"sha256": recipe.sha256}
        ),
    ]
    deps += [
        ResourceDescriptor(
            name=f"patch:{p.name}",
            uri=f"file:patches/{p.file}",
            digest={"sha256": p.sha256},
            annotations={"result": p.result.value},
        )
        for p in manifest.patches
    ]
    if manifest.patchkit_version is not None:
        deps.append(_tool("patchkit", manifest.patchkit_version))
    for name, version in sorted(manifest.tools.items()):
        if version is not None:  # a tool that was not used is not a dependency
            deps.append(_tool(name, version))
    return deps


def statement_for(
    archive: str,
    sha256: str,
    manifest: ReleaseManifest,
    manifest_sha256: str,
    image: ImageSubject | None = None,
) -> Statement:
    """The statement for ``archive`` (its sha256) built from its manifest, with the
    container image of the same build as subjects too when there is one."""
    up = manifest.upstream
    return Statement(
        subject=(
            ResourceDescriptor(name=archive, digest={"sha256": sha256}),
            *(image.descriptors() if image is not None else ()),
        ),
        predicate=Predicate(
            build_definition=BuildDefinition(
                build_type=BUILD_TYPE,
                external_parameters=ExternalParameters(
                    recipe=manifest.recipe,
                    upstream=UpstreamParameters(url=up.url, commit=up.commit, ref=up.ref),
                    patches=tuple(p.name for p in manifest.patches),
                    platform=manifest.platform,
                    targets=manifest.targets,
                ),
                internal_parameters=InternalParameters(
                    cmake=manifest.cmake,
                    cuda=manifest.cuda,
                    source_date_epoch=manifest.source_date_epoch,
                    pe_edits=manifest.pe_edits,
                    waivers=manifest.waivers,
                ),
                resolved_dependencies=tuple(_deps(manifest)),
            ),
            run_details=RunDetails(
                builder=Builder(id=BUILDER_ID, version={"patchkit": manifest.released_by}),
                metadata=RunMetadata(invocation_id=str(manifest.identity)),
                byproducts=(ResourceDescriptor(name="manifest.json", digest={"sha256": manifest_sha256}),),
            ),
        ),
    )


def dump_statement(statement: Statement | Mapping[str, object]) -> bytes:
    """The one canonical serialisation (verify compares bytes)."""
    return canonical_json(statement)


def write_beside(
    out_dir: Path,
    *,
    stem: str,
    archive: str,
    sha256: str,
    manifest: ReleaseManifest,
    manifest_data: bytes,
    sign_key: Path | None,
    image: ImageSubject | None = None,
) -> dict[str, Path]:
    """Write ``<stem>.intoto.json`` (and its ``.sig`` with ``sign_key``); {name: path}."""
    data = dump_statement(statement_for(archive, sha256, manifest, sha256_bytes(manifest_data), image))
    sig = sign(data, sign_key) if sign_key is not None else None
    path = out_dir / statement_name(stem)
    atomic_write_bytes(path, data, mode=0o644)
    out = {path.name: path}
    if sig is not None:
        sig_path = out_dir / (path.name + SIG_SUFFIX)
        atomic_write_bytes(sig_path, sig, mode=0o644)
        out[sig_path.name] = sig_path
    return out


STATEMENT_MAX = 4 << 20  # a statement is a few KiB


def check_beside(
    dist: Path,
    *,
    archive: str,
    stem: str,
    manifest: ReleaseManifest,
    manifest_data: bytes,
    allowed_signers: Path | None,
    image: ImageSubject | None = None,
) -> list[str]:
    """Each way ``<stem>.intoto.json`` (and its signature) beside ``archive`` is wrong
    (``image``: the container image beside it, as verify found it)."""

    def plain(p: Path) -> str:
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            return "missing"
        except OSError as e:
            return f"cannot be read ({e.strerror or e})"
        if not stat.S_ISREG(st.st_mode):
            return "is not a regular file (not followed)"
        return ""

    name = statement_name(stem)
    path = dist / name
    why = plain(path)
    if why:
        return [f"{name}: {why} (the provenance of {archive})"]
    if path.stat().st_size > STATEMENT_MAX:
        return [f"{name}: larger than {STATEMENT_MAX >> 20} MiB, so not one a release wrote"]
    data = path.read_bytes()
    statement = statement_for(
        archive, sha256_file(dist / archive), manifest, sha256_bytes(manifest_data), image
    )
    want = dump_statement(statement)
    diffs: list[str] = []
    if data != want:
        try:
            got = json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            got = None
        if not isinstance(got, dict):
            diffs.append(f"{name}: not a JSON in-toto statement")
        else:
            keys = diff_keys(encode(statement), got)
            shown = ", ".join(keys[:6]) + (f" (+{len(keys) - 6} more)" if len(keys) > 6 else "")
            diffs.append(f"{name}: does not match {archive} and its manifest: {shown or 'formatting only'}")
    if allowed_signers is not None:
        sig_path = dist / (name + SIG_SUFFIX)
        why = plain(sig_path)
        if why:
            diffs.append(f"{sig_path.name}: {why} (--allowed-signers asks for a signature)")
        elif sig_path.stat().st_size > SIGNATURE_MAX:
            diffs.append(f"{sig_path.name}: larger than {SIGNATURE_MAX >> 10} KiB, not an SSH signature")
        else:
            res = check(data, sig_path.read_bytes(), allowed_signers)
            if not res.ok:
                diffs.append(f"{sig_path.name}: {res.problem}")
    return diffs
