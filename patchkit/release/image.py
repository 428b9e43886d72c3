"""A release as a container image: ``<name>.oci.tar`` beside the archive.

One file that ``podman load``, ``docker load`` and ``skopeo`` take with no daemon and no
conversion (the layout is in :mod:`patchkit.release.oci`, what each layer holds in
:mod:`patchkit.release.image_layers`). Its layers, bottom up:

1. **system**: the system libraries the release's files import (the manifest's
   ``imports.system``) and the CUDA runtime's libraries import, what they import in turn,
   the dynamic loader, and the ``/etc/passwd`` / ``/etc/group`` lines of the non-root
   user ``llama`` (10001:10001), ``/tmp`` and its home. They are taken from the build
   root of a recipe with one (``[build] root``: the image runs the very glibc the floor was built against) and
   otherwise from this machine's ``/`` (so this layer, and the image digest, follow from
   the releasing machine's libraries: an image released elsewhere has another digest
   for this layer alone).
2. **CUDA runtime** (CUDA builds with the runtime archive): NVIDIA's libraries as the
   runtime archive holds them, under ``/opt/llama/bin`` with the runtime archive's own
   mtime: the same bytes and digest in every image of that CUDA version, so a registry
   and a host's image store keep them once.
3. **release**: the archive's ``bin/``, ``LICENSE`` and ``manifest.json`` (the same bytes
   as in the archive), under ``/opt/llama``.

Every file is owned by root (the user cannot change them); the image runs as ``llama``.
Entry point: ``llama-server`` listening on ``0.0.0.0:8080`` (``LLAMA_ARG_HOST``,
``LLAMA_ARG_PORT``); ``/opt/llama/bin`` is on ``PATH``, so any other tool is
``--entrypoint ggml-rpc-server`` (``-H 0.0.0.0 -p 50052``) or ``--entrypoint llama-cli``.
CUDA images set ``NVIDIA_VISIBLE_DEVICES=all`` and
``NVIDIA_DRIVER_CAPABILITIES=compute,utility`` for NVIDIA's container toolkit, which
mounts the driver's ``libcuda.so.1`` in.

Annotations (on the image manifest and as config labels):
``org.opencontainers.image.source`` (llama.cpp's URL, unless it is a local path), ``.revision`` (its commit),
``.version`` (llama.cpp's build number), ``.title`` (the release name), ``.created``,
``.licenses``, and ``io.patchkit.series`` (the series hash), ``io.patchkit.recipe``,
``io.patchkit.archive``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from patchkit.core.errors import ReleaseError
from patchkit.core.fs import sha256_bytes
from patchkit.core.record import Record
from patchkit.core.text import printable
from patchkit.release.archive import Member, read_archive
from patchkit.release.image_layers import (
    ARCHES,
    HOME,
    PREFIX,
    RELEASE_LAYER,
    RUNTIME_LAYER,
    SYSTEM_LAYER,
    USER,
    release_layer,
    runtime_imports,
    runtime_layer,
    stage_archive,
    system_files,
    system_layer,
    system_path_ok,
)
from patchkit.release.oci import ContainerConfig, ImageConfig, ImageSpec, WrittenImage, iso_time, write_image
from patchkit.release.oci_read import ImageContents, check_layout, read_image, rewrite_top_layer
from patchkit.spec.manifest import ReleaseManifest, RuntimeManifest, load_manifest

__all__ = [
    "IMAGE_SUFFIX",
    "PREFIX",
    "REPOSITORY",
    "USER",
    "ImageOptions",
    "ImageRecord",
    "check_release_image",
    "image_annotations",
    "image_name",
    "image_ref",
    "make_release_image",
    "preflight",
    "rebuilt_image_diffs",
    "release_image_spec",
    "write_release_image",
]

IMAGE_SUFFIX = ".oci.tar"
REPOSITORY = "localhost/patchkit/llama"  # the same name in podman and docker, never a registry's
SERVER_PORT = 8080
RPC_PORT = 50052
_URL = re.compile(r"^(https?|git|ssh)://[^\s/]+/\S*$|^[\w.-]+@[\w.-]+:\S+$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_GOARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImageRecord(Record):
    """What ``release --image`` wrote (the CLI's ``--json`` ``image`` key)."""

    file: str
    sha256: str  # of the file (SHA256SUMS)
    digest: str  # of the image manifest: what podman, docker and a registry show
    ref: str
    layers: tuple[str, ...]  # their digests, bottom up
    system_from: str  # "/" or the build root's label
    size: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImageOptions:
    """``release --image``: where the system layer's libraries come from."""

    system_root: Path = Path("/")
    system_label: str = "/"  # "/" or the build root's label (debian11@<id>)


def preflight(manifest: ReleaseManifest, out_dir: Path, opts: ImageOptions) -> None:
    """Everything that could stop the image, checked before the release writes anything:
    a Linux build, a valid tag, an output that is not a link, every system library found."""
    arch = _arch(manifest)
    image_ref(manifest.name)
    path = out_dir / image_name(manifest.name)
    if os.path.islink(path) or (os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode)):
        raise ReleaseError(f"{path} is a symlink or not a regular file: refusing to write the image over it")
    needed = manifest.imports.system if manifest.imports is not None else ()
    system_files(needed, root=opts.system_root, arch=arch)


