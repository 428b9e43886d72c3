"""`patchkit release` on hand-written build folders (the build contract): archive contents,
reproducibility, and every refusal."""

from __future__ import annotations

import json
import os
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from patchkit.core.errors import ReleaseError
from patchkit.core.fs import sha256_bytes, sha256_file
from patchkit.release.verify import verify_dir
from patchkit.spec.problems import NoFinishedBuild
from patchkit.spec.recipe import load_recipe
from tests.fixtures.release import (
    COMMIT,
    COMMIT_DATE,
    COMMIT_EPOCH,
    SERIES_HASH,
    do_release,
    make_build,
    project_build,
    rewrite_info,
)

# ---------------------------------------------------------------- release


def test_release_archive_contents_and_manifest(tmp_path: Path) -> None:
    build = make_build(tmp_path)
    dist = tmp_path / "dist"
    r = do_release(build, dist)
    stem = "llama-82bb485-pk5f3c2a1b-linux-x86_64-cpu-rpc"
    assert r.archive == dist / f"{stem}.tar.gz"
    assert sorted(p.name for p in dist.iterdir()) == [
        "SHA256SUMS",
        f"{stem}.intoto.json",
        f"{stem}.manifest.json",
        f"{stem}.tar.gz",
    ]
    with tarfile.open(r.archive) as tar:
        members = tar.getmembers()
        names = [m.name for m in members]
        assert names == sorted(names)
        assert names == [
            f"{stem}/{n}"
            for n in (
                "LICENSE",
                "bin/ggml-rpc-server",
                "bin/libggml.so",
                "bin/libllama.so",
                "bin/llama-cli",
                "manifest.json",
            )
        ]
        for m in members:
            assert (m.uid, m.gid, m.uname, m.gname, m.mtime) == (0, 0, "", "", COMMIT_EPOCH)
            assert m.mode == (0o755 if "/bin/" in m.name else 0o644)
        manifest_bytes = tar.extractfile(f"{stem}/manifest.json").read()  # type: ignore[union-attr]
        cli = tar.extractfile(f"{stem}/bin/llama-cli").read()  # type: ignore[union-attr]
    assert cli == (build / "bin" / "llama-cli").read_bytes()
    assert (dist / f"{stem}.manifest.json").read_bytes() == manifest_bytes
    m = json.loads(manifest_bytes)
    assert m["upstream"] == {
        "url": "https://github.com/ggml-org/llama.cpp",
        "commit": COMMIT,
        "commit_date": COMMIT_DATE,
        "ref": None,
    }
    assert m["patches"][0]["status"] == "pending" and m["patches"][0]["sha256"] == "ef" * 32
    assert m["series_hash"] == SERIES_HASH and m["recipe"]["name"] == "cpu-rpc"
    assert m["cmake"]["defines"] == {"GGML_RPC": "ON", "GGML_NATIVE": "OFF"}
    assert m["tools"]["cmake"] == "4.1.2" and m["smoke"]["status"] == "passed"
    assert m["waivers"] == [] and m["source_date_epoch"] == COMMIT_EPOCH
    assert m["reproducible"]["launcher"] == "none" and m["reproducible"]["any_folder"] is True
    files = {f["path"]: f for f in m["files"]}
    assert set(files) == {
        "LICENSE",
        "bin/ggml-rpc-server",
        "bin/libggml.so",
        "bin/libllama.so",
        "bin/llama-cli",
    }
    assert files["bin/llama-cli"]["sha256"] == sha256_bytes(cli)
    assert files["bin/llama-cli"]["size"] == len(cli) and files["LICENSE"]["mode"] == "644"
    # no host paths, no timings
    text = manifest_bytes.decode()
    for host in (str(tmp_path), "timings", "build_dir", '"log"'):
        assert host not in text
    assert m["smoke"]["checks"][0]["why"] == "ran <out>/bin/llama-cli --version"
    if sys.platform != "win32":  # published files are world-readable
        assert {p.stat().st_mode & 0o777 for p in dist.iterdir()} == {0o644}
    # gzip header: no name, no time
    head = r.archive.read_bytes()[:10]
    assert head[3] & 0x08 == 0 and head[4:8] == b"\0\0\0\0"


