"""Provenance beside each archive (release.provenance) and the sources an archive carries
(release.sources): the statement's schema, verify's tamper detection."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from patchkit.release.archive import read_archive
from patchkit.release.provenance import (
    BUILD_TYPE,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    dump_statement,
    statement_for,
)
from patchkit.release.verify import verify_dir
from patchkit.spec.manifest import ReleaseManifest, load_manifest
from patchkit.spec.recipe import load_recipe
from patchkit.spec.series import load_series
from tests.fixtures.project import write_patch, write_recipe
from tests.fixtures.release import COMMIT, do_release, make_build

GUARD = """\
diff --git a/src/rpc.c b/src/rpc.c
--- a/src/rpc.c
+++ b/src/rpc.c
@@ -1,1 +1,2 @@
 #include "fixture.h"
+/* guard */
"""


def _released(tmp_path: Path) -> tuple[Path, Any]:
    dist = tmp_path / "dist"
    r = do_release(make_build(tmp_path), dist)
    return dist, r


def _statement(r: Any) -> dict[str, Any]:
    (path,) = [p for p in r.provenance if p.name.endswith(".intoto.json")]
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_statement_schema(tmp_path: Path) -> None:
    dist, r = _released(tmp_path)
    st = _statement(r)
    assert st["_type"] == STATEMENT_TYPE == "https://in-toto.io/Statement/v1"
    assert st["predicateType"] == PREDICATE_TYPE == "https://slsa.dev/provenance/v1"
    assert st["subject"] == [
        {"name": r.archive.name, "digest": {"sha256": hashlib.sha256(r.archive.read_bytes()).hexdigest()}}
    ]
    bd = st["predicate"]["buildDefinition"]
    assert bd["buildType"] == BUILD_TYPE
    assert bd["externalParameters"]["upstream"]["commit"] == COMMIT
    assert bd["externalParameters"]["recipe"]["sha256"] == "ab" * 32
    assert bd["internalParameters"]["cmake"]["defines"]["GGML_RPC"] == "ON"
    deps = {d["name"]: d for d in bd["resolvedDependencies"]}
    assert deps["llama.cpp"]["digest"] == {"gitCommit": COMMIT}
    assert deps["llama.cpp"]["uri"] == f"git+https://github.com/ggml-org/llama.cpp@{COMMIT}"
    assert deps["patch:rpc-deserialize-tensor-zero-nbytes"]["digest"] == {"sha256": "ef" * 32}
    assert deps["recipe:cpu-rpc"]["digest"] == {"sha256": "ab" * 32}
    assert deps["patchkit"]["annotations"] == {"version": "0.1.0"}
    assert deps["cxx_compiler"]["uri"] == "pkg:generic/cxx_compiler@GNU%2012.2.0"
    assert "nvcc" not in deps  # a tool that was not used is not a dependency
    for d in bd["resolvedDependencies"]:  # a ResourceDescriptor needs uri, digest or content
        assert d.get("uri") or d.get("digest")
    rd = st["predicate"]["runDetails"]
    assert rd["builder"]["id"]
    manifest = r.manifest.read_bytes()
    assert rd["byproducts"] == [
        {"name": "manifest.json", "digest": {"sha256": hashlib.sha256(manifest).hexdigest()}}
    ]
    # listed in SHA256SUMS, canonical, and the same bytes from the same release
    sums = (dist / "SHA256SUMS").read_text()
    assert f"  {r.name}.intoto.json\n" in sums
    path = dist / f"{r.name}.intoto.json"
    assert path.read_bytes() == dump_statement(st)
    again = do_release(make_build(tmp_path / "again"), tmp_path / "dist2")
    assert (tmp_path / "dist2" / f"{again.name}.intoto.json").read_bytes() == path.read_bytes()
    assert verify_dir(dist).differences == ()


def test_statement_follows_from_the_manifest(tmp_path: Path) -> None:
    _, r = _released(tmp_path)
    manifest = load_manifest(r.manifest.read_bytes())
    assert isinstance(manifest, ReleaseManifest)
    st = statement_for(
        r.archive.name, r.sha256, manifest, hashlib.sha256(r.manifest.read_bytes()).hexdigest()
    )
    assert st.to_json() == _statement(r)
    assert dump_statement(st) == (r.manifest.parent / f"{r.name}.intoto.json").read_bytes()


def _edit_statement(dist: Path, name: str, edit: Any, *, resum: bool = True) -> None:
    path = dist / f"{name}.intoto.json"
    st = json.loads(path.read_text())
    edit(st)
    path.write_bytes(dump_statement(st))
    if resum:  # a careful forger fixes SHA256SUMS too
        sums = dist / "SHA256SUMS"
        lines = [
            ln
            if not ln.endswith(f"  {path.name}")
            else f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}"
            for ln in sums.read_text().splitlines()
        ]
        sums.write_text("\n".join(lines) + "\n")


def test_verify_names_each_forged_claim(tmp_path: Path) -> None:
    dist, r = _released(tmp_path)
    stmt = f"{r.name}.intoto.json"

    def other_commit(st: dict[str, Any]) -> None:
        st["predicate"]["buildDefinition"]["externalParameters"]["upstream"]["commit"] = "0" * 40

    _edit_statement(dist, r.name, other_commit)
    assert verify_dir(dist).differences == (
        f"{stmt}: does not match {r.archive.name} and its manifest: "
        "predicate.buildDefinition.externalParameters.upstream.commit",
    )

    def other_patch(st: dict[str, Any]) -> None:
        st["predicate"]["buildDefinition"]["externalParameters"]["upstream"]["commit"] = COMMIT
        for d in st["predicate"]["buildDefinition"]["resolvedDependencies"]:
            if d["name"].startswith("patch:"):
                d["digest"]["sha256"] = "00" * 32
        st["subject"][0]["digest"]["sha256"] = "11" * 32

    _edit_statement(dist, r.name, other_patch)
    (diff,) = verify_dir(dist).differences
    assert "resolvedDependencies[2].digest.sha256" in diff and "subject[0].digest.sha256" in diff

    _edit_statement(dist, r.name, lambda st: st.update(extra=1), resum=False)
    diffs = verify_dir(dist).differences
    assert any(d.startswith(f"{stmt}: sha256 is ") for d in diffs)
    assert any(
        d.startswith(f"{stmt}: does not match {r.archive.name} and its manifest: extra, ") for d in diffs
    )


def test_verify_wants_the_statement(tmp_path: Path) -> None:
    dist, r = _released(tmp_path)
    path = dist / f"{r.name}.intoto.json"
    path.write_text("not json")
    assert f"{path.name}: not a JSON in-toto statement" in verify_dir(dist).differences
    path.unlink()
    diffs = verify_dir(dist).differences
    assert f"{path.name}: missing (the provenance of {r.archive.name})" in diffs
    path.symlink_to(r.manifest)
    assert any(d.startswith(f"{path.name}: is not a regular file") for d in verify_dir(dist).differences)


def _project(tmp_path: Path) -> Path:
    proj = tmp_path / "project"
    (proj / "recipes").mkdir(parents=True)
    (proj / "patches").mkdir()
    (proj / "toolchains").mkdir()
    (proj / "patches" / "series").write_text("# series\n")
    write_patch(proj / "patches", "0001-guard.patch", GUARD)
    (proj / "toolchains" / "tc.cmake").write_text("set(CMAKE_SYSTEM_NAME Linux)\n")
    (proj / "toolchains" / "tc-compat.h").write_text("#pragma once\n")  # a helper it reads
    write_recipe(proj, "fixture", url="https://example.invalid/llama.cpp", commit=COMMIT)
    text = (
        (proj / "recipes" / "fixture.toml")
        .read_text()
        .replace("[build]\n", '[build]\ntoolchain = "toolchains/tc.cmake"\n')
    )
    (proj / "recipes" / "fixture.toml").write_text(text)
    return proj


def test_the_archive_carries_the_builds_sources(tmp_path: Path) -> None:
    proj = _project(tmp_path)
    recipe = load_recipe(proj / "recipes" / "fixture.toml", proj, load_series(proj / "patches"))
    p = recipe.patches[0]
    patches = [
        {
            "name": p.name,
            "file": p.filename,
            "sha256": p.sha256,
            "upstream_status": p.upstream_status,
            "when": p.when,
            "experimental": False,
            "result": "applied",
        }
    ]
    build = make_build(tmp_path / "b", name="fixture", recipe_sha=recipe.sha256, patches=patches)
    r = do_release(build, tmp_path / "dist", recipe=recipe, project=proj)
    manifest = json.loads(r.manifest.read_text())
    assert manifest["source"] == {
        "recipe": "source/recipes/fixture.toml",
        "series": "source/patches/series",
        "patches": ["source/patches/0001-guard.patch"],
        "toolchain": "source/toolchains/tc.cmake",
        "toolchain_files": ["source/toolchains/tc-compat.h"],
    }
    entries = {
        e.name[len(r.name) + 1 :]: e
        for e in read_archive(
            r.archive, keep=[f"{r.name}/source/patches/series", f"{r.name}/source/recipes/fixture.toml"]
        )
    }
    assert entries["source/recipes/fixture.toml"].sha256 == recipe.sha256
    assert entries["source/patches/0001-guard.patch"].sha256 == p.sha256
    assert entries["source/patches/series"].data == (
        b"# the patches this release's build applied, in order\n"
        + f"0001-guard.patch sha256={p.sha256}\n".encode()
    )
    files = {f["path"]: f for f in manifest["files"]}
    assert files["source/toolchains/tc.cmake"]["type"] == "SOURCE"
    assert files["source/toolchains/tc-compat.h"]["type"] == "SOURCE"
    assert verify_dir(tmp_path / "dist").differences == ()

    # a patch edited since the build: its bytes are not the build's, so nothing is carried
    (proj / "patches" / "0001-guard.patch").write_text(GUARD + "+/* more */\n")
    r = do_release(build, tmp_path / "dist2", recipe=recipe, project=proj)
    assert json.loads(r.manifest.read_text())["source"] is None
    # released without the recipe: nothing carried either
    r = do_release(build, tmp_path / "dist3")
    manifest = json.loads(r.manifest.read_text())
    assert manifest["source"] is None
    assert not any(f["path"].startswith("source/") for f in manifest["files"])


def test_ci_template_attests_every_released_file(project: Path) -> None:
    import pytest

    from tests.fixtures.release import workflow

    yaml = pytest.importorskip("yaml")
    build = yaml.safe_load(workflow(project))["jobs"]["build"]
    assert build["permissions"] == {"contents": "read", "id-token": "write", "attestations": "write"}
    steps = build["steps"]
    names = [s.get("name") for s in steps]
    attest = steps[names.index("Attest build provenance")]
    assert attest["uses"].startswith("actions/attest-build-provenance@")
    assert attest["with"] == {"subject-checksums": "dist/${{ matrix.recipe }}/SHA256SUMS"}
    assert names.index("Verify") < names.index("Attest build provenance")
    upload = next(i for i, s in enumerate(steps) if s.get("uses", "").startswith("actions/upload"))
    assert names.index("Attest build provenance") < upload
