"""A release as a container image, built from a real fixture build: the same bytes twice,
verify and rebuild of it, and (where podman and runc are installed, and we are root)
loaded and run with podman; where a docker daemon answers (``docker info``), loaded and
run with docker too.

podman needs a containers.conf without ulimits and with cgroupfs on these machines, and
runc as its runtime: ``CONTAINERS_CONF`` (which .ci/run writes) or else one written here
into a temp folder, so the host's configuration is never touched; podman's storage goes to
a temp folder too (``--root``, ``--runroot``), so nothing is left behind.

realbuild (``PATCHKIT_REALBUILD=out/cpu-rpc``, a real CPU + RPC build; one with OpenSSL
needs ``PATCHKIT_ALLOW_SYSTEM=libssl.so.3,libcrypto.so.3``): its image loaded,
``llama-cli --version`` and a greedy generation (a tiny model mounted read-only) with no
network, and ``ggml-rpc-server`` in a container with a published port answering
``patchkit rpc-probe`` from the host.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from patchkit.core.net import free_port
from patchkit.release.image import PREFIX, REPOSITORY, rebuilt_image_diffs
from patchkit.release.oci_read import read_image
from patchkit.smoke.tinymodel import write_tiny_llama
from tests.fixtures.project import invoke

PODMAN = shutil.which("podman")
RUNC = shutil.which("runc")
CAN_RUN = bool(PODMAN and RUNC and hasattr(os, "geteuid") and os.geteuid() == 0)
WHY_NOT = "needs podman and runc, as root" if not CAN_RUN else ""
REALBUILD = os.environ.get("PATCHKIT_REALBUILD")
# `release --allow-system` for each (comma separated), e.g. libssl.so.3,libcrypto.so.3
ALLOW_SYSTEM = [a for a in os.environ.get("PATCHKIT_ALLOW_SYSTEM", "").split(",") if a]
DOCKER = shutil.which("docker")
CONF = '[containers]\ndefault_ulimits = []\n[engine]\ncgroup_manager = "cgroupfs"\n'


class Podman:
    """podman with its own storage in a temp folder, runc, and the containers.conf above."""

    def __init__(self, tmp: Path) -> None:
        conf = Path(os.environ.get("CONTAINERS_CONF") or tmp / "containers.conf")
        if not conf.is_file():
            conf.write_text(CONF)
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}
        self.storage = tmp / "storage"
        self.runroot = Path(tempfile.mkdtemp(prefix="pk-podman-", dir="/tmp"))  # at most 50 characters
        self.base = [
            *(str(PODMAN), "--root", str(self.storage), "--runroot", str(self.runroot)),
            *("--runtime", str(RUNC), "--storage-driver", "vfs"),
        ]

    def __call__(self, *cmd: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.base, *cmd], capture_output=True, text=True, timeout=timeout, env=self.env
        )

    def load(self, image: Path) -> str:
        loaded = self("load", "-i", str(image))
        assert loaded.returncode == 0, loaded.stderr
        ref = f"{REPOSITORY}:{image.name.removesuffix('.oci.tar')}"
        assert f"Loaded image: {ref}" in loaded.stdout + loaded.stderr, loaded.stdout + loaded.stderr
        return ref

    def close(self) -> None:
        self("rm", "-a", "-f")
        self("rmi", "-a", "-f")
        shutil.rmtree(self.storage, ignore_errors=True)
        shutil.rmtree(self.runroot, ignore_errors=True)


@pytest.fixture
def podman(tmp_path: Path) -> Iterator[Podman]:
    if not CAN_RUN:
        pytest.skip(WHY_NOT)
    p = Podman(tmp_path)
    try:
        yield p
    finally:
        p.close()


def _release_with_image(
    project: Path, tmp_path: Path, out: Path, n: int, *extra: str
) -> tuple[Path, Path, str]:
    dist = tmp_path / f"dist{n}"
    r = invoke(project, "release", *extra, "--build-dir", str(out), "--out", str(dist), "--image", "--json")
    assert r.exit_code == 0, r.output
    rec = json.loads(r.stdout)["image"]
    assert rec["system_from"] == "/" and rec["file"].endswith(".oci.tar")
    r = invoke(project, "verify", str(dist))
    assert r.exit_code == 0 and "and 1 container image(s) match" in r.stdout, r.output
    return dist, dist / rec["file"], rec["digest"]


def test_image_reproducible_and_runs(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "fixture"
    r = invoke(project, "build", "fixture", "--out", str(out), "-j", "2")
    assert r.exit_code == 0, r.output
    _, image1, digest1 = _release_with_image(project, tmp_path, out, 1, "fixture")
    _, image2, digest2 = _release_with_image(project, tmp_path, out, 2, "fixture")
    assert image1.read_bytes() == image2.read_bytes()  # the same build: the same image bytes
    assert digest1 == digest2 and digest1.startswith("sha256:")
    contents = read_image(image1)
    assert contents.problems == ()
    assert contents.digest == digest1
    paths = {e.path for layer in contents.layers for e in layer.entries}
    assert f"{PREFIX}/bin/fixture-cli" in paths and f"{PREFIX}/manifest.json" in paths
    assert "lib64/ld-linux-x86-64.so.2" in paths and "etc/passwd" in paths
    with tarfile.open(image1) as tf:  # docker's manifest.json beside the OCI layout
        names = tf.getnames()
    assert {"oci-layout", "index.json", "manifest.json"} <= set(names)
    if not CAN_RUN:
        pytest.skip(WHY_NOT)
    pm = Podman(tmp_path)
    try:
        ref = pm.load(image1)
        info = json.loads(pm("image", "inspect", ref).stdout)[0]
        assert info["Config"]["User"] == "10001:10001"
        assert info["Digest"] == digest1  # podman keeps the attested digest
        done = pm("run", "--rm", "--network", "none", "--entrypoint", "fixture-cli", ref, "--version")
        assert done.returncode == 0 and "version:" in done.stdout, done.stderr
        who = pm(
            "run", "--rm", "--network", "none", "--entrypoint", "/opt/llama/bin/fixture-cli", ref, "--version"
        )
        assert who.returncode == 0, who.stderr
    finally:
        pm.close()


def _docker_why_not() -> str:
    if not DOCKER:
        return "needs the docker client"
    try:
        info = subprocess.run([DOCKER, "info"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "needs a docker daemon (`docker info` timed out)"
    if info.returncode != 0:
        first = (info.stderr.strip().splitlines() or [""])[0][:160]
        return f"needs a docker daemon (`docker info`: {first})"
    return ""


def test_image_loads_and_runs_in_docker(project: Path, tmp_path: Path) -> None:
    why = _docker_why_not()
    if why:
        pytest.skip(why)
    assert DOCKER is not None
    out = tmp_path / "out" / "fixture"
    r = invoke(project, "build", "fixture", "--out", str(out), "-j", "2")
    assert r.exit_code == 0, r.output
    _, image, _ = _release_with_image(project, tmp_path, out, 1, "fixture")
    contents = read_image(image)
    assert contents.manifest is not None
    ref = f"{REPOSITORY}:{image.name.removesuffix('.oci.tar')}"

    def docker(*cmd: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([DOCKER, *cmd], capture_output=True, text=True, timeout=300)

    loaded = docker("load", "-i", str(image))
    try:
        assert loaded.returncode == 0, loaded.stderr
        assert f"Loaded image: {ref}" in loaded.stdout, loaded.stdout + loaded.stderr
        (info,) = json.loads(docker("image", "inspect", ref).stdout)
        assert info["Id"] == contents.manifest.config.digest  # docker's image ID is the config's digest
        assert info["Config"]["User"] == "10001:10001"
        assert info["Config"]["Labels"]["io.patchkit.archive"] == image.name.replace(".oci.tar", ".tar.gz")
        done = docker("run", "--rm", "--network", "none", "--entrypoint", "fixture-cli", ref, "--version")
        assert done.returncode == 0 and "version:" in done.stdout, done.stdout + done.stderr
    finally:
        docker("rmi", "-f", ref)


def test_rebuild_of_an_image_release_compares_the_digest(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "fixture"
    r = invoke(project, "build", "fixture", "--out", str(out), "-j", "2", "--launcher", "none")
    assert r.exit_code == 0, r.output
    dist, image, _ = _release_with_image(project, tmp_path, out, 1, "fixture")
    r = invoke(
        project, "rebuild", str(dist), "--cache", str(tmp_path / "rb"), "-j", "2", "--launcher", "none"
    )
    assert r.exit_code == 0 and r.stdout.startswith("identical: "), r.output
    # real ELF files of another build under this release's name: another digest, one line
    (archive,) = dist.glob("*.tar.gz")
    other = tmp_path / "other"
    shutil.copytree(out, other)
    cli = other / "bin" / "fixture-cli"
    cli.write_bytes(cli.read_bytes() + b"\0")
    (line,) = rebuilt_image_diffs(archive, other)
    assert "the rebuilt files give the image digest" in line and image.name in line


def _pk(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    return subprocess.run(
        [sys.executable, "-m", "patchkit", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.mark.skipif(not REALBUILD, reason="set PATCHKIT_REALBUILD=out/<cpu recipe>")
def test_realbuild_image_runs_cli_generation_and_rpc(podman: Podman, tmp_path: Path) -> None:
    assert REALBUILD is not None
    dist = tmp_path / "dist"
    allow = [x for a in ALLOW_SYSTEM for x in ("--allow-system", a)]
    r = _pk(
        "release", "--build-dir", REALBUILD, "--out", str(dist), "--image", "--json", *allow, timeout=1800
    )
    assert r.returncode == 0, r.stdout + r.stderr
    rec = json.loads(r.stdout)["image"]
    v = _pk("verify", str(dist), timeout=1800)
    assert v.returncode == 0, v.stdout + v.stderr
    ref = podman.load(dist / rec["file"])
    run = ("run", "--rm", "--network", "none")
    ver = podman(*run, "--entrypoint", "llama-cli", ref, "--version")
    assert ver.returncode == 0, ver.stdout + ver.stderr
    print(f"llama-cli --version: {(ver.stdout + ver.stderr).strip().splitlines()[-2:]}")
    models = tmp_path / "models"
    models.mkdir()
    write_tiny_llama(models / "tiny.gguf")
    gen = podman(
        *run,
        "-v",
        f"{models}:/models:ro",
        "--entrypoint",
        "llama-cli",
        ref,
        *("-m", "/models/tiny.gguf", "-p", "Hello", "-n", "16", "--temp", "0", "-c", "256"),
        *("--seed", "1", "-st", "--simple-io", "--no-warmup", "-t", "2"),
        timeout=600,
    )
    assert gen.returncode == 0, gen.stdout[-2000:] + gen.stderr[-2000:]
    text = gen.stdout[gen.stdout.rfind("Hello") + 5 :].split("[ Prompt:")[0].strip()
    print(f"generated: {text[:80]!r}")
    assert text  # greedy tokens came out, from a model the container could only read
    port = free_port()
    started = podman(
        *("run", "-d", "--rm", "--name", "pk-rpc", "-p", f"127.0.0.1:{port}:50052"),
        *("--entrypoint", "ggml-rpc-server", ref, "-H", "0.0.0.0", "-p", "50052"),
    )
    assert started.returncode == 0, started.stderr
    try:
        # no bare connect first: the server takes one client at a time
        probe = _pk("rpc-probe", f"127.0.0.1:{port}", "--timeout", "20", timeout=60)
        for _ in range(10):
            if probe.returncode == 0:
                break
            time.sleep(1)
            probe = _pk("rpc-probe", f"127.0.0.1:{port}", "--timeout", "20", timeout=60)
        logs = podman("logs", "pk-rpc")
        assert probe.returncode == 0, probe.stdout + probe.stderr + logs.stdout + logs.stderr
        print(f"rpc-probe: {probe.stdout.strip()}")
        assert "ggml RPC protocol" in probe.stdout
    finally:
        podman("stop", "-t", "2", "pk-rpc")
