"""Release images (release.oci, release.image, release.image_layers): reproducible bytes, the layout podman and
docker read, and image files that lie, each one line, nothing unpacked or half written."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from patchkit.core.errors import ReleaseError
from patchkit.release import oci, oci_read
from patchkit.release.archive import Limits, Member
from patchkit.release.image import (
    PREFIX,
    REPOSITORY,
    check_release_image,
    image_name,
    make_release_image,
    write_release_image,
)
from patchkit.release.image_layers import stage_archive, system_files
from patchkit.spec.manifest import ReleaseManifest, load_manifest
from tests.fixtures.elf import make_elf
from tests.fixtures.hostile_tar import header_bomb_tar_gz
from tests.fixtures.release import do_release, make_build

MTIME = 1786106096


def _spec(*files: tuple[str, bytes], ref: str = "patchkit/llama:t1") -> oci.ImageSpec:
    members = tuple(Member(name=n, mode=0o755, data=d) for n, d in files)
    return oci.ImageSpec(
        layers=(
            oci.LayerSpec(
                name="one", files=members[:1], dirs=(oci.Dir(path="tmp", mode=0o1777),), mtime=MTIME
            ),
            oci.LayerSpec(name="two", files=members[1:], mtime=MTIME),
        ),
        config=oci.ContainerConfig(user="10001:10001", entrypoint=("/opt/x",)),
        annotations={"org.opencontainers.image.revision": "abc"},
        ref=ref,
        created=MTIME,
    )


def _write(tmp_path: Path, name: str = "a.oci.tar") -> oci.WrittenImage:
    stage = tmp_path / f"stage-{name}"
    stage.mkdir()
    spec = _spec(("lib/libc.so.6", b"libc" * 100), ("opt/llama/bin/x", b"x" * 5000), ("opt/llama/y", b"y"))
    return oci.write_image(tmp_path / name, spec, stage=stage)


def test_same_spec_same_bytes_and_digest(tmp_path: Path) -> None:
    a, b = _write(tmp_path, "a.oci.tar"), _write(tmp_path, "b.oci.tar")
    assert a.path.read_bytes() == b.path.read_bytes()
    assert a.digest == b.digest and a.sha256 == b.sha256
    assert a.digest == "sha256:" + hashlib.sha256(_blob(a.path, a.digest)).hexdigest()


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tf:
        return {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}  # type: ignore[union-attr]


def _blob(path: Path, digest: str) -> bytes:
    return _members(path)["blobs/sha256/" + digest.removeprefix("sha256:")]


def test_layout_docker_and_oci_both_name_the_same_blobs(tmp_path: Path) -> None:
    w = _write(tmp_path)
    files = _members(w.path)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(files["index.json"])
    (entry,) = index["manifests"]
    assert entry["digest"] == w.digest
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == "t1"
    manifest = json.loads(_blob(w.path, w.digest))
    (docker,) = json.loads(files["manifest.json"])
    assert docker["Config"] == "blobs/sha256/" + manifest["config"]["digest"][7:]
    assert docker["Layers"] == ["blobs/sha256/" + d["digest"][7:] for d in manifest["layers"]]
    assert docker["RepoTags"] == ["patchkit/llama:t1"]
    with tarfile.open(w.path) as tf:
        members = tf.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", MTIME)}
    # each layer: gzip without name or time, members sorted, owner 0, folders implied
    layer = _blob(w.path, manifest["layers"][1]["digest"])
    assert layer[:2] == b"\x1f\x8b" and layer[4:8] == b"\0\0\0\0" and not layer[3] & 0x08
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer))) as tf:
        names = tf.getnames()
    assert names == ["opt", "opt/llama", "opt/llama/bin", "opt/llama/bin/x", "opt/llama/y"]


def test_read_back_clean(tmp_path: Path) -> None:
    w = _write(tmp_path)
    got = oci_read.read_image(w.path)
    assert got.problems == ()
    assert got.digest == w.digest and got.ref == "patchkit/llama:t1"
    assert [layer.diff_id for layer in got.layers] == list(w.diff_ids)
    files = {e.path: e for _, e in oci_read.iter_files(got)}
    assert files["opt/llama/bin/x"].sha256 == hashlib.sha256(b"x" * 5000).hexdigest()
    tmp = next(e for e in got.layers[0].entries if e.path == "tmp")
    assert tmp.is_dir and tmp.mode == 0o1777
    assert oci_read.check_layout(got, mtime=MTIME) == []
    assert oci_read.check_layout(got, mtime=MTIME + 1) != []


# -- hostile image files -------------------------------------------------------------------------


def _tar_bytes(entries: list[tuple[tarfile.TarInfo, bytes | None]], *, gz: bool = True) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for info, data in entries:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    raw = buf.getvalue()
    return gzip.compress(raw, mtime=0) if gz else raw


def _info(name: str, kind: bytes = tarfile.REGTYPE, size: int = 0, link: str = "") -> tarfile.TarInfo:
    i = tarfile.TarInfo(name)
    i.type, i.size, i.linkname, i.mode = kind, size, link, 0o755
    return i


def _raw_image(
    path: Path,
    layers: list[bytes],
    *,
    diff_ids: list[str] | None = None,
    config_extra: dict[str, Any] | None = None,
    lie: dict[str, bytes] | None = None,
    extra: list[tuple[tarfile.TarInfo, bytes | None]] = (),  # type: ignore[assignment]
) -> Path:
    """An image file with these layer blobs (digests true unless ``lie`` swaps a blob's bytes)."""

    def dg(b: bytes) -> str:
        return "sha256:" + hashlib.sha256(b).hexdigest()

    diffs = diff_ids or [dg(gzip.decompress(layer)) for layer in layers]
    config = {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": diffs}}
    config |= config_extra or {}
    cdata = json.dumps(config).encode()
    descs = [{"mediaType": oci.MEDIA_LAYER, "digest": dg(b), "size": len(b)} for b in layers]
    manifest = {
        "schemaVersion": 2,
        "mediaType": oci.MEDIA_MANIFEST,
        "config": {"mediaType": oci.MEDIA_CONFIG, "digest": dg(cdata), "size": len(cdata)},
        "layers": descs,
    }
    mdata = json.dumps(manifest).encode()
    index = {
        "schemaVersion": 2,
        "manifests": [{"mediaType": oci.MEDIA_MANIFEST, "digest": dg(mdata), "size": len(mdata)}],
    }
    blobs = {dg(b): b for b in [*layers, cdata, mdata]}
    for digest, data in (lie or {}).items():
        blobs[digest] = data
    docker = [
        {
            "Config": "blobs/sha256/" + dg(cdata)[7:],
            "RepoTags": ["x:y"],
            "Layers": ["blobs/sha256/" + d["digest"][7:] for d in descs],
        }
    ]
    entries = [(_info("blobs/sha256/" + k[7:], size=len(v)), v) for k, v in blobs.items()]
    for name, data in (
        ("index.json", json.dumps(index).encode()),
        ("manifest.json", json.dumps(docker).encode()),
        ("oci-layout", b"{}"),
    ):
        entries.append((_info(name, size=len(data)), data))
    path.write_bytes(_tar_bytes([*entries, *extra], gz=False))
    return path


def _layer(*entries: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    return _tar_bytes(list(entries))


def _problems(path: Path) -> tuple[str, ...]:
    return oci_read.read_image(path).problems


def test_a_clean_raw_image_has_no_problems(tmp_path: Path) -> None:
    ok = _layer((_info("opt/x", size=3), b"abc"))
    assert _problems(_raw_image(tmp_path / "i.tar", [ok])) == ()


def test_layer_digest_that_lies(tmp_path: Path) -> None:
    good = _layer((_info("opt/x", size=3), b"abc"))
    evil = bytearray(good)
    evil[len(evil) // 2] ^= 0xFF  # one byte flipped: same size, other bytes
    digest = "sha256:" + hashlib.sha256(good).hexdigest()
    path = _raw_image(tmp_path / "i.tar", [good], lie={digest: bytes(evil)})
    problems = oci_read.read_image(path).problems
    assert len(problems) == 1 and "not the digest it is named after (tampered?)" in problems[0], problems
    assert not oci_read.read_image(path).complete


def test_diff_id_that_lies(tmp_path: Path) -> None:
    layer = _layer((_info("opt/x", size=3), b"abc"))
    problems = _problems(_raw_image(tmp_path / "i.tar", [layer], diff_ids=["sha256:" + "0" * 64]))
    assert problems == (
        f"layer 1 ({hashlib.sha256(layer).hexdigest()[:12]}…): its content hashes to "
        f"{hashlib.sha256(gzip.decompress(layer)).hexdigest()[:12]}…, the config's diff_id says 000000000000…",
    )


@pytest.mark.parametrize(
    ("member", "says"),
    [
        ((_info("opt/../../etc/shadow", size=1), b"x"), "'..' component"),
        ((_info("/etc/shadow", size=1), b"x"), "an absolute name"),
        ((_info("dev/sda", kind=tarfile.BLKTYPE), None), "a device node"),
        ((_info("dev/tty", kind=tarfile.CHRTYPE), None), "a device node"),
        ((_info("opt/fifo", kind=tarfile.FIFOTYPE), None), "a FIFO"),
        ((_info("opt/h", kind=tarfile.LNKTYPE, link="../../etc/shadow"), None), "a hard link"),
        ((_info("opt/s", kind=tarfile.SYMTYPE, link="/etc/shadow"), None), "a symbolic link"),
        ((_info("opt/.wh.x", size=0), b""), "a whiteout"),
    ],
)
def test_hostile_layer_member_one_line(
    tmp_path: Path, member: tuple[tarfile.TarInfo, bytes | None], says: str
) -> None:
    layer = _layer((_info("opt/ok", size=2), b"ok"), member)
    problems = _problems(_raw_image(tmp_path / "i.tar", [layer]))
    assert len(problems) == 1 and says in problems[0], problems
    assert "\n" not in problems[0]
    assert not (tmp_path / "etc").exists() and not (tmp_path / "opt").exists()  # nothing unpacked


def test_config_claiming_a_huge_history(tmp_path: Path) -> None:
    layer = _layer((_info("opt/x", size=1), b"x"))
    many = {"history": [{"created_by": "x"}] * 5000}
    problems = _problems(_raw_image(tmp_path / "i.tar", [layer], config_extra=many))
    assert problems == ("config: claims a history of 5000 entries, more than 64",)
    huge = {"history": [{"created_by": "x" * 1000}] * 2000}  # 2 MB of JSON: never parsed
    problems = _problems(_raw_image(tmp_path / "j.tar", [layer], config_extra=huge))
    assert len(problems) == 1 and "more than 1 MiB of JSON" in problems[0], problems


def test_foreign_outer_members(tmp_path: Path) -> None:
    layer = _layer((_info("opt/x", size=1), b"x"))
    extra = [
        (_info("../evil", size=1), b"x"),
        (_info("blobs/sha256/link", kind=tarfile.SYMTYPE, link="/etc"), None),
    ]
    problems = _problems(_raw_image(tmp_path / "i.tar", [layer], extra=extra))
    assert len(problems) == 2 and "not a file of an OCI image layout" in problems[0], problems
    assert "not a regular file" in problems[1]


def test_outer_header_bomb_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bomb.tar.gz"
    header_bomb_tar_gz(path, 8 << 20)
    raw = tmp_path / "bomb.oci.tar"
    raw.write_bytes(gzip.decompress(path.read_bytes()))
    with pytest.raises(oci_read.ArchiveRefused, match="a bomb"):
        oci_read.read_image(raw, limits=Limits(header=1 << 16))


def test_not_a_tar(tmp_path: Path) -> None:
    p = tmp_path / "x.oci.tar"
    p.write_bytes(b"hello" * 1000)
    with pytest.raises(ValueError, match="not a readable image file"):
        oci_read.read_image(p)


def test_too_many_members_refused(tmp_path: Path) -> None:
    layer = _layer(*((_info(f"opt/f{i}", size=0), b"") for i in range(50)))
    with pytest.raises(oci_read.ArchiveRefused, match="more than 20 tar members"):
        oci_read.read_image(_raw_image(tmp_path / "i.tar", [layer]), limits=Limits(members=20))


# -- the release image ---------------------------------------------------------------------------


def _sysroot(tmp_path: Path) -> Path:
    root = tmp_path / "sysroot"
    lib = root / "lib" / "x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libc.so.6").write_bytes(make_elf(needed=("ld-linux-x86-64.so.2",), soname="libc.so.6"))
    (lib / "ld-linux-x86-64.so.2").write_bytes(make_elf(needed=(), soname="ld-linux-x86-64.so.2"))
    for name in ("libdl.so.2", "libm.so.6"):  # what the fixture CUDA runtime's libraries import
        (lib / name).write_bytes(make_elf(needed=("libc.so.6",), soname=name))
    (root / "lib64").mkdir()
    os.symlink("../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", root / "lib64" / "ld-linux-x86-64.so.2")
    return root


def test_links_of_a_build_root_are_followed_inside_it(tmp_path: Path) -> None:
    from patchkit.release.image_layers import resolve_within

    root = tmp_path / "root"
    (root / "usr" / "lib" / "x86_64-linux-gnu").mkdir(parents=True)
    os.symlink("usr/lib", root / "lib")  # merged /usr
    lib = root / "usr" / "lib" / "x86_64-linux-gnu"
    (lib / "ld-2.31.so").write_bytes(make_elf(needed=()))
    (lib / "libc-2.31.so").write_bytes(make_elf(needed=("ld-linux-x86-64.so.2",)))
    os.symlink("libc-2.31.so", lib / "libc.so.6")
    os.symlink("ld-2.31.so", lib / "ld-linux-x86-64.so.2")
    (root / "lib64").mkdir()
    # Debian's absolute link: the root's loader, not this machine's /lib/...
    os.symlink("/lib/x86_64-linux-gnu/ld-2.31.so", root / "lib64" / "ld-linux-x86-64.so.2")
    base = root.resolve()
    assert resolve_within(base, "lib64/ld-linux-x86-64.so.2") == lib / "ld-2.31.so"
    got = dict(system_files(["libc.so.6"], root=root, arch="x86_64"))
    assert got == {
        "lib/x86_64-linux-gnu/libc.so.6": lib / "libc-2.31.so",
        "lib64/ld-linux-x86-64.so.2": lib / "ld-2.31.so",
    }
    os.symlink("../../../../../../../../etc/hostname", lib / "libm.so.6")  # ".." stops at the root
    assert resolve_within(base, "lib/x86_64-linux-gnu/libm.so.6") is None
    os.symlink("loop", lib / "loop")
    assert resolve_within(base, "lib/x86_64-linux-gnu/loop") is None


def test_system_files_follow_imports_within_the_root(tmp_path: Path) -> None:
    root = _sysroot(tmp_path)
    got = system_files(["libc.so.6"], root=root, arch="x86_64")
    assert [rel for rel, _ in got] == ["lib/x86_64-linux-gnu/libc.so.6", "lib64/ld-linux-x86-64.so.2"]
    (root / "lib" / "x86_64-linux-gnu" / "libm.so.6").unlink()
    os.symlink("/etc/hostname", root / "lib" / "x86_64-linux-gnu" / "libm.so.6")  # leaves the root
    with pytest.raises(ReleaseError, match="libm.so.6: not found"):
        system_files(["libm.so.6"], root=root, arch="x86_64")
    with pytest.raises(ReleaseError, match="not a library name"):
        system_files(["../../etc/shadow"], root=root, arch="x86_64")


def _released(tmp_path: Path) -> tuple[Path, str]:
    build = make_build(tmp_path)
    res = do_release(build, tmp_path / "dist")
    return tmp_path / "dist", res.archive.name


def _image(tmp_path: Path, dist: Path, archive: str, n: int = 0) -> Any:
    stage = tmp_path / f"stage{n}"
    stage.mkdir()
    return make_release_image(
        dist, archive, system_root=_sysroot(tmp_path / f"r{n}"), system_label="/", stage=stage
    )


def test_release_image_holds_the_archive_bytes(tmp_path: Path) -> None:
    dist, archive = _released(tmp_path)
    rec = _image(tmp_path, dist, archive)
    stem = archive.removesuffix(".tar.gz")
    assert rec.file == image_name(stem) and rec.ref == f"{REPOSITORY}:{stem}"
    contents = oci_read.read_image(dist / rec.file)
    assert contents.problems == () and contents.digest == rec.digest
    _, manifest_data = stage_archive(dist / archive, stem, tmp_path / "s")
    manifest = load_manifest(manifest_data)
    assert isinstance(manifest, ReleaseManifest)
    assert check_release_image(rec.file, contents, manifest, manifest_data) == []
    notes = contents.manifest.annotations  # type: ignore[union-attr]
    assert notes["org.opencontainers.image.revision"] == manifest.upstream.commit
    assert notes["io.patchkit.series"] == manifest.series_hash
    assert notes["org.opencontainers.image.source"] == "https://github.com/ggml-org/llama.cpp"
    assert manifest.upstream.build_number is None and "org.opencontainers.image.version" not in notes
    assert notes["org.opencontainers.image.description"].endswith("(recipe cpu-rpc, 1 patch)")
    cfg = contents.config.config  # type: ignore[union-attr]
    assert cfg.user == "10001:10001" and cfg.entrypoint == (f"/{PREFIX}/bin/ggml-rpc-server",)
    assert "50052/tcp" in cfg.exposed_ports
    assert not any("NVIDIA" in e for e in cfg.env)
    again = _image(tmp_path, dist, archive, 1)
    assert again.digest == rec.digest and again.sha256 == rec.sha256


def test_release_image_tampered_file_one_line(tmp_path: Path) -> None:
    dist, archive = _released(tmp_path)
    rec = _image(tmp_path, dist, archive)
    stem = archive.removesuffix(".tar.gz")
    _, manifest_data = stage_archive(dist / archive, stem, tmp_path / "s")
    manifest = load_manifest(manifest_data)
    assert isinstance(manifest, ReleaseManifest)
    other = json.loads(manifest_data)
    other["files"][0]["sha256"] = "0" * 64
    forged = load_manifest(json.dumps(other).encode())
    contents = oci_read.read_image(dist / rec.file)
    diffs = check_release_image(rec.file, contents, forged, manifest_data)  # type: ignore[arg-type]
    assert len(diffs) == 1 and f"/{PREFIX}/{other['files'][0]['path']}: sha256 is" in diffs[0], diffs


def test_symlink_as_output_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep")
    out = tmp_path / "x.oci.tar"
    os.symlink(target, out)
    stage = tmp_path / "stage"
    stage.mkdir()
    with pytest.raises(ReleaseError, match="is a symlink"):
        write_release_image(out, _spec(("a", b"a"), ("b", b"b")), stage=stage)
    assert target.read_text() == "keep" and out.is_symlink()
    assert list(tmp_path.glob(".*")) == []  # nothing half written beside it


def test_a_failed_write_leaves_nothing(tmp_path: Path) -> None:
    stage = tmp_path / "stage"
    stage.mkdir()
    spec = _spec(("a", b"a"), ("b", b"b"))
    bad = oci.ImageSpec(
        layers=(
            *spec.layers,
            oci.LayerSpec(
                name="gone", files=(Member(name="c", mode=0o644, source=tmp_path / "nope"),), mtime=MTIME
            ),
        ),
        config=spec.config,
        annotations={},
        ref=spec.ref,
        created=MTIME,
    )
    with pytest.raises(OSError):
        oci.write_image(tmp_path / "y.oci.tar", bad, stage=stage)
    assert not (tmp_path / "y.oci.tar").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name != "stage"] == []


def test_cuda_images_share_the_runtime_layer(tmp_path: Path) -> None:
    from tests.fixtures.wheels import runtime_wheels, set_binary
    from tests.unit.release.test_bundle import cuda_build

    wheels = tmp_path / "wheels"
    runtime_wheels(wheels, major=12, minor=4)
    dist = tmp_path / "dist"
    first = do_release(cuda_build(tmp_path / "a"), dist, runtime_wheels=wheels)
    other = cuda_build(tmp_path / "b")
    set_binary(other, "bin/llama-cli", make_elf(runpath="$ORIGIN") + b" another build")
    info = json.loads((other / "build-info.json").read_text())
    info["recipe"]["name"] = "cuda-turing-ampere"
    info["cuda"]["archs"] = [75, 86]
    (other / "build-info.json").write_text(json.dumps(info))
    second = do_release(other, dist, runtime_wheels=wheels)
    a = _image(tmp_path, dist, first.archive.name, 0)
    b = _image(tmp_path, dist, second.archive.name, 1)
    assert len(a.layers) == len(b.layers) == 3
    assert a.layers[0] == b.layers[0]  # the same system libraries
    assert a.layers[1] == b.layers[1]  # one CUDA runtime layer for both
    assert a.layers[2] != b.layers[2] and a.digest != b.digest
    contents = oci_read.read_image(dist / a.file)
    files = {e.path for _, e in oci_read.iter_files(contents)}
    assert f"{PREFIX}/bin/libcublas.so.12" in files and f"{PREFIX}/bin/libggml-cuda.so" in files
    # what NVIDIA's libraries import from the system is in the system layer (cudart needs
    # libdl, cuBLASLt libm: the release's own files import neither), the driver is not
    assert {"lib/x86_64-linux-gnu/libdl.so.2", "lib/x86_64-linux-gnu/libm.so.6"} <= files
    assert not any(f.endswith("libcuda.so.1") for f in files)
    env = contents.config.config.env  # type: ignore[union-attr]
    assert "NVIDIA_VISIBLE_DEVICES=all" in env and "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in env
    stem = first.archive.name.removesuffix(".tar.gz")
    _, data = stage_archive(first.archive, stem, tmp_path / "s")
    manifest = load_manifest(data)
    rt_stem = first.runtime.name.removesuffix(".tar.gz")
    _, rt_data = stage_archive(first.runtime, rt_stem, tmp_path / "s2")
    runtime = load_manifest(rt_data)
    assert isinstance(manifest, ReleaseManifest) and not isinstance(runtime, ReleaseManifest)
    assert runtime.source_date_epoch != manifest.source_date_epoch  # the wheels' date: its own layer mtime
    assert check_release_image(a.file, contents, manifest, data, runtime) == []
    # without the runtime's manifest its files are not the release's
    assert any(
        "libcublas.so.12 is in the image but not in the manifest" in d
        for d in check_release_image(a.file, contents, manifest, data)
    )


# -- release --image and verify ------------------------------------------------------------------


def _release_image(tmp_path: Path, dist: Path | None = None) -> Any:
    from patchkit.release.image import ImageOptions

    build = make_build(tmp_path / "b")
    opts = ImageOptions(system_root=_sysroot(tmp_path / "r"), system_label="/")
    return do_release(build, dist or tmp_path / "dist", image=opts)


def test_release_image_is_summed_attested_and_verified(tmp_path: Path) -> None:
    from patchkit.release.verify import verify_dir

    r = _release_image(tmp_path)
    assert r.image is not None and r.image.file == image_name(r.name)
    dist = tmp_path / "dist"
    assert f"{r.image.sha256}  {r.image.file}\n" in (dist / "SHA256SUMS").read_text()
    statement = json.loads((dist / f"{r.name}.intoto.json").read_text())
    assert statement["subject"][1:] == [
        {"name": r.image.file, "digest": {"sha256": r.image.sha256}},
        {"name": f"{REPOSITORY}:{r.name}", "digest": {"sha256": r.image.digest.removeprefix("sha256:")}},
    ]
    report = verify_dir(dist)
    assert report.differences == () and report.images == (r.image.file,)


def _flip_in_layer(image: Path, layer_digest: str) -> None:
    with tarfile.open(image) as tf:
        info = tf.getmember("blobs/sha256/" + layer_digest.removeprefix("sha256:"))
    with image.open("r+b") as f:
        f.seek(info.offset_data + info.size // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))


def test_verify_one_line_per_tampered_layer(tmp_path: Path) -> None:
    from patchkit.release.verify import verify_dir

    r = _release_image(tmp_path)
    dist = tmp_path / "dist"
    image = dist / r.image.file
    _flip_in_layer(image, r.image.layers[1])
    diffs = verify_dir(dist).differences
    layer_lines = [d for d in diffs if "not the digest it is named after" in d]
    assert len(layer_lines) == 1 and r.image.layers[1].removeprefix("sha256:") in layer_lines[0], diffs
    assert [d for d in diffs if d not in layer_lines] == [
        d
        for d in diffs
        if d.startswith((f"{r.image.file}: sha256 is", f"{r.name}.intoto.json: does not match"))
    ]  # besides: SHA256SUMS and the provenance statement name the file's new sha256
    _flip_in_layer(image, r.image.layers[0])
    diffs = verify_dir(dist).differences
    assert len([d for d in diffs if "not the digest it is named after" in d]) == 2, diffs


def test_verify_image_whose_files_are_not_the_archives(tmp_path: Path) -> None:
    from patchkit.release.verify import verify_dir

    dist = tmp_path / "dist"
    r = _release_image(tmp_path)
    # another build's image under this release's name: well formed, but other bytes
    other = make_build(tmp_path / "o")
    from tests.fixtures.wheels import set_binary

    set_binary(other, "bin/llama-cli", make_elf(runpath="$ORIGIN") + b"other")
    from patchkit.release.image import ImageOptions

    elsewhere = tmp_path / "elsewhere"
    r2 = do_release(other, elsewhere, image=ImageOptions(system_root=_sysroot(tmp_path / "r2")))
    assert r2.name == r.name
    (dist / r.image.file).write_bytes((elsewhere / r2.image.file).read_bytes())
    diffs = [d for d in verify_dir(dist).differences if d.startswith(f"{r.image.file}: /")]
    theirs = hashlib.sha256((other / "bin" / "llama-cli").read_bytes()).hexdigest()
    ours = next(
        f["sha256"] for f in json.loads(r.manifest.read_text())["files"] if f["path"] == "bin/llama-cli"
    )
    assert (
        f"{r.image.file}: /{PREFIX}/bin/llama-cli: sha256 is {theirs[:12]}…, the manifest says {ours[:12]}…"
        in diffs
    )
    assert sorted(d.split(":")[1].strip() for d in diffs) == [
        f"/{PREFIX}/bin/llama-cli",
        f"/{PREFIX}/manifest.json",
    ]


def test_release_image_refusals_write_nothing(tmp_path: Path) -> None:
    from patchkit.release.image import ImageOptions

    build = make_build(tmp_path / "b")
    dist = tmp_path / "dist"
    empty = tmp_path / "empty-root"
    empty.mkdir()
    with pytest.raises(ReleaseError, match=r"\.so\.[0-9]+: not found in .*empty-root"):
        do_release(build, dist, image=ImageOptions(system_root=empty))
    assert not dist.exists() or list(dist.iterdir()) == []
    # a link where the image would go: refused before anything is written
    dist.mkdir(exist_ok=True)
    r = do_release(build, tmp_path / "probe")
    target = tmp_path / "precious"
    target.write_text("keep")
    os.symlink(target, dist / image_name(r.name))
    with pytest.raises(ReleaseError, match="symlink"):
        do_release(build, dist, image=ImageOptions(system_root=_sysroot(tmp_path / "r")))
    assert sorted(p.name for p in dist.iterdir()) == [image_name(r.name)] and target.read_text() == "keep"
    windows = make_build(tmp_path / "w", os_name="windows")
    with pytest.raises(ReleaseError, match="made for Linux"):
        do_release(windows, tmp_path / "wdist", image=ImageOptions(system_root=_sysroot(tmp_path / "r3")))
    assert not (tmp_path / "wdist").exists() or list((tmp_path / "wdist").iterdir()) == []


def test_rebuilt_files_give_the_released_image_digest(tmp_path: Path) -> None:
    import shutil

    from patchkit.release.image import rebuilt_image_diffs

    r = _release_image(tmp_path)
    build = tmp_path / "b" / "out" / "cpu-rpc"
    assert rebuilt_image_diffs(r.archive, build) == []  # the build's own files: the same digest
    other = tmp_path / "rebuilt"
    shutil.copytree(build, other)
    (other / "bin" / "llama-cli").write_bytes(b"other bytes")
    (line,) = rebuilt_image_diffs(r.archive, other)
    assert line.startswith(f"{r.image.file}: the rebuilt files give the image digest sha256:")
    assert line.endswith(f"the released image is {r.image.digest[:19]}…")
    (other / "bin" / "llama-cli").unlink()
    assert rebuilt_image_diffs(r.archive, other) == [
        f"{r.image.file}: /{PREFIX}/bin/llama-cli was not made by the rebuild"
    ]
    plain = do_release(make_build(tmp_path / "p"), tmp_path / "plain")
    assert rebuilt_image_diffs(plain.archive, build) == []  # no image beside: nothing to compare


def test_a_local_upstream_is_no_source_annotation(tmp_path: Path) -> None:
    from patchkit.release.image import image_annotations

    dist, archive = _released(tmp_path)
    _, data = stage_archive(dist / archive, archive.removesuffix(".tar.gz"), tmp_path / "s")
    raw = json.loads(data)
    raw["upstream"]["build_number"] = 10566
    for url, shown in (
        ("/work/mirror/llama.cpp", False),
        ("file:///srv/llama.cpp", False),
        ("git@github.com:ggml-org/llama.cpp.git", True),
        ("https://github.com/ggml-org/llama.cpp", True),
    ):
        raw["upstream"]["url"] = url
        manifest = load_manifest(json.dumps(raw).encode())
        assert isinstance(manifest, ReleaseManifest)
        notes = image_annotations(manifest)
        assert ("org.opencontainers.image.source" in notes) is shown, url
        assert notes["org.opencontainers.image.version"] == "10566"
        assert url not in json.dumps(notes) or shown


def test_only_the_layouts_own_files_are_kept_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept: list[str] = []
    real = oci_read._Blob

    def spy(**kw: Any) -> Any:
        blob = real(**kw)
        if blob.data is not None:
            kept.append(blob.sha256)
        return blob

    monkeypatch.setattr(oci_read, "_Blob", spy)
    many = [_layer((_info(f"opt/f{i}", size=1), b"x")) for i in range(5)]
    got = oci_read.read_image(_raw_image(tmp_path / "i.tar", many))
    assert got.problems == () and len(got.layers) == 5
    assert len(kept) == 3  # index.json, manifest.json, oci-layout: blobs are read by offset when named


def test_verify_an_image_without_its_archive_or_a_link(tmp_path: Path) -> None:
    from patchkit.release.verify import verify_dir

    r = _release_image(tmp_path)
    dist = tmp_path / "dist"
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / r.image.file).write_bytes((dist / r.image.file).read_bytes())
    (lone / "SHA256SUMS").write_text(f"{r.image.sha256}  {r.image.file}\n")
    assert verify_dir(lone).differences == (
        f"{lone}: no archives to verify",
        f"{r.image.file}: no readable release archive {r.name}.tar.gz beside it to check it against",
    )
    (lone / r.image.file).unlink()
    os.symlink(dist / r.image.file, lone / r.image.file)
    diffs = verify_dir(lone).differences
    assert f"{r.image.file}: is a symlink (not followed)" in diffs, diffs


def test_release_image_of_a_root_recipe_takes_the_roots_libraries(project: Path, tmp_path: Path) -> None:
    from patchkit.core.paths import cache_dir
    from tests.fixtures.project import assert_error, invoke, write_recipe
    from tests.fixtures.sysroot import fake_root

    write_recipe(
        project,
        "cpu-rpc",
        url="https://github.com/ggml-org/llama.cpp",
        commit="0" * 40,
        targets='["llama-cli"]\nroot = "debian11"',
    )
    build = make_build(tmp_path)
    dist = tmp_path / "dist"
    args = ("release", "cpu-rpc", "--build-dir", str(build), "--out", str(dist), "--image", "--allow-stale")
    assert_error(invoke(project, *args), 6, "patchkit root prepare debian11")
    assert not dist.exists()
    tree = fake_root(cache_dir())
    lib = tree / "lib" / "x86_64-linux-gnu"
    lib.mkdir(parents=True)
    libc = make_elf(needed=("ld-linux-x86-64.so.2",), soname="libc.so.6") + b" Debian 11's glibc 2.31"
    (lib / "libc.so.6").write_bytes(libc)
    (lib / "ld-linux-x86-64.so.2").write_bytes(make_elf(needed=()) + b" Debian 11's loader")
    (tree / "lib64").mkdir()
    os.symlink("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", tree / "lib64" / "ld-linux-x86-64.so.2")
    r = invoke(project, *args, "--json")
    assert r.exit_code == 0, r.output
    rec = json.loads(r.stdout)["image"]
    assert rec["system_from"] == "debian11@abababababab"
    files = {e.path: e.sha256 for _, e in oci_read.iter_files(oci_read.read_image(dist / rec["file"]))}
    assert files["lib/x86_64-linux-gnu/libc.so.6"] == hashlib.sha256(libc).hexdigest()
    assert (
        files["lib64/ld-linux-x86-64.so.2"]
        == hashlib.sha256((lib / "ld-linux-x86-64.so.2").read_bytes()).hexdigest()
    )


def test_an_image_that_runs_as_root_or_another_command_is_not_the_release(tmp_path: Path) -> None:
    import dataclasses

    from patchkit.release.image import release_image_spec

    dist, archive = _released(tmp_path)
    stem = archive.removesuffix(".tar.gz")
    files, data = stage_archive(dist / archive, stem, tmp_path / "s")
    manifest = load_manifest(data)
    assert isinstance(manifest, ReleaseManifest)
    spec = release_image_spec(
        manifest, data, files, system_root=_sysroot(tmp_path), system_needed=["libc.so.6"]
    )
    forged = dataclasses.replace(
        spec, config=dataclasses.replace(spec.config, user="0:0", entrypoint=("/opt/llama/bin/llama-cli",))
    )
    stage = tmp_path / "st"
    stage.mkdir()
    for n, s in enumerate((spec, forged)):
        w = oci.write_image(tmp_path / f"{n}.oci.tar", s, stage=stage)
        diffs = check_release_image(w.path.name, oci_read.read_image(w.path), manifest, data)
        if n == 0:
            assert diffs == []
        else:
            assert diffs == [
                "1.oci.tar: config User is '0:0', the release's is '10001:10001'",
                "1.oci.tar: config Entrypoint is ('/opt/llama/bin/llama-cli',), "
                "the release's is ('/opt/llama/bin/ggml-rpc-server',)",
            ]