def image_name(stem: str) -> str:
    return stem + IMAGE_SUFFIX


def image_ref(stem: str) -> str:
    if not _TAG.match(stem):
        raise ReleaseError(f"{stem!r} is not a valid image tag (letters, digits, '_', '.', '-'; at most 128)")
    return f"{REPOSITORY}:{stem}"


def _arch(manifest: ReleaseManifest) -> str:
    arch = manifest.platform.arch
    if manifest.platform.os != "linux" or arch not in ARCHES:
        raise ReleaseError(
            f"a container image is made for Linux x86_64/aarch64 builds, not {manifest.platform.os}/{arch}",
            hint="release without --image",
        )
    return arch


def image_annotations(manifest: ReleaseManifest) -> dict[str, str]:
    up = manifest.upstream
    n = len(manifest.patches)
    out = {
        "org.opencontainers.image.revision": up.commit,
        "org.opencontainers.image.title": manifest.name,
        "org.opencontainers.image.created": iso_time(manifest.source_date_epoch),
        "org.opencontainers.image.licenses": "MIT",
        "org.opencontainers.image.description": f"llama.cpp {up.commit[:9]} patched by patchkit "
        f"(recipe {manifest.recipe.name}, {n} patch{'' if n == 1 else 'es'})",
        "io.patchkit.series": manifest.series_hash,
        "io.patchkit.recipe": manifest.recipe.name,
        "io.patchkit.archive": manifest.archive,
    }
    if up.build_number is not None:
        out["org.opencontainers.image.version"] = str(up.build_number)
    if _URL.match(up.url):  # a build from a local mirror names a folder of that machine: left out
        out["org.opencontainers.image.source"] = up.url
    return out


def _container(manifest: ReleaseManifest, labels: Mapping[str, str]) -> ContainerConfig:
    tools = {f.path.rsplit("/", 1)[-1] for f in manifest.files if f.path.startswith("bin/")}
    env = [f"PATH=/{PREFIX}/bin:/usr/bin:/bin", f"HOME=/{HOME}"]
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    if "llama-server" in tools:
        entrypoint = (f"/{PREFIX}/bin/llama-server",)
        env += ["LLAMA_ARG_HOST=0.0.0.0", f"LLAMA_ARG_PORT={SERVER_PORT}"]
    elif "ggml-rpc-server" in tools:
        entrypoint = (f"/{PREFIX}/bin/ggml-rpc-server",)
        cmd = ("-H", "0.0.0.0", "-p", str(RPC_PORT))
    if manifest.cuda is not None:
        env += ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
    ports: dict[str, dict[str, object]] = {}
    if "llama-server" in tools:
        ports[f"{SERVER_PORT}/tcp"] = {}
    if "ggml-rpc-server" in tools:
        ports[f"{RPC_PORT}/tcp"] = {}
    return ContainerConfig(
        user=f"{USER[0]}:{USER[1]}",
        env=tuple(env),
        entrypoint=entrypoint,
        cmd=cmd,
        exposed_ports=ports,
        working_dir=f"/{HOME}",
        labels=dict(labels),
    )


