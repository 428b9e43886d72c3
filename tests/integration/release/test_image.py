"""A release as a container image, built from a real fixture build: the same bytes twice,
and (where podman and runc are installed, and we are root) loaded and run with podman.

podman needs a containers.conf without ulimits and with cgroupfs on these machines, and
runc as its runtime: ``CONTAINERS_CONF`` (which .ci/run writes) or else one written here
into a temp folder, so the host's configuration is never touched; podman's storage goes to a temp folder too (``--root``,
``--runroot``), so nothing is left behind.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

from patchkit.release.image import PREFIX, REPOSITORY
from patchkit.release.oci import read_image
from tests.fixtures.project import invoke

PODMAN = shutil.which("podman")
RUNC = shutil.which("runc")
CAN_RUN = bool(PODMAN and RUNC and hasattr(os, "geteuid") and os.geteuid() == 0)
WHY_NOT = "needs podman and runc, as root" if not CAN_RUN else ""


def _release_with_image(project: Path, tmp_path: Path, out: Path, n: int) -> tuple[Path, Path, str]:
    dist = tmp_path / f"dist{n}"
    r = invoke(
        project, "release", "fixture", "--build-dir", str(out), "--out", str(dist), "--image", "--json"
    )
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
    _, image1, digest1 = _release_with_image(project, tmp_path, out, 1)
    _, image2, digest2 = _release_with_image(project, tmp_path, out, 2)
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
    ran = _podman_run(tmp_path, image1, "fixture-cli", "--version")
    assert "version:" in ran, ran


def _podman_run(tmp_path: Path, image: Path, entrypoint: str, *args: str) -> str:
    conf = Path(os.environ.get("CONTAINERS_CONF") or tmp_path / "containers.conf")  # .ci/run writes one
    if not conf.is_file():
        conf.write_text('[containers]\ndefault_ulimits = []\n[engine]\ncgroup_manager = "cgroupfs"\n')
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    runroot = Path(tempfile.mkdtemp(prefix="pk-podman-", dir="/tmp"))  # podman: at most 50 characters
    base = [
        str(PODMAN),
        "--root",
        str(tmp_path / "storage"),
        "--runroot",
        str(runroot),
        "--runtime",
        str(RUNC),
        "--storage-driver",
        "vfs",
    ]

    def run(*cmd: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *cmd], capture_output=True, text=True, timeout=300, env=env)

    try:
        loaded = run("load", "-i", str(image))
        assert loaded.returncode == 0, loaded.stderr
        stem = image.name.removesuffix(".oci.tar")
        ref = f"localhost/{REPOSITORY}:{stem}"
        inspected = run("image", "inspect", ref)
        assert inspected.returncode == 0, loaded.stdout + inspected.stderr
        info = json.loads(inspected.stdout)[0]
        assert info["Config"]["User"] == "10001:10001"
        done = run("run", "--rm", "--network", "none", "--entrypoint", entrypoint, ref, *args)
        assert done.returncode == 0, done.stderr
        return done.stdout
    finally:
        run("rmi", "-a", "-f")
        shutil.rmtree(tmp_path / "storage", ignore_errors=True)
        shutil.rmtree(runroot, ignore_errors=True)


def test_rebuild_of_an_image_release_compares_the_digest(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "fixture"
    r = invoke(project, "build", "fixture", "--out", str(out), "-j", "2", "--launcher", "none")
    assert r.exit_code == 0, r.output
    dist, image, _ = _release_with_image(project, tmp_path, out, 1)
    r = invoke(
        project, "rebuild", str(dist), "--cache", str(tmp_path / "rb"), "-j", "2", "--launcher", "none"
    )
    assert r.exit_code == 0 and r.stdout.startswith("identical: "), r.output
    # an image whose release layer is not what these sources build: a well-formed image
    # of the same name, made from other files (its manifest matching them)
    from patchkit.release.image import rebuilt_image_diffs

    (archive,) = dist.glob("*.tar.gz")
    other = tmp_path / "other"
    shutil.copytree(out, other)
    cli = other / "bin" / "fixture-cli"
    cli.write_bytes(cli.read_bytes() + b"\0")
    (line,) = rebuilt_image_diffs(archive, other)
    assert "the rebuilt files give the image digest" in line and image.name in line
