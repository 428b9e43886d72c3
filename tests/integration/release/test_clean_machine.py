"""Releases run on a clean machine: a minimal Debian root (`debootstrap --variant=minbase`:
no compiler, no Python, no toolkit), the release unpacked in it, the binaries run there.

realbuild tests, skipped unless asked (they need root for chroot, and the Debian mirror or
a root made before):

- ``PATCHKIT_REALBUILD=out/cpu-rpc`` (a real CPU + RPC build): release it, verify it,
  unpack it in the root; there ``llama-cli --version`` (its build number is the archive
  name's), a greedy generation with a tiny model, and ``ggml-rpc-server`` on 127.0.0.1
  answering ``patchkit rpc-probe`` from outside the root. The import check's list of
  system libraries is compared with what the bare root lacks (``ldd`` there): a system
  library minbase does not have (libgomp1; libssl3 for a build with OpenSSL, released
  with ``PATCHKIT_ALLOW_SYSTEM=libssl.so.3,libcrypto.so.3``) is installed with apt, as a
  user would.
- ``PATCHKIT_CUDA_WHEELS=DIR`` (NVIDIA's CUDA 13 runtime and cuBLAS wheels for Linux) with
  nvcc 13 found and a Python with the nvidia-cublas wheel: tests/fixtures/cuda_project
  built through ``patchkit build`` (shared cudart, cuBLAS), released with the runtime
  bundle; in the root, build + bundle unpacked, ``ldd`` resolves every library but the
  driver.

``PATCHKIT_CLEAN_ROOT=DIR`` reuses a root made with ``debootstrap --variant=minbase
bookworm DIR`` (what is unpacked into it is removed afterwards); otherwise one is made in
a temp folder (minutes).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from patchkit.release.names import parse_build_number
from patchkit.smoke.tinymodel import write_tiny_llama

REALBUILD = os.environ.get("PATCHKIT_REALBUILD")
CUDA_WHEELS = os.environ.get("PATCHKIT_CUDA_WHEELS")
# system libraries of the allowed set that minbase lacks -> their Debian package
DEBIAN_PACKAGES = {"libgomp.so.1": "libgomp1", "libssl.so.3": "libssl3", "libcrypto.so.3": "libssl3"}
# `release --allow-system` for each (comma separated), e.g. libssl.so.3,libcrypto.so.3
ALLOW_SYSTEM = [a for a in os.environ.get("PATCHKIT_ALLOW_SYSTEM", "").split(",") if a]
OPT = "opt/patchkit-clean"
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"

pytestmark = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("chroot"),
    reason="needs root (chroot)",
)


def _pk(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    return subprocess.run(
        [sys.executable, "-m", "patchkit", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    given = os.environ.get("PATCHKIT_CLEAN_ROOT")
    if given:
        r = Path(given)
        assert (r / "usr" / "bin" / "apt-get").is_file(), f"{r} is not a debootstrap root"
    else:
        if not shutil.which("debootstrap"):
            pytest.skip("debootstrap not installed")
        r = tmp_path_factory.mktemp("root") / "bookworm"
        subprocess.run(
            ["debootstrap", "--variant=minbase", "bookworm", str(r), "http://deb.debian.org/debian"],
            check=True,
            capture_output=True,
            timeout=1800,
        )
    assert not (r / "usr" / "bin" / "gcc").exists() and not list((r / "usr" / "bin").glob("python3*")), (
        "not a minimal root"
    )
    (r / "proc").mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "proc", "proc", str(r / "proc")], check=True)
    try:
        yield r
    finally:
        subprocess.run(["umount", str(r / "proc")], check=False)
        shutil.rmtree(r / OPT, ignore_errors=True)


def chroot(root: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
    return subprocess.run(
        [CHROOT, str(root), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def unpack(archive: Path, root: Path) -> Path:
    """Unpack a verified release archive under root/opt; its top folder."""
    dest = root / OPT
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        top = tar.getnames()[0].split("/")[0]
        tar.extractall(dest, filter="data")
    return dest / top


def missing_in_root(root: Path, libs: list[str]) -> list[str]:
    dirs = ["usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu", "usr/lib", "lib", "lib64"]
    return [lib for lib in libs if not any((root / d / lib).exists() for d in dirs)]


def ldd_not_found(root: Path, inner: str) -> set[str]:
    r = chroot(root, "ldd", inner)
    return {m.group(1) for m in re.finditer(r"^\s*(\S+) => not found", r.stdout, re.M)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(not REALBUILD, reason="set PATCHKIT_REALBUILD=out/<cpu recipe>")
def test_cpu_release_runs_on_a_minimal_debian(root: Path, tmp_path: Path) -> None:
    build = Path(str(REALBUILD))
    dist = tmp_path / "dist"
    allow = [x for a in ALLOW_SYSTEM for x in ("--allow-system", a)]
    r = _pk("release", "--build-dir", str(build), "--out", str(dist), *allow)
    assert r.returncode == 0, r.stdout + r.stderr
    print(r.stderr)
    r = _pk("verify", str(dist))
    assert r.returncode == 0, r.stdout + r.stderr
    (archive,) = dist.glob("*.tar.gz")
    manifest = json.loads(next(dist.glob("*.manifest.json")).read_text())
    top = unpack(archive, root)
    inner = "/" + str(top.relative_to(root))
    # what the import check says the machine must provide vs what the bare root lacks
    system = manifest["imports"]["system"]
    lacking = missing_in_root(root, system)
    exes = [f["path"] for f in manifest["files"] if f["mode"] == "755"]
    not_found = set().union(*(ldd_not_found(root, f"{inner}/{e}") for e in exes))
    print(f"needs {system}; the bare root lacks {lacking}; ldd there: not found {not_found}")
    assert not_found == set(lacking), (not_found, lacking)  # nothing the walker did not name
    if lacking:
        pkgs = sorted({DEBIAN_PACKAGES[lib] for lib in lacking})
        shutil.copyfile("/etc/resolv.conf", root / "etc" / "resolv.conf")
        assert chroot(root, "apt-get", "update", timeout=600).returncode == 0
        r2 = chroot(root, "apt-get", "install", "-y", "--no-install-recommends", *pkgs, timeout=600)
        assert r2.returncode == 0, r2.stdout + r2.stderr
        assert not set().union(*(ldd_not_found(root, f"{inner}/{e}") for e in exes))

    v = chroot(root, f"{inner}/bin/llama-cli", "--version")
    assert v.returncode == 0, v.stdout + v.stderr
    parsed = parse_build_number(v.stdout + v.stderr)
    print(f"llama-cli --version: {(v.stdout + v.stderr).strip().splitlines()[-2:]}")
    assert parsed is not None
    number = manifest["upstream"].get("build_number")
    if number is not None:
        assert archive.name.startswith(f"llama-b{parsed[0]}-") and parsed[0] == number
    assert manifest["upstream"]["commit"].startswith(parsed[1])

    model = root / OPT / "tiny.gguf"
    write_tiny_llama(model)
    g = chroot(
        root,
        f"{inner}/bin/llama-cli",
        "-m",
        f"/{OPT}/tiny.gguf",
        "-p",
        "Hello",
        "-n",
        "16",
        "--temp",
        "0",
        "-c",
        "256",
        "--seed",
        "1",
        "-st",
        "--simple-io",
        "--no-warmup",
        "-t",
        "2",
    )
    assert g.returncode == 0, g.stdout[-2000:] + g.stderr[-2000:]
    text = g.stdout[g.stdout.rfind("Hello") + 5 :].split("[ Prompt:")[0].strip()
    print(f"generated: {text[:80]!r}")
    assert text

    port = free_port()
    env = {"PATH": "/usr/bin:/bin", "HOME": "/root"}
    server = subprocess.Popen(
        [CHROOT, str(root), f"{inner}/bin/ggml-rpc-server", "-d", "CPU", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        p = _pk("rpc-probe", f"127.0.0.1:{port}", timeout=60)
        print(f"rpc-probe: {(p.stdout + p.stderr).strip()}")
        assert p.returncode == 0, p.stdout + p.stderr
        assert "ggml RPC protocol" in p.stdout + p.stderr
        assert server.poll() is None  # still serving
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


CUDA_RECIPE = """name = "cuda-fixture"
description = "tests/fixtures/cuda_project with shared cudart and cuBLAS"
patches = []

