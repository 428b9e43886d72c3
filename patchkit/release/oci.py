"""OCI image files without a daemon: the records and a reproducible writer (the capped,
checking reader is :mod:`patchkit.release.oci_read`).

The file is an OCI image layout in a tar (``oci-layout``, ``index.json``,
``blobs/sha256/<hex>``) that also carries Docker's ``manifest.json``, the way ``docker
save`` writes it since Docker 25: ``podman load`` / ``skopeo`` read it as an
``oci-archive``, ``docker load`` (any version) and ``skopeo``'s ``docker-archive:``
transport read the same bytes through ``manifest.json``. One file, both tools, no
conversion, and the manifest digest a registry keeps when it is pushed as it is
(``skopeo copy --preserve-digests``).

Reproducible: every tar (the outer one and each layer) holds its entries sorted, with
one mtime, owner 0:0 with empty names unless an entry says otherwise, no host paths, no
hard links, and each layer is gzip at level 9 with mtime 0 and no file name (the same
zlib dependency as the release's ``.tar.gz``). The JSON blobs are compact with sorted
keys.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import re
import tarfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from patchkit.core.fs import atomic_file, sha256_stream
from patchkit.core.record import Record, encode, meta
from patchkit.release.archive import Member, unsafe_member_name

__all__ = [
    "JSON_MAX",
    "MAX_HISTORY",
    "MAX_LAYERS",
    "MEDIA_CONFIG",
    "MEDIA_INDEX",
    "MEDIA_LAYER",
    "MEDIA_MANIFEST",
    "ContainerConfig",
    "Descriptor",
    "Dir",
    "DockerEntry",
    "ImageConfig",
    "ImageSpec",
    "LayerSpec",
    "OciIndex",
    "OciManifest",
    "WrittenImage",
    "iso_time",
    "write_image",
]

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
REF_NAME = "org.opencontainers.image.ref.name"
CONTAINERD_NAME = "io.containerd.image.name"

JSON_MAX = 1 << 20  # index.json, manifest.json, an image manifest or config: a few KiB each
MAX_LAYERS = 16  # a release image has 2 or 3
MAX_HISTORY = 64  # one entry per layer, and a few empty ones at most
_LEVEL = 9
_CHUNK = 1 << 16
_BLOB = re.compile(r"^blobs/sha256/([0-9a-f]{64})$")
_DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")
_TOP = ("index.json", "manifest.json", "oci-layout")
_TAR_SLACK = 1 << 20  # a layer's uncompressed stream past its members (end blocks, padding)


# -- the JSON of an image (OCI image spec v1.1, Docker's `docker save` manifest.json) ---------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Descriptor(Record):
    media_type: str = dataclasses.field(metadata=meta(key="mediaType"))
    digest: str
    size: int
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict, metadata=meta(omit="empty"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class OciIndex(Record):
    schema_version: int = dataclasses.field(metadata=meta(key="schemaVersion"))
    media_type: str = dataclasses.field(default=MEDIA_INDEX, metadata=meta(key="mediaType"))
    manifests: tuple[Descriptor, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class OciManifest(Record):
    schema_version: int = dataclasses.field(metadata=meta(key="schemaVersion"))
    media_type: str = dataclasses.field(default=MEDIA_MANIFEST, metadata=meta(key="mediaType"))
    config: Descriptor
    layers: tuple[Descriptor, ...]
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict, metadata=meta(omit="empty"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContainerConfig(Record):
    user: str = dataclasses.field(default="", metadata=meta(key="User", omit="empty"))
    env: tuple[str, ...] = dataclasses.field(default=(), metadata=meta(key="Env", omit="empty"))
    entrypoint: tuple[str, ...] = dataclasses.field(default=(), metadata=meta(key="Entrypoint", omit="empty"))
    cmd: tuple[str, ...] = dataclasses.field(default=(), metadata=meta(key="Cmd", omit="empty"))
    exposed_ports: Mapping[str, Mapping[str, Any]] = dataclasses.field(
        default_factory=dict, metadata=meta(key="ExposedPorts", omit="empty")
    )
    working_dir: str = dataclasses.field(default="", metadata=meta(key="WorkingDir", omit="empty"))
    labels: Mapping[str, str] = dataclasses.field(
        default_factory=dict, metadata=meta(key="Labels", omit="empty")
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class RootFs(Record):
    type: str
    diff_ids: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class History(Record):
    created: str = dataclasses.field(default="", metadata=meta(omit="empty"))
    created_by: str = dataclasses.field(default="", metadata=meta(omit="empty"))
    comment: str = dataclasses.field(default="", metadata=meta(omit="empty"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImageConfig(Record):
    architecture: str
    os: str
    created: str = dataclasses.field(default="", metadata=meta(omit="empty"))
    config: ContainerConfig = dataclasses.field(default_factory=ContainerConfig)
    rootfs: RootFs
    history: tuple[History, ...] = dataclasses.field(default=(), metadata=meta(omit="empty"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class DockerEntry(Record):
    config: str = dataclasses.field(metadata=meta(key="Config"))
    repo_tags: tuple[str, ...] = dataclasses.field(default=(), metadata=meta(key="RepoTags"))
    layers: tuple[str, ...] = dataclasses.field(metadata=meta(key="Layers"))


def _blob_json(record: Record | Sequence[Record]) -> bytes:
    data = [encode(r) for r in record] if isinstance(record, Sequence) else encode(record)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _blob_name(digest: str) -> str:
    return "blobs/sha256/" + digest.removeprefix("sha256:")


# -- writing ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Dir:
    """A folder a layer states (others are implied by its files: 0755, owner 0:0)."""

    path: str
    mode: int = 0o755
    uid: int = 0
    gid: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayerSpec:
    """One layer: ``files`` (archive Members, names relative to /), the folders it states."""

    name: str  # what it is, in the config's history ("system libraries", "bin/")
    files: tuple[Member, ...]
    dirs: tuple[Dir, ...] = ()
    mtime: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImageSpec:
    layers: tuple[LayerSpec, ...]
    config: ContainerConfig
    annotations: Mapping[str, str]  # the image manifest's (and the index entry's)
    ref: str  # repository:tag, e.g. localhost/patchkit/llama:llama-b10566-...
    created: int  # seconds (SOURCE_DATE_EPOCH)
    architecture: str = "amd64"
    os: str = "linux"


@dataclasses.dataclass(frozen=True, kw_only=True)
class WrittenImage:
    path: Path
    sha256: str  # of the file
    digest: str  # of the image manifest ("sha256:..."): what podman and a registry show
    config_digest: str  # the image ID
    layers: tuple[Descriptor, ...]
    diff_ids: tuple[str, ...]
    size: int


def iso_time(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _tar_info(
    name: str, *, kind: bytes, mode: int, mtime: int, uid: int = 0, gid: int = 0
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = mtime
    info.uid, info.gid = uid, gid
    info.uname = info.gname = ""
    return info


def _layer_entries(layer: LayerSpec) -> list[tuple[str, Dir | Member]]:
    """Every entry of a layer, folders implied by files included, sorted by name."""
    for m in layer.files:
        why = unsafe_member_name(m.name)
        if why:
            raise ValueError(f"layer {layer.name}: {m.name!r}: {why}")
    entries: dict[str, Dir | Member] = {}
    for d in layer.dirs:
        entries[d.path.rstrip("/")] = d
    for m in layer.files:
        parts = m.name.split("/")
        for i in range(1, len(parts)):
            entries.setdefault("/".join(parts[:i]), Dir(path="/".join(parts[:i])))
        if m.name in entries:
            raise ValueError(f"layer {layer.name}: {m.name} is given twice")
        entries[m.name] = m
    return sorted(entries.items())


class _Hashing(io.RawIOBase):
    """A write-only stream that hashes and counts what goes through it to ``f``."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f, self.h, self.n = f, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        data = bytes(b)
        self.h.update(data)
        self.n += len(data)
        self.f.write(data)
        return len(data)