def release_image_spec(
    manifest: ReleaseManifest,
    manifest_data: bytes,
    files: Sequence[Member],
    *,
    system_root: Path,
    system_needed: Sequence[str],
    runtime: Sequence[Member] = (),
    runtime_mtime: int = 0,
) -> ImageSpec:
    """The image of a release: ``files`` are the archive's members (``bin/...``,
    ``LICENSE``; source/ is left out), ``runtime`` the CUDA runtime archive's (``bin/...``)."""
    arch = _arch(manifest)
    mtime = manifest.source_date_epoch
    ref = image_ref(manifest.name)
    shipped = [m for m in files if m.name.startswith("bin/") or m.name == "LICENSE"]
    mine = tuple(
        Member(name=f"{PREFIX}/{m.name}", mode=m.mode, data=m.data, source=m.source) for m in shipped
    )
    mine += (Member(name=f"{PREFIX}/manifest.json", mode=0o644, data=manifest_data),)
    layers = [system_layer(system_needed, root=system_root, arch=arch, mtime=mtime)]
    if runtime:
        layers.append(runtime_layer(runtime, mtime=runtime_mtime))
    layers.append(release_layer(manifest.name, mine, mtime=mtime))
    labels = image_annotations(manifest)
    return ImageSpec(
        layers=tuple(layers),
        config=_container(manifest, labels),
        annotations=labels,
        ref=ref,
        created=mtime,
        architecture=_GOARCH[arch],
    )


def write_release_image(path: Path, spec: ImageSpec, *, stage: Path) -> WrittenImage:
    """:func:`oci.write_image`, refusing an output that is a link (it would be replaced,
    not written through, but a link there is someone's mistake or trap) or not a file."""
    if os.path.islink(path):
        raise ReleaseError(f"{path} is a symlink: refusing to write the image over it", hint="remove it")
    if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
        raise ReleaseError(f"{path} is not a regular file: refusing to write the image over it")
    try:
        return write_image(path, spec, stage=stage)
    except ValueError as e:
        raise ReleaseError(f"{path.name}: {e}") from None


# -- checking an image against its release ------------------------------------------------------


def check_release_image(
    name: str,
    contents: ImageContents,
    manifest: ReleaseManifest,
    manifest_data: bytes,
    runtime: RuntimeManifest | None = None,
) -> list[str]:
    """What an image file holds that its release does not say: its files under
    /opt/llama are the manifest's ``bin/`` and ``LICENSE`` (the runtime archive's with
    ``runtime``) with their sha256, size and mode, its manifest.json the archive's; the
    rest are libraries and the user's lines; the annotations follow from the manifest; the
    layout is :func:`oci.write_image`'s. One line each, prefixed with ``name``."""
    diffs = [f"{name}: {p}" for p in contents.problems]
    if contents.manifest is None or contents.config is None or not contents.complete:
        return diffs  # a layer that could not be read is its own line; its files are unknown
    want: dict[str, tuple[str, int, str]] = {
        f"{PREFIX}/{f.path}": (f.sha256, f.size, f.mode)
        for f in manifest.files
        if f.path.startswith("bin/") or f.path == "LICENSE"
    }
    want[f"{PREFIX}/manifest.json"] = (sha256_bytes(manifest_data), len(manifest_data), "644")
    if runtime is not None:
        want |= {
            f"{PREFIX}/{f.path}": (f.sha256, f.size, f.mode)
            for f in runtime.files
            if f.path.startswith("bin/")
        }
    got: dict[str, tuple[str, int, str]] = {}
    for layer in contents.layers:
        for e in layer.entries:
            if e.is_dir:
                continue
            if e.path in got:
                diffs.append(f"{name}: {e.path}: in two layers (the upper one hides the lower)")
            got[e.path] = (e.sha256, e.size, f"{e.mode:o}")
    for rel in sorted(set(want) - set(got)):
        diffs.append(f"{name}: /{rel} is in the manifest but missing from the image")
    for rel in sorted(set(got) - set(want)):
        if rel.startswith(f"{PREFIX}/") or not system_path_ok(rel):
            diffs.append(f"{name}: /{rel} is in the image but not in the manifest")
    for rel in sorted(set(want) & set(got)):
        (ws, wz, wm), (gs, gz, gm) = want[rel], got[rel]
        if gs != ws:
            diffs.append(f"{name}: /{rel}: sha256 is {gs[:12]}…, the manifest says {ws[:12]}…")
        elif gz != wz:
            diffs.append(f"{name}: /{rel}: size is {gz}, the manifest says {wz}")
        if gm != wm:
            diffs.append(f"{name}: /{rel}: mode is {gm}, the manifest says {wm}")
    for layer in contents.layers:
        for e in layer.entries:
            want_mode = 0o1777 if e.path == "tmp" else 0o755
            if e.is_dir and e.mode != want_mode:
                diffs.append(
                    f"{name}: /{e.path}/: mode {e.mode:o}, a release image's folders are {want_mode:o}"
                )
    notes = image_annotations(manifest)
    for key, value in sorted(notes.items()):
        if contents.manifest.annotations.get(key) != value:
            diffs.append(f"{name}: annotation {key} is not {value!r} (the manifest's)")
    diffs += _check_config(name, contents.config, manifest, notes, cuda_layer=len(contents.layers) == 3)
    if not _TAG.match(manifest.name) or contents.ref != f"{REPOSITORY}:{manifest.name}":
        diffs.append(f"{name}: tagged {contents.ref[:140]!r}, not {REPOSITORY}:{manifest.name}")
    # the CUDA runtime layer (the middle one of three) has the runtime archive's mtime
    middle = {1: runtime.source_date_epoch} if runtime is not None and len(contents.layers) == 3 else {}
    layout = check_layout(
        contents, mtime=manifest.source_date_epoch, layer_mtimes=middle, owners={HOME: USER}
    )
    diffs += [f"{name}: {p}" for p in layout]
    return diffs


