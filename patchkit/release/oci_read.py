"""OCI image files read without unpacking: a capped, checking reader (the writer and the
records are :mod:`patchkit.release.oci`).

Reading trusts nothing: every JSON blob is capped (:data:`~patchkit.release.oci.JSON_MAX`),
every tar header read through :class:`~patchkit.core.tarcap.CappedReader`, members, bytes
and time budgeted as for an archive (:class:`~patchkit.release.archive.Limits`); each blob
is hashed and compared with its name, each layer's uncompressed stream with the config's
``diff_ids``; a layer member that is not a plain file or folder with a safe name (``..``,
absolute, a device, a FIFO, a hard or symbolic link, a whiteout) is a problem, one line
each. Nothing is ever unpacked.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import io
import json
import stat
import tarfile
import tempfile
import time
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from patchkit.core.record import RecordError, decode
from patchkit.core.tarcap import CappedReader
from patchkit.release.archive import DEFAULT_LIMITS, ArchiveRefused, Limits, unsafe_member_name
from patchkit.release.oci import (
    _BLOB,
    _CHUNK,
    _DIGEST,
    _TAR_SLACK,
    _TOP,
    JSON_MAX,
    MAX_HISTORY,
    MAX_LAYERS,
    MEDIA_CONFIG,
    MEDIA_LAYER,
    MEDIA_LAYER_TAR,
    Descriptor,
    DockerEntry,
    ImageConfig,
    LayerSpec,
    OciIndex,
    OciManifest,
    RootFs,
    _blob_json,
    _blob_name,
    _digest,
    _write_layer,
)

__all__ = [
    "ImageContents",
    "LayerContents",
    "LayerEntry",
    "check_layout",
    "iter_files",
    "read_image",
    "rewrite_top_layer",
]

# -- reading ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayerEntry:
    """One member of a layer as found (nothing is unpacked)."""

    path: str  # without a leading "./" or trailing "/"
    is_dir: bool
    sha256: str  # "" for a folder
    size: int
    mode: int
    mtime: int
    uid: int
    gid: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayerContents:
    descriptor: Descriptor
    diff_id: str  # as computed
    entries: tuple[LayerEntry, ...]  # the plain files and folders (problems left out)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImageContents:
    """An image file as read: ``problems`` says what is wrong, one line each (empty: a
    well-formed image whose every digest holds)."""

    digest: str  # of the image manifest ("" when there is none to name)
    manifest: OciManifest | None
    config: ImageConfig | None
    ref: str  # the docker manifest's RepoTags[0] ("" when absent)
    layers: tuple[LayerContents, ...]
    outer_names: tuple[str, ...]  # the outer tar's entries in stored order
    outer_mtimes: frozenset[int]
    problems: tuple[str, ...]
    complete: bool  # every layer the manifest names was read (its files are all known)


@dataclasses.dataclass
class _Blob:
    offset: int
    size: int
    sha256: str
    data: bytes | None


class _Budget:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.members = 0
        self.total = 0
        self.deadline = time.monotonic() + limits.seconds

    def member(self) -> None:
        self.members += 1
        if self.members > self.limits.members:
            raise ArchiveRefused(f"more than {self.limits.members} tar members (a bomb?)")

    def add(self, n: int) -> None:
        self.total += n
        if self.total > self.limits.total:
            raise ArchiveRefused(f"its contents inflate past {self.limits.total >> 30} GiB (a bomb?)")
        self.tick()

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise ArchiveRefused(f"reading it took more than {self.limits.seconds:.0f}s")


def _short(digest: str) -> str:
    return digest.removeprefix("sha256:")[:12] + "…"


def _outer(path: Path, budget: _Budget) -> tuple[dict[str, _Blob], list[str], set[int], list[str]]:
    """Pass 1: every outer member hashed (small ones kept); the problems of its layout."""
    blobs: dict[str, _Blob] = {}
    names: list[str] = []
    mtimes: set[int] = set()
    problems: list[str] = []
    with path.open("rb") as f:
        raw = CappedReader(
            f, budget.limits.header + tarfile.BLOCKSIZE, tick=budget.tick, refused=ArchiveRefused
        )
        with tarfile.open(fileobj=raw, mode="r:") as tar:
            for info in tar:
                budget.member()
                name = info.name.removeprefix("./")
                names.append(name)
                mtimes.add(int(info.mtime))
                tar.members.clear()  # type: ignore[attr-defined]
                if info.isdir() and name.rstrip("/") in ("blobs", "blobs/sha256"):
                    continue
                if not info.isreg():
                    problems.append(f"{name[:200]!r}: not a regular file (an image file holds only files)")
                    continue
                if name in blobs:
                    problems.append(f"{name}: appears twice (a reader keeps one of them)")
                    continue
                if not (_BLOB.match(name) or name in ("index.json", "manifest.json", "oci-layout")):
                    problems.append(f"{name[:200]!r}: not a file of an OCI image layout")
                    continue
                src = tar.extractfile(info)
                assert src is not None
                h = hashlib.sha256()
                # only the layout's own files are kept now; a blob is read again by its
                # offset when a manifest names it as JSON (so small blobs cost no memory)
                kept = bytearray() if info.size <= JSON_MAX and name in _TOP else None
                got = 0
                for chunk in iter(functools.partial(src.read, _CHUNK), b""):
                    h.update(chunk)
                    got += len(chunk)
                    budget.add(len(chunk))
                    if kept is not None:
                        kept += chunk
                blobs[name] = _Blob(
                    offset=info.offset_data,
                    size=got,
                    sha256=h.hexdigest(),
                    data=bytes(kept) if kept is not None else None,
                )
    for name, blob in sorted(blobs.items()):
        m = _BLOB.match(name)
        if m and m.group(1) != blob.sha256:
            problems.append(
                f"{name}: its bytes hash to {blob.sha256[:12]}…, not the digest it is named after (tampered?)"
            )
    return blobs, names, mtimes, problems


def _json_blob(path: Path, blobs: dict[str, _Blob], name: str, cls: type[Any], what: str) -> tuple[Any, str]:
    """(record, problem): the blob ``name`` of the image file ``path`` read as ``cls``."""
    blob = blobs.get(name)
    if blob is None:
        return None, f"{what}: {name} is missing"
    if blob.size > JSON_MAX:
        return None, f"{what}: {name} is {blob.size} bytes, more than {JSON_MAX >> 20} MiB of JSON (a bomb?)"
    data = blob.data
    if data is None:
        with path.open("rb") as f:
            f.seek(blob.offset)
            data = f.read(blob.size)
        if hashlib.sha256(data).hexdigest() != blob.sha256:
            return None, f"{what}: {name} changed while it was read"
    try:
        value = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        return None, f"{what}: {name} is not JSON ({str(e)[:120]})"
    try:
        if cls is DockerEntry:
            if not isinstance(value, list) or len(value) != 1:
                return None, f"{what}: {name} must list exactly one image"
            return decode(DockerEntry, value[0], path="[0]"), ""
        return decode(cls, value), ""
    except RecordError as e:
        return None, f"{what}: {name}: {e.key or 'the top'} is missing or not the expected type"


_SAID = "its bytes are not its digest's (said once, above)"


def _descriptor_blob(d: Descriptor, blobs: dict[str, _Blob], what: str) -> str:
    """Why the blob ``d`` names cannot be used ('' when it can; :data:`_SAID` when its
    bytes lie about their digest, which the outer pass reported already)."""
    m = _DIGEST.match(d.digest)
    if not m:
        return f"{what}: digest {d.digest[:80]!r} is not sha256:<64 hex>"
    blob = blobs.get(_blob_name(d.digest))
    if blob is None:
        return f"{what}: blob {_short(d.digest)} is missing"
    if blob.sha256 != m.group(1):
        return _SAID
    if blob.size != d.size:
        return f"{what}: blob {_short(d.digest)} is {blob.size} bytes, its descriptor says {d.size}"
    return ""


class _Window(io.RawIOBase):
    """``size`` bytes of ``f`` from ``offset``: one blob of the outer tar."""

    def __init__(self, f: IO[bytes], offset: int, size: int) -> None:
        self.f, self.left = f, size
        f.seek(offset)

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = min(len(b), self.left)
        if n <= 0:
            return 0
        data = self.f.read(n)
        b[: len(data)] = data
        self.left -= len(data)
        return len(data)


class _HashRead(io.RawIOBase):
    """Reads through ``f`` hashing what passes (a layer's diff_id); seeks forward only,
    by reading (tarfile skips a member's data that way)."""

    def __init__(self, f: IO[bytes], budget: _Budget) -> None:
        self.f, self.h, self.budget, self.pos = f, hashlib.sha256(), budget, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def readinto(self, b: Any) -> int:
        data = self.f.read(len(b))
        self.h.update(data)
        self.budget.add(len(data))
        self.pos += len(data)
        b[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = offset if whence == io.SEEK_SET else self.pos + offset
        if whence not in (io.SEEK_SET, io.SEEK_CUR) or target < self.pos:
            raise ArchiveRefused("the layer's tar stream asks to be read backwards")
        while self.pos < target:
            if not self.read(min(_CHUNK, target - self.pos)):
                break
        return self.pos


def _member_problem(info: tarfile.TarInfo, name: str) -> str:
    if info.islnk():
        return (
            f"{name[:200]!r}: a hard link (to {info.linkname[:200]!r}): an image layer of a release has none"
        )
    if info.issym():
        return f"{name[:200]!r}: a symbolic link (to {info.linkname[:200]!r}): a release's layers have none"
    if info.ischr() or info.isblk():
        return f"{name[:200]!r}: a device node"
    if info.isfifo():
        return f"{name[:200]!r}: a FIFO"
    if not (info.isreg() or info.isdir()) or info.issparse():
        return f"{name[:200]!r}: not a plain file or folder (tar type {info.type!r})"
    why = unsafe_member_name(name)
    if why:
        return f"{name[:200]!r}: {why}"
    if name.rsplit("/", 1)[-1].startswith(".wh."):
        return f"{name[:200]!r}: a whiteout (deletes a file of a lower layer)"
    if info.mode & (stat.S_ISUID | stat.S_ISGID):
        return f"{name[:200]!r}: setuid/setgid mode {info.mode:o}"
    return ""


def _layer(
    f: IO[bytes], blob: _Blob, d: Descriptor, n: int, budget: _Budget
) -> tuple[LayerContents, list[str]]:
    what = f"layer {n + 1} ({_short(d.digest)})"
    window = io.BufferedReader(_Window(f, blob.offset, blob.size))
    compressed = window.peek(2)[:2] == b"\x1f\x8b"
    stream: IO[bytes] = gzip.GzipFile(fileobj=window, mode="rb") if compressed else window  # type: ignore[assignment]
    hashed = _HashRead(stream, budget)
    capped = CappedReader(
        hashed,  # type: ignore[arg-type]
        budget.limits.header + tarfile.BLOCKSIZE,
        tick=budget.tick,
        refused=ArchiveRefused,
    )
    problems: list[str] = []
    entries: list[LayerEntry] = []
    seen: set[str] = set()
    with tarfile.open(fileobj=capped, mode="r:") as tar:
        for info in tar:
            budget.member()
            tar.members.clear()  # type: ignore[attr-defined]
            name = info.name.removeprefix("./").rstrip("/")
            why = _member_problem(info, name)
            if why:
                problems.append(f"{what}: {why}")
                continue
            if name in seen:
                problems.append(f"{what}: {name}: appears twice")
            seen.add(name)
            sha, size = "", 0
            if info.isreg():
                src = tar.extractfile(info)
                assert src is not None
                h = hashlib.sha256()
                for chunk in iter(functools.partial(src.read, _CHUNK), b""):
                    h.update(chunk)
                    size += len(chunk)
                sha = h.hexdigest()
            entries.append(
                LayerEntry(
                    path=name,
                    is_dir=info.isdir(),
                    sha256=sha,
                    size=size,
                    mode=info.mode,
                    mtime=int(info.mtime),
                    uid=info.uid,
                    gid=info.gid,
                )
            )
    # the rest of the stream (end blocks, padding) is part of the diff_id; capped
    rest = 0
    for chunk in iter(lambda: hashed.read(_CHUNK), b""):
        rest += len(chunk)
        if rest > _TAR_SLACK:
            raise ArchiveRefused(f"{what}: more than {_TAR_SLACK >> 20} MiB after its end of archive")
    if d.media_type not in (
        MEDIA_LAYER,
        MEDIA_LAYER_TAR,
        "application/vnd.docker.image.rootfs.diff.tar.gzip",
    ):
        problems.append(f"{what}: media type {d.media_type[:80]!r} is not a tar layer")
    return LayerContents(
        descriptor=d, diff_id="sha256:" + hashed.h.hexdigest(), entries=tuple(entries)
    ), problems


def read_image(path: Path, *, limits: Limits = DEFAULT_LIMITS) -> ImageContents:
    """Read and check an image file without unpacking anything.

    Raises :class:`ArchiveRefused` when it would take more than ``limits`` (a bomb), and
    ValueError with a one-line reason when it is not a readable tar; everything else that
    is wrong is in the result's ``problems``."""
    budget = _Budget(limits)
    try:
        return _read_image(path, budget)
    except ArchiveRefused:
        raise
    except RecursionError:
        raise ArchiveRefused("tar headers chained too deeply (a bomb?)") from None
    except (tarfile.TarError, OSError, EOFError, zlib.error, UnicodeError, OverflowError, ValueError) as e:
        raise ValueError(f"not a readable image file ({str(e)[:200]})") from None


def _read_image(path: Path, budget: _Budget) -> ImageContents:
    blobs, names, mtimes, problems = _outer(path, budget)

    def done(**kw: Any) -> ImageContents:
        base: dict[str, Any] = dict(digest="", manifest=None, config=None, ref="", layers=(), complete=False)
        base.update(kw)
        return ImageContents(
            outer_names=tuple(names), outer_mtimes=frozenset(mtimes), problems=tuple(problems), **base
        )

    layout = blobs.get("oci-layout")
    if layout is None or layout.data is None:
        problems.append("oci-layout is missing (not an OCI image layout)")
    index, why = _json_blob(path, blobs, "index.json", OciIndex, "index.json")
    if index is None:
        problems.append(why)
        return done()
    if len(index.manifests) != 1:
        problems.append(f"index.json lists {len(index.manifests)} images, a release image file holds one")
        return done()
    top = index.manifests[0]
    why = _descriptor_blob(top, blobs, "index.json")
    if why:
        problems += [why] if why is not _SAID else []
        return done()
    manifest, why = _json_blob(path, blobs, _blob_name(top.digest), OciManifest, "image manifest")
    if manifest is None:
        problems.append(why)
        return done(digest=top.digest)
    if len(manifest.layers) > MAX_LAYERS:
        problems.append(f"image manifest: {len(manifest.layers)} layers, more than {MAX_LAYERS} (a bomb?)")
        return done(digest=top.digest, manifest=manifest)
    config: ImageConfig | None = None
    why = _descriptor_blob(manifest.config, blobs, "config")
    if why:
        problems += [why] if why is not _SAID else []
    else:
        config, why = _json_blob(path, blobs, _blob_name(manifest.config.digest), ImageConfig, "config")
        if config is None:
            problems.append(why)
    if config is not None:
        if len(config.history) > MAX_HISTORY:
            problems.append(
                f"config: claims a history of {len(config.history)} entries, more than {MAX_HISTORY}"
            )
        if len(config.rootfs.diff_ids) != len(manifest.layers):
            problems.append(
                f"config: {len(config.rootfs.diff_ids)} diff_ids for {len(manifest.layers)} layers"
            )
    docker, why = _json_blob(path, blobs, "manifest.json", DockerEntry, "manifest.json")
    ref = ""
    if docker is None:
        problems.append(why + " (docker load needs it)")
    else:
        ref = docker.repo_tags[0] if docker.repo_tags else ""
        if docker.config != _blob_name(manifest.config.digest):
            problems.append("manifest.json: names another config than the OCI image manifest")
        if list(docker.layers) != [_blob_name(d.digest) for d in manifest.layers]:
            problems.append("manifest.json: lists other layers than the OCI image manifest")
    layers: list[LayerContents] = []
    with path.open("rb") as f:
        for n, d in enumerate(manifest.layers):
            why = _descriptor_blob(d, blobs, f"layer {n + 1}")
            if why:
                problems += [why] if why is not _SAID else []
                continue
            blob = blobs[_blob_name(d.digest)]
            try:
                layer, found = _layer(f, blob, d, n, budget)
            except (OSError, EOFError, zlib.error, tarfile.TarError) as e:
                problems.append(
                    f"layer {n + 1} ({_short(d.digest)}): not a readable tar layer ({str(e)[:120]})"
                )
                continue
            problems += found
            layers.append(layer)
            if config is not None and n < len(config.rootfs.diff_ids):
                want = config.rootfs.diff_ids[n]
                if layer.diff_id != want:
                    problems.append(
                        f"layer {n + 1} ({_short(d.digest)}): its content hashes to {_short(layer.diff_id)}, "
                        f"the config's diff_id says {_short(want)}"
                    )
    complete = len(layers) == len(manifest.layers)
    used = {
        _blob_name(top.digest),
        _blob_name(manifest.config.digest),
        *(_blob_name(d.digest) for d in manifest.layers),
    }
    for name in sorted(set(blobs) - used - {"index.json", "manifest.json", "oci-layout"}):
        problems.append(f"{name}: a blob no manifest names")
    return done(
        digest=top.digest, manifest=manifest, config=config, ref=ref, layers=tuple(layers), complete=complete
    )


def iter_files(contents: ImageContents) -> Iterator[tuple[int, LayerEntry]]:
    """Every plain file of every layer, with its layer's index."""
    for n, layer in enumerate(contents.layers):
        for e in layer.entries:
            if not e.is_dir:
                yield n, e


def check_layout(
    contents: ImageContents,
    *,
    mtime: int,
    layer_mtimes: Mapping[int, int] | None = None,
    owners: Mapping[str, tuple[int, int]] | None = None,
) -> list[str]:
    """What about a readable image is not what :func:`write_image` writes: sorted members,
    one mtime (``layer_mtimes[n]`` for layer ``n``, counted from 0, where given), owner
    0:0 (or ``owners[path]``), gzip layers."""
    owners = owners or {}
    layer_mtimes = layer_mtimes or {}
    problems: list[str] = []
    if list(contents.outer_names) != sorted(contents.outer_names):
        problems.append("the image file's entries are not in sorted order")
    if contents.outer_mtimes - {mtime}:
        problems.append(f"the image file's entries have other mtimes than {mtime}")
    for n, layer in enumerate(contents.layers):
        what = f"layer {n + 1} ({_short(layer.descriptor.digest)})"
        paths = [e.path for e in layer.entries]
        if paths != sorted(paths):
            problems.append(f"{what}: members are not in sorted order")
        want = layer_mtimes.get(n, mtime)
        odd_time = [e.path for e in layer.entries if e.mtime != want]
        if odd_time:
            problems.append(f"{what}: {odd_time[0]}: mtime is not {want}")
        if layer.descriptor.media_type != MEDIA_LAYER:
            problems.append(f"{what}: not a gzip layer ({layer.descriptor.media_type[:80]})")
        for e in layer.entries:
            if (e.uid, e.gid) != owners.get(e.path, (0, 0)):
                problems.append(f"{what}: {e.path}: owner {e.uid}:{e.gid}, not what a release image states")
                break
    return problems


def rewrite_top_layer(contents: ImageContents, layer: LayerSpec) -> str:
    """The image manifest digest ``contents`` would have with its top layer made from
    ``layer`` (the layers below, the config's other fields and the annotations kept as
    they are): what a rebuild compares. ``contents`` must be complete and well formed."""
    assert contents.manifest is not None and contents.config is not None
    with tempfile.TemporaryFile(prefix="patchkit-layer-") as f:
        digest, diff_id, size = _write_layer(layer, f)
    top = Descriptor(media_type=MEDIA_LAYER, digest=digest, size=size)
    config = dataclasses.replace(
        contents.config,
        rootfs=RootFs(type="layers", diff_ids=(*contents.config.rootfs.diff_ids[:-1], diff_id)),
    )
    data = _blob_json(config)
    manifest = dataclasses.replace(
        contents.manifest,
        config=Descriptor(media_type=MEDIA_CONFIG, digest=_digest(data), size=len(data)),
        layers=(*contents.manifest.layers[:-1], top),
    )
    return _digest(_blob_json(manifest))