[upstream]
url = "{url}"
commit = "{commit}"

[build]
targets = ["fixcuda", "fixmain"]

[build.defines]
CMAKE_CUDA_RUNTIME_LIBRARY = "Shared"
FIXCUDA_CUBLAS = true
CMAKE_BUILD_WITH_INSTALL_RPATH = true
CMAKE_INSTALL_RPATH = "$ORIGIN"

[cuda]
archs = [75, 86]
"""


@pytest.mark.skipif(not CUDA_WHEELS, reason="set PATCHKIT_CUDA_WHEELS=DIR (CUDA 13 wheels)")
def test_cuda_fixture_release_resolves_all_but_the_driver(root: Path, tmp_path: Path) -> None:
    from tests.fixtures.paths import CUDA_PROJECT
    from tests.fixtures.upstream import commit_files, git

    if "FIXCUDA_CUBLAS" not in (CUDA_PROJECT / "CMakeLists.txt").read_text():
        pytest.skip("the CUDA fixture cannot link cuBLAS yet")
    up = tmp_path / "upstream"
    up.mkdir()
    git(up, "init", "-q", "-b", "master")
    files: dict[str, str | bytes | None] = {
        p.name: p.read_bytes() for p in CUDA_PROJECT.iterdir() if p.is_file()
    }
    files["LICENSE"] = "MIT License (fixture)\n"
    commit = commit_files(up, files, "cuda fixture")
    project = tmp_path / "project"
    (project / "recipes").mkdir(parents=True)
    (project / "patches").mkdir()
    (project / "patches" / "series").write_text("# series\n")
    (project / "recipes" / "cuda-fixture.toml").write_text(
        CUDA_RECIPE.format(url=up.as_posix(), commit=commit)
    )
    out = tmp_path / "out"
    r = _pk(
        "--project",
        str(project),
        "build",
        "cuda-fixture",
        "--out",
        str(out),
        "-j",
        "2",
        "--no-smoke",
        timeout=3600,
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    dist = tmp_path / "dist"
    r = _pk(
        "--project",
        str(project),
        "release",
        "cuda-fixture",
        "--build-dir",
        str(out),
        "--out",
        str(dist),
        "--allow-unsmoked",
        "--runtime-wheels",
        str(CUDA_WHEELS),
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    print(r.stderr)
    assert _pk("verify", str(dist)).returncode == 0
    build_archive = next(p for p in dist.glob("llama-*.tar.gz"))
    runtime = next(dist.glob("cudart-llama-*.tar.gz"))
    top = unpack(build_archive, root)
    rt_top = unpack(runtime, root)
    for f in (rt_top / "bin").iterdir():  # unpacked over the build's folder, as documented
        shutil.copy2(f, top / "bin" / f.name)
    inner = "/" + str(top.relative_to(root))
    manifest = json.loads(next(dist.glob("llama-*.manifest.json")).read_text())
    missing = set()
    for f in manifest["files"]:
        if f["path"].startswith("bin/"):
            missing |= ldd_not_found(root, f"{inner}/{f['path']}")
    for f in json.loads(next(dist.glob("cudart-llama-*.manifest.json")).read_text())["files"]:
        if f["path"].startswith("bin/"):
            missing |= ldd_not_found(root, f"{inner}/{f['path']}")
    print(
        f"ldd in the clean root: not found {sorted(missing)}; the manifest's driver needs "
        f"{manifest['imports']['driver']}"
    )
    assert missing <= set(manifest["imports"]["driver"]), missing
    # run it: the loader finds everything; cudart then looks for the driver, which is not
    # there (cudaErrorInsufficientDriver 35 / cudaErrorNoDevice 100), not a loader error
    run = chroot(root, f"{inner}/bin/fixmain", *["x"] * 100)
    print(f"fixmain in the clean root: exit {run.returncode} {(run.stdout + run.stderr)[:200]!r}")
    assert run.returncode in (35, 100), run.stdout + run.stderr
    assert "error while loading shared libraries" not in run.stderr