def test_release_is_byte_reproducible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b1 = make_build(tmp_path / "one")
    b2 = make_build(tmp_path / "two")  # same inputs, other host paths
    os.utime(b2 / "bin" / "llama-cli", (1, 1))
    (b2 / "bin" / "libllama.so").chmod(0o600)
    r1 = do_release(b1, tmp_path / "d1")
    r2 = do_release(b2, tmp_path / "d2")
    r3 = do_release(b1, tmp_path / "d1")  # again into the same folder
    assert r1.sha256 == r2.sha256 == r3.sha256 == sha256_file(r2.archive)
    assert (tmp_path / "d1" / "SHA256SUMS").read_bytes() == (tmp_path / "d2" / "SHA256SUMS").read_bytes()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    r4 = do_release(b1, tmp_path / "d4", source_date_epoch=1700000000)
    assert r4.sha256 != r1.sha256
    m = json.loads(r4.manifest.read_text())
    assert (m["source_date_epoch"], m["mtime_from"]) == (1700000000, "SOURCE_DATE_EPOCH")


def test_windows_zip_is_reproducible_and_normalised(tmp_path: Path) -> None:
    b1 = make_build(tmp_path / "one", name="win-cuda", os_name="windows", cuda=True)
    b2 = make_build(tmp_path / "two", name="win-cuda", os_name="windows", cuda=True)
    r1, r2 = do_release(b1, tmp_path / "d1"), do_release(b2, tmp_path / "d2")
    assert r1.archive.suffix == ".zip" and r1.sha256 == r2.sha256
    with zipfile.ZipFile(r1.archive) as zf:
        infos = zf.infolist()
        assert [i.filename for i in infos] == sorted(i.filename for i in infos)
        for i in infos:
            assert i.date_time == (2026, 8, 7, 12, 34, 56)
            assert i.create_system == 3 and i.compress_type == zipfile.ZIP_DEFLATED
            assert (i.external_attr >> 16) & 0o777 == (0o755 if "/bin/" in i.filename else 0o644)
        m = json.loads(zf.read(f"{r1.name}/manifest.json"))
    assert m["pe_edits"][0]["after"]["stack_reserve"] == 268435456
    assert m["cuda"]["proven"] == {"bin/ggml-cuda.dll": ["sm_60", "sm_61", "sm_75", "sm_86"]}
    assert verify_dir(tmp_path / "d1").differences == ()