def _write_layer(layer: LayerSpec, f: IO[bytes]) -> tuple[str, str, int]:
    """The layer as gzip'd tar into ``f``: (digest, diff_id, compressed size)."""
    outer = _Hashing(f)
    with gzip.GzipFile(filename="", mode="wb", fileobj=outer, mtime=0, compresslevel=_LEVEL) as gz:
        inner = _Hashing(gz)  # type: ignore[arg-type]
        with tarfile.open(fileobj=inner, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for name, e in _layer_entries(layer):
                if isinstance(e, Dir):
                    tar.addfile(
                        _tar_info(
                            name + "/",
                            kind=tarfile.DIRTYPE,
                            mode=e.mode,
                            mtime=layer.mtime,
                            uid=e.uid,
                            gid=e.gid,
                        )
                    )
                    continue
                info = _tar_info(name, kind=tarfile.REGTYPE, mode=e.mode, mtime=layer.mtime)
                info.size = e.size
                with e.open() as src:
                    tar.addfile(info, src)
    return "sha256:" + outer.h.hexdigest(), "sha256:" + inner.h.hexdigest(), outer.n


def write_image(path: Path, spec: ImageSpec, *, stage: Path) -> WrittenImage:
    """The image of ``spec`` into ``path`` (an OCI layout tar with Docker's manifest.json),
    atomically: layers are spooled under ``stage`` first, then the file is written beside
    ``path`` and renamed over it. ValueError for a spec that cannot be written (a bad name)."""
    if not 0 < len(spec.layers) <= MAX_LAYERS:
        raise ValueError(f"an image has 1 to {MAX_LAYERS} layers, not {len(spec.layers)}")
    blobs: dict[str, bytes | Path] = {}
    layers: list[Descriptor] = []
    diff_ids: list[str] = []
    for i, layer in enumerate(spec.layers):
        spool = stage / f"layer-{i}.tar.gz"
        with spool.open("wb") as f:
            digest, diff_id, size = _write_layer(layer, f)
        blobs[digest] = spool
        layers.append(Descriptor(media_type=MEDIA_LAYER, digest=digest, size=size))
        diff_ids.append(diff_id)
    created = iso_time(spec.created)
    config = ImageConfig(
        architecture=spec.architecture,
        os=spec.os,
        created=created,
        config=spec.config,
        rootfs=RootFs(type="layers", diff_ids=tuple(diff_ids)),
        history=tuple(
            History(created=created, created_by=f"patchkit: {layer.name}") for layer in spec.layers
        ),
    )
    config_data = _blob_json(config)
    config_desc = Descriptor(media_type=MEDIA_CONFIG, digest=_digest(config_data), size=len(config_data))
    blobs[config_desc.digest] = config_data
    manifest = OciManifest(
        schema_version=2, config=config_desc, layers=tuple(layers), annotations=dict(spec.annotations)
    )
    manifest_data = _blob_json(manifest)
    manifest_digest = _digest(manifest_data)
    blobs[manifest_digest] = manifest_data
    tag = spec.ref.rsplit(":", 1)[1]
    index = OciIndex(
        schema_version=2,
        manifests=(
            Descriptor(
                media_type=MEDIA_MANIFEST,
                digest=manifest_digest,
                size=len(manifest_data),
                annotations={REF_NAME: tag, CONTAINERD_NAME: spec.ref},
            ),
        ),
    )
    docker = (
        DockerEntry(
            config=_blob_name(config_desc.digest),
            repo_tags=(spec.ref,),
            layers=tuple(_blob_name(d.digest) for d in layers),
        ),
    )
    top: dict[str, bytes | Path] = {
        "index.json": _blob_json(index),
        "manifest.json": _blob_json(docker),
        "oci-layout": b'{"imageLayoutVersion":"1.0.0"}',
    }
    with atomic_file(path, mode=0o644) as (f, _):
        with tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for d in ("blobs/", "blobs/sha256/"):
                tar.addfile(_tar_info(d, kind=tarfile.DIRTYPE, mode=0o755, mtime=spec.created))
            named = {_blob_name(k): v for k, v in blobs.items()} | top
            for name in sorted(named):
                body = named[name]
                info = _tar_info(name, kind=tarfile.REGTYPE, mode=0o644, mtime=spec.created)
                if isinstance(body, Path):
                    info.size = body.stat().st_size
                    with body.open("rb") as src:
                        tar.addfile(info, src)
                else:
                    info.size = len(body)
                    tar.addfile(info, io.BytesIO(body))
        f.flush()
        size = f.tell()
        f.seek(0)
        sha = sha256_stream(f)
    return WrittenImage(
        path=path,
        sha256=sha,
        digest=manifest_digest,
        config_digest=config_desc.digest,
        layers=tuple(layers),
        diff_ids=tuple(diff_ids),
        size=size,
    )