def _check_config(
    name: str, config: ImageConfig, manifest: ReleaseManifest, notes: Mapping[str, str], *, cuda_layer: bool
) -> list[str]:
    """The config is what the release gives (user, entry point, environment, ports,
    labels, history, platform): an image whose files are right but which runs as root or
    starts another command is not the release's."""
    want = _container(manifest, notes)
    got = config.config
    diffs = [
        f"{name}: config {key} is {printable(repr(have))[:160]}, "
        f"the release's is {printable(repr(should))[:160]}"
        for key, have, should in (
            ("User", got.user, want.user),
            ("Entrypoint", got.entrypoint, want.entrypoint),
            ("Cmd", got.cmd, want.cmd),
            ("Env", got.env, want.env),
            ("ExposedPorts", dict(got.exposed_ports), dict(want.exposed_ports)),
            ("WorkingDir", got.working_dir, want.working_dir),
            ("Labels", dict(got.labels), dict(want.labels)),
        )
        if have != should
    ]
    arch = _GOARCH.get(manifest.platform.arch, "")
    created = iso_time(manifest.source_date_epoch)
    if (config.architecture, config.os, config.created) != (arch, "linux", created):
        diffs.append(
            f"{name}: config platform {config.os}/{config.architecture} {config.created}, "
            f"not linux/{arch} {created}"
        )
    layers = [
        SYSTEM_LAYER,
        *([RUNTIME_LAYER] if cuda_layer else []),
        RELEASE_LAYER.format(name=manifest.name),
    ]
    if [(h.created, h.created_by) for h in config.history] != [(created, f"patchkit: {n}") for n in layers]:
        diffs.append(f"{name}: config history is not the release's layers")
    return diffs