def test_two_recipes_share_one_sums_file(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    a = do_release(make_build(tmp_path / "a"), dist)
    b = do_release(make_build(tmp_path / "b", name="cuda-pascal-ampere", cuda=True), dist)
    lines = (dist / "SHA256SUMS").read_text().splitlines()
    assert len(lines) == 6  # archive, manifest copy, provenance statement of each
    assert f"{a.sha256}  {a.archive.name}" in lines and f"{b.sha256}  {b.archive.name}" in lines
    assert lines == sorted(lines, key=lambda line: line.split("  ")[1])
    assert verify_dir(dist).differences == ()


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize("smoke", [None, "failed", "skipped", "partial"])
def test_refuses_unsmoked_unless_allowed(tmp_path: Path, smoke: str | None) -> None:
    build = make_build(tmp_path, smoke=smoke)
    dist = tmp_path / "dist"
    with pytest.raises(ReleaseError, match="smoke stage .*refusing") as e:
        do_release(build, dist)
    assert "--allow-unsmoked" in e.value.hint
    assert not dist.exists()  # nothing half written
    r = do_release(build, dist, allow_unsmoked=True)
    m = json.loads(r.manifest.read_text())
    assert m["waivers"] == ["unsmoked"] and r.waivers == ("unsmoked",)
    assert verify_dir(dist).differences == ()


def test_unneeded_waiver_flag_changes_nothing(tmp_path: Path) -> None:
    build = make_build(tmp_path)
    a = do_release(build, tmp_path / "a")
    b = do_release(build, tmp_path / "b", allow_unsmoked=True, allow_stale=True)
    assert a.sha256 == b.sha256 and b.waivers == ()


def test_refuses_missing_build(tmp_path: Path) -> None:
    with pytest.raises(ReleaseError, match="no finished build: .*does not exist") as e:
        do_release(tmp_path / "out" / "cpu-rpc", tmp_path / "dist")
    assert e.value.problem == NoFinishedBuild(out_dir=tmp_path / "out" / "cpu-rpc", exists=False)
    (tmp_path / "out" / "half").mkdir(parents=True)
    with pytest.raises(ReleaseError, match="holds no build-info.json"):
        do_release(tmp_path / "out" / "half", tmp_path / "dist")
    assert not (tmp_path / "dist").exists()


def test_refuses_tampered_build_dir(tmp_path: Path) -> None:
    build = make_build(tmp_path)
    dist = tmp_path / "dist"
    (build / "bin" / "llama-cli").write_bytes(b"\x7fELF evil")
    with pytest.raises(ReleaseError, match="bin/llama-cli changed after the build"):
        do_release(build, dist)
    build = make_build(tmp_path / "b")
    (build / "bin" / "stray.so").write_bytes(b"x")
    with pytest.raises(ReleaseError, match="bin/stray.so is in .* but not in build-info"):
        do_release(build, dist)
    build = make_build(tmp_path / "c")
    (build / "bin" / "libggml.so").unlink()
    with pytest.raises(ReleaseError, match="bin/libggml.so is missing"):
        do_release(build, dist)
    build = make_build(tmp_path / "d")
    (build / "LICENSE").unlink()
    with pytest.raises(ReleaseError, match="no LICENSE"):
        do_release(build, dist)
    build = make_build(tmp_path / "e")
    rewrite_info(build, lambda i: i["artifacts"][0].update(path="../../etc/passwd"))
    with pytest.raises(ReleaseError, match=r"artifacts\[0\].path .* is not a file in bin/"):
        do_release(build, dist)
    build = make_build(tmp_path / "f")
    rewrite_info(build, lambda i: i["upstream"].pop("commit"))
    with pytest.raises(ReleaseError, match="upstream.commit is missing"):
        do_release(build, dist)
    assert not dist.exists()


def test_interrupted_release_leaves_no_half_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dist = tmp_path / "dist"
    first = do_release(make_build(tmp_path / "a"), dist)
    sums_before = (dist / "SHA256SUMS").read_bytes()
    import patchkit.release.archive as archive_mod

    real = archive_mod._write_zip

    def dies_halfway(f: Any, root: str, members: Any, mtime: int) -> None:
        real(f, root, members[:2], mtime)
        raise KeyboardInterrupt

    monkeypatch.setattr(archive_mod, "_write_zip", dies_halfway)
    with pytest.raises(KeyboardInterrupt):
        do_release(make_build(tmp_path / "b", name="win", os_name="windows"), dist)
    assert sorted(p.name for p in dist.iterdir()) == sorted(
        ["SHA256SUMS", first.archive.name, first.manifest.name, *(p.name for p in first.provenance)]
    )
    assert (dist / "SHA256SUMS").read_bytes() == sums_before
    # a damaged SHA256SUMS is refused rather than silently rewritten
    (dist / "SHA256SUMS").write_text("nonsense\n")
    with pytest.raises(ReleaseError, match="dist: SHA256SUMS line 1: not"):
        do_release(make_build(tmp_path / "c"), dist)


def test_refuses_name_collision_between_recipes(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    do_release(make_build(tmp_path / "a", name="cuda-a", cuda=True), dist)
    with pytest.raises(ReleaseError, match="already holds a release of recipe 'cuda-a'"):
        do_release(make_build(tmp_path / "b", name="cuda-b", cuda=True), dist)


def test_stale_build_refused_unless_allowed(project: Path, tmp_path: Path) -> None:
    recipe, series, build = project_build(project, tmp_path)
    dist = tmp_path / "dist"
    fresh = do_release(build, dist, recipe=recipe)
    assert fresh.waivers == ()
    # the recipe file changes after the build
    path = project / "recipes" / "fixture.toml"
    path.write_text(path.read_text() + "\n# tweak\n")
    changed = load_recipe(path, project, series)
    with pytest.raises(ReleaseError, match="stale: fixture.toml changed since the build") as e:
        do_release(build, tmp_path / "d2", recipe=changed)
    assert "--allow-stale" in e.value.hint
    r = do_release(build, tmp_path / "d2", recipe=changed, allow_stale=True)
    assert json.loads(r.manifest.read_text())["waivers"] == ["stale"]
    # a patch's bytes differ from what the build used
    rewrite_info(build, lambda i: i["patches"][0].update(sha256="00" * 32))
    with pytest.raises(ReleaseError, match="patch .* changed since the build"):
        do_release(build, tmp_path / "d3", recipe=recipe)
    # another recipe's build
    with pytest.raises(ReleaseError, match="the build is of recipe 'cpu-rpc'"):
        do_release(make_build(tmp_path / "x"), tmp_path / "d3", recipe=recipe)


@pytest.mark.skipif(os.name != "posix", reason="symlinks")
def test_a_build_folder_file_linked_to_a_host_file_is_never_packed(tmp_path: Path) -> None:
    import json

    from patchkit.core.fs import sha256_file

    secret = tmp_path / "secret"
    secret.write_bytes(b"\x7fELF HOST SECRET")
    for target in ("bin/llama-cli", "LICENSE", "bin"):
        build = make_build(tmp_path / target.replace("/", "-"))
        victim = build / target
        if target == "bin":  # the whole bin/ elsewhere, with the same files
            import shutil

            elsewhere = tmp_path / "elsewhere-bin"
            shutil.copytree(victim, elsewhere)
            shutil.rmtree(victim)
            victim.symlink_to(elsewhere)
        else:
            victim.unlink()
            victim.symlink_to(secret)
            # the attacker also makes build-info agree with the host file
            info = json.loads((build / "build-info.json").read_text())
            for a in info["artifacts"]:
                if a["path"] == target:
                    a["sha256"], a["size"] = sha256_file(secret), secret.stat().st_size
            (build / "build-info.json").write_text(json.dumps(info))
        dist = tmp_path / f"dist-{target.replace('/', '-')}"
        with pytest.raises(ReleaseError, match="resolves to .*, outside .*: refusing to copy it"):
            do_release(build, dist)
        assert not dist.exists() or not list(dist.iterdir())


def _cuda(nvcc: str) -> dict[str, Any]:
    return {"archs": [86], "cmake_architectures": "86-real", "nvcc": nvcc}


@pytest.mark.parametrize(
    ("info", "any_folder", "why"),
    [
        ({}, True, "source paths relative"),
        ({"compile_cache": {"launcher": "ccache"}, "cuda": _cuda("13.0")}, True, "SOURCE_DATE_EPOCH"),
        ({"compile_cache": {"launcher": "sccache"}}, False, "compiled through sccache"),
        ({"cuda": _cuda("11.8")}, False, "nvcc 11.8 names its temporary host files"),
        ({"cuda": _cuda("12.0")}, True, "nvcc's temporary files named after the object"),
    ],
)
def test_the_manifest_says_whether_another_folder_rebuilds_the_bytes(
    info: dict[str, Any], any_folder: bool, why: str
) -> None:
    from patchkit.release.contents import reproducibility
    from patchkit.spec.buildinfo import BuildInfo
    from tests.fixtures.buildinfo import build_info_json

    r = reproducibility(BuildInfo.from_json(build_info_json(**info)))
    assert r.any_folder is any_folder and why in r.why
    assert r.launcher == (info.get("compile_cache") or {}).get("launcher", "none")
