"""Loadable backend modules (ggml-cpu-<variant>, ggml-cuda with GGML_BACKEND_DL) in a
release: roots of the import check and the RUNPATH check though nothing NEEDs them, and
the CPU variant table copied into the manifest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from patchkit.binary.shipping import shipping_findings
from patchkit.core.errors import ReleaseError
from patchkit.core.fs import sha256_bytes
from patchkit.release.imports import Binary, check_imports
from patchkit.release.verify import verify_dir
from patchkit.spec.buildinfo import BuildInfo
from patchkit.spec.manifest import ReleaseManifest, parse_manifest
from tests.fixtures.buildinfo import build_info_json
from tests.fixtures.elf import make_elf
from tests.fixtures.release import do_release, make_build, rewrite_info

VARIANTS = {
    "variants": [
        {"name": "x64", "file": "bin/libggml-cpu-x64.so", "features": []},
        {
            "name": "haswell",
            "file": "bin/libggml-cpu-haswell.so",
            "features": ["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2"],
        },
    ],
    "models": [
        {"model": "Nehalem", "qemu": "Nehalem", "variant": "x64"},
        {"model": "Haswell (Xeon E5 v3)", "qemu": "Haswell", "variant": "haswell"},
        {"model": "Zen 4 (EPYC Genoa, Ryzen 7000)", "qemu": None, "variant": "haswell"},
    ],
}


def _add_module(build: Path, rel: str, target: str, data: bytes) -> None:
    (build / rel).write_bytes(data)

    def edit(info: dict[str, Any]) -> None:
        info["artifacts"].append(
            {
                "target": target,
                "type": "MODULE_LIBRARY",
                "path": rel,
                "sha256": sha256_bytes(data),
                "size": len(data),
            }
        )

    rewrite_info(build, edit)


def _with_variants(tmp_path: Path, haswell: bytes | None = None) -> Path:
    build = make_build(tmp_path)
    good = make_elf(needed=("libggml-base.so", "libc.so.6"), runpath="$ORIGIN") + b" module\n" * 40
    base = make_elf(needed=("libc.so.6",), runpath="$ORIGIN", soname="libggml-base.so") + b" base\n" * 40
    _add_module(build, "bin/libggml-cpu-x64.so", "ggml-cpu-x64", good)
    _add_module(build, "bin/libggml-cpu-haswell.so", "ggml-cpu-haswell", haswell or good + b"h")
    (build / "bin" / "libggml-base.so").write_bytes(base)

    def edit(info: dict[str, Any]) -> None:
        info["artifacts"].append(
            {
                "target": "ggml-base",
                "type": "SHARED_LIBRARY",
                "path": "bin/libggml-base.so",
                "sha256": sha256_bytes(base),
                "size": len(base),
            }
        )
        info["cpu_variants"] = VARIANTS

    rewrite_info(build, edit)
    return build


def test_the_manifest_copies_the_variants_and_verify_agrees(tmp_path: Path) -> None:
    build = _with_variants(tmp_path)
    dist = tmp_path / "dist"
    r = do_release(build, dist)
    assert (
        "bin/libggml-cpu-haswell.so: libggml-base.so (bin/libggml-base.so), libc.so.6 (system)" in r.imports
    )
    m = json.loads(r.manifest.read_text())
    assert m["cpu_variants"] == VARIANTS
    types = {f["path"]: f["type"] for f in m["files"]}
    assert types["bin/libggml-cpu-x64.so"] == "MODULE_LIBRARY"
    assert verify_dir(dist).ok
    # a manifest written before the field (or of a one-backend build) reads without it
    parsed = parse_manifest({k: v for k, v in m.items() if k != "cpu_variants"})
    assert isinstance(parsed, ReleaseManifest) and parsed.cpu_variants is None
    assert "cpu_variants" not in parsed.to_json()
    full = parse_manifest(m)
    assert isinstance(full, ReleaseManifest) and full.cpu_variants is not None
    assert full.cpu_variants.names == ("x64", "haswell")


def test_a_module_nothing_needs_is_still_checked_and_refused(tmp_path: Path) -> None:
    bad = make_elf(needed=("libggml-base.so", "libopenblas.so.0"), runpath="$ORIGIN") + b" bad\n" * 40
    build = _with_variants(tmp_path, haswell=bad)
    with pytest.raises(ReleaseError) as e:
        do_release(build, tmp_path / "dist")
    assert "bin/libggml-cpu-haswell.so needs libopenblas.so.0" in e.value.message
    assert not (tmp_path / "dist").exists()


def test_a_module_with_a_host_runpath_is_refused_by_release_and_the_build(tmp_path: Path) -> None:
    bad = make_elf(needed=("libggml-base.so",), runpath="/home/builder/llama.cpp/build/bin") + b" x\n" * 40
    build = _with_variants(tmp_path, haswell=bad)
    with pytest.raises(ReleaseError) as e:
        do_release(build, tmp_path / "dist")
    assert "bin/libggml-cpu-haswell.so" in e.value.message and "$ORIGIN" in e.value.message
    refused = [f for f in shipping_findings(build / "bin") if f.refused]
    assert [f.file for f in refused] == ["libggml-cpu-haswell.so"]


def test_a_module_resolves_its_imports_by_its_own_search_path_only() -> None:
    """Nothing NEEDs a module, so it inherits no parent's loaded libraries: without its
    own $ORIGIN RUNPATH its libggml-base.so is not found (refused), although the
    executable that dlopens it at run time has that library loaded."""
    cli = Binary(path="bin/llama-cli", format="elf", needed=("libggml-base.so",), runpath=("$ORIGIN",))
    base = Binary(
        path="bin/libggml-base.so", format="elf", needed=(), runpath=("$ORIGIN",), soname="libggml-base.so"
    )
    files = ["bin/llama-cli", "bin/libggml-base.so", "bin/libggml-cpu-x64.so"]
    ok = Binary(
        path="bin/libggml-cpu-x64.so", format="elf", needed=("libggml-base.so",), runpath=("$ORIGIN",)
    )
    assert check_imports([cli, base, ok], os_name="linux", files=files).ok
    bare = Binary(path="bin/libggml-cpu-x64.so", format="elf", needed=("libggml-base.so",))
    report = check_imports([cli, base, bare], os_name="linux", files=files)
    assert report.problems == (
        "bin/libggml-cpu-x64.so needs libggml-base.so: bin/libggml-base.so is there, but "
        "bin/libggml-cpu-x64.so has no $ORIGIN RUNPATH to find it",
    )


def test_windows_variant_dlls_are_roots_too() -> None:
    cli = Binary(path="bin/llama-cli.exe", format="pe", needed=("ggml.dll", "KERNEL32.dll"))
    ggml = Binary(path="bin/ggml.dll", format="pe", needed=("ggml-base.dll", "kernel32.dll"))
    base = Binary(path="bin/ggml-base.dll", format="pe", needed=("kernel32.dll",))
    mod = Binary(path="bin/ggml-cpu-haswell.dll", format="pe", needed=("ggml-base.dll", "libgomp-1.dll"))
    files = [b.path for b in (cli, ggml, base, mod)]
    report = check_imports([cli, ggml, base, mod], os_name="windows", files=files)
    assert report.problems == (
        "bin/ggml-cpu-haswell.dll needs libgomp-1.dll: not in bin/ and not a Windows system DLL",
    )


def test_build_info_and_manifest_read_with_and_without_variants() -> None:
    old = build_info_json()
    info = BuildInfo.from_json(old)
    assert info.cpu_variants is None and "cpu_variants" not in info.to_json()  # old files: same bytes
    art = {
        "target": "ggml-cpu-x64",
        "type": "MODULE_LIBRARY",
        "path": "bin/libggml-cpu-x64.so",
        "sha256": "0" * 64,
        "size": 1,
    }
    one = {"variants": VARIANTS["variants"][:1], "models": VARIANTS["models"][:1]}
    new = build_info_json(artifacts=[art], cpu_variants=one)
    info = BuildInfo.from_json(new)
    assert info.cpu_variants is not None and info.cpu_variants.names == ("x64",)
    assert info.to_json() == new
    from patchkit.core.errors import ConfigError

    with pytest.raises(
        ConfigError, match=r"cpu_variants.variants\[0\].file 'bin/libggml-cpu-x64.so' is not in artifacts"
    ):
        BuildInfo.from_json(build_info_json(artifacts=[{**art, "path": "bin/other.so"}], cpu_variants=one))


def _repack(r: Any, dist: Path, edit: Any, files_edit: dict[str, bytes] | None = None) -> None:
    """The release in ``dist`` with members replaced and the manifest edited, every sha256
    (the manifest's files, its copy beside, SHA256SUMS) made to agree."""
    from patchkit.core.fs import sha256_file
    from patchkit.release.archive import Member, read_archive, write_archive
    from patchkit.release.release import SUMS, write_sums
    from patchkit.spec.manifest import dump_manifest

    root = r.archive.name.removesuffix(".tar.gz")
    entries = read_archive(r.archive, keep=[e.name for e in read_archive(r.archive)])
    files = {e.name[len(root) + 1 :]: (e.data or b"", e.mode) for e in entries}
    manifest = json.loads(files["manifest.json"][0])
    for rel, data in (files_edit or {}).items():
        files[rel] = (data, files[rel][1])
        for f in manifest["files"]:
            if f["path"] == rel:
                f["sha256"], f["size"] = sha256_bytes(data), len(data)
    edit(manifest)
    data = dump_manifest(manifest)
    files["manifest.json"] = (data, 0o644)
    members = [Member(name=n, mode=m, data=d) for n, (d, m) in files.items()]
    write_archive(r.archive, root, members, mtime=manifest["source_date_epoch"])
    r.manifest.write_bytes(data)
    write_sums(dist / SUMS, {p.name: sha256_file(p) for p in dist.iterdir() if p.name.startswith(root)})


def test_verify_flags_an_archive_whose_module_cannot_resolve_its_imports(tmp_path: Path) -> None:
    """An archive repacked with a module that imports a library no machine is promised:
    verify recomputes the import check over every file of bin/, modules included."""
    dist = tmp_path / "dist"
    r = do_release(_with_variants(tmp_path), dist)
    bad = make_elf(needed=("libggml-base.so", "libopenblas.so.0"), runpath="$ORIGIN") + b" bad\n" * 40
    _repack(r, dist, lambda m: None, {"bin/libggml-cpu-haswell.so": bad})
    diffs = verify_dir(dist).differences
    assert any("bin/libggml-cpu-haswell.so needs libopenblas.so.0" in d for d in diffs), diffs


def test_verify_recomputes_the_cpu_model_table(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    r = do_release(_with_variants(tmp_path), dist)

    def claim_more(m: dict[str, Any]) -> None:
        m["cpu_variants"]["models"][0]["variant"] = "haswell"  # Nehalem has no AVX2
        m["cpu_variants"]["variants"][0]["file"] = "bin/libllama.so"
        m["cpu_variants"]["models"].append({"model": "A CPU of tomorrow", "qemu": None, "variant": "x64"})

    _repack(r, dist, claim_more)
    # (the provenance statement names the old sha256s: that difference is left out here)
    assert tuple(d for d in verify_dir(dist).differences if "cpu_variants" in d) == (
        f"{r.archive.name}: cpu_variants names bin/libllama.so, which is not a module (MODULE_LIBRARY) "
        "of the archive",
        f"{r.archive.name}: cpu_variants says Nehalem loads haswell, but the built variants give x64",
    )