def make_release_image(
    dist: Path, archive: str, *, system_root: Path, system_label: str, stage: Path
) -> ImageRecord:
    """``<name>.oci.tar`` in ``dist`` from the release archive ``archive`` there (and the
    CUDA runtime archive its manifest names, beside it): the image holds the archive's
    very bytes. ``system_root``: where the system layer's libraries come from ("/" or a
    build root's tree), named ``system_label`` in the record."""
    stem = archive.removesuffix(".tar.gz")
    files, manifest_data = stage_archive(dist / archive, stem, stage / "release")
    try:
        manifest = load_manifest(manifest_data)
    except ValueError as e:
        raise ReleaseError(f"{archive}: its manifest.json does not read ({str(e)[:200]})") from None
    if not isinstance(manifest, ReleaseManifest):
        raise ReleaseError(f"{archive}: a runtime archive is not released as an image")
    runtime: list[Member] = []
    runtime_mtime = 0
    if manifest.runtime is not None:
        rt_stem = manifest.runtime.archive.removesuffix(".tar.gz")
        rt_files, rt_data = stage_archive(dist / manifest.runtime.archive, rt_stem, stage / "runtime")
        rt = load_manifest(rt_data)
        if not isinstance(rt, RuntimeManifest):
            raise ReleaseError(f"{manifest.runtime.archive}: not a CUDA runtime archive")
        runtime = [m for m in rt_files if m.name.startswith("bin/")]
        runtime_mtime = rt.source_date_epoch
    needed = list(manifest.imports.system if manifest.imports is not None else ())
    bins = {m.name.rsplit("/", 1)[-1] for m in files if m.name.startswith("bin/")}
    needed += [n for n in runtime_imports(runtime, bins) if n not in needed]
    spec = release_image_spec(
        manifest,
        manifest_data,
        files,
        system_root=system_root,
        system_needed=needed,
        runtime=runtime,
        runtime_mtime=runtime_mtime,
    )
    (stage / "layers").mkdir(parents=True)
    written = write_release_image(dist / image_name(stem), spec, stage=stage / "layers")
    return ImageRecord(
        file=written.path.name,
        sha256=written.sha256,
        digest=written.digest,
        ref=spec.ref,
        layers=tuple(d.digest for d in written.layers),
        system_from=system_label,
        size=written.size,
    )


# -- rebuild: the image digest that follows from rebuilt files -----------------------------------


def rebuilt_image_diffs(archive: Path, out_dir: Path) -> list[str]:
    """With ``<name>.oci.tar`` beside ``archive``: the image digest the rebuilt files in
    ``out_dir`` give, against the released image's, one line if they differ (else none).

    The release layer is made again from the rebuilt ``bin/`` and ``LICENSE`` (and the
    archive's manifest.json); the system and CUDA runtime layers are not built by
    patchkit (this machine's or a root's libraries, NVIDIA's files), so they are taken as
    the released image holds them, as the runtime archive is. The config and image
    manifest are then written again around them and the digest compared."""
    stem = archive.name.removesuffix(".tar.gz")
    image = archive.parent / image_name(stem)
    if not os.path.lexists(image) or archive.name == stem:
        return []
    label = image.name
    if os.path.islink(image) or not image.is_file():
        return [f"{label}: not a regular file (not read)"]
    try:
        contents = read_image(image)
        entries = read_archive(archive, keep=[f"{stem}/manifest.json"])
    except ValueError as e:
        return [f"{label}: cannot be compared ({str(e)[:200]})"]
    data = next((e.data for e in entries if e.name == f"{stem}/manifest.json"), None)
    manifest = load_manifest(data) if data else None
    if contents.problems or contents.manifest is None or contents.config is None or not contents.complete:
        return [f"{label}: not a well-formed image (`patchkit verify` says why)"]
    if not isinstance(manifest, ReleaseManifest) or data is None:
        return [f"{label}: its archive has no release manifest"]
    files = [
        Member(name=f"{PREFIX}/{f.path}", mode=int(f.mode, 8), source=out_dir / f.path)
        for f in manifest.files
        if f.path.startswith("bin/") or f.path == "LICENSE"
    ]
    missing = [m.name for m in files if m.source is None or not m.source.is_file()]
    if missing:
        return [f"{label}: /{missing[0]} was not made by the rebuild"]
    files.append(Member(name=f"{PREFIX}/manifest.json", mode=0o644, data=data))
    layer = release_layer(manifest.name, files, mtime=manifest.source_date_epoch)
    rebuilt = rewrite_top_layer(contents, layer)
    if rebuilt != contents.digest:
        return [
            f"{label}: the rebuilt files give the image digest {rebuilt[:19]}…, "
            f"the released image is {contents.digest[:19]}…"
        ]
    return []
