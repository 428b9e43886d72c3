"""The bytes of a ccache build must not depend on whether ccache rewrote
the compile line. With ``CCACHE_DISABLE=1`` (ccache's own switch; an uncacheable call or a
fallback is the same) ccache hands the compiler the command line as CMake wrote it, with
absolute source paths; the prefix maps were passed only without a launcher, so such a
build in a second cache folder held that folder's paths and differed, while build-info
still said "launcher ccache" (the manifest promising any-folder reproducibility)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tests.fixtures.project import invoke, write_patch
from tests.integration.rebuild.test_reproducible import STAMP_HEADER, STAMP_PATCH

needs_ccache = pytest.mark.skipif(shutil.which("ccache") is None, reason="ccache is not installed")


def _build(project: Path, out: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    r = invoke(project, "build", "fixture", "--out", str(out), "-j", "2", "--launcher", "ccache")
    assert r.exit_code == 0, r.output
    info = json.loads((out / "build-info.json").read_text())
    assert info["compile_cache"]["launcher"] == "ccache"
    files = {
        p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != "build-info.json"
    }
    listed = {a["path"]: a["sha256"] for a in info["artifacts"]}
    assert listed and all(files[p] == h for p, h in listed.items())  # build-info's list agrees
    return files


@needs_ccache
def test_ccache_disabled_in_a_second_cache_folder_gives_the_same_bytes(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_patch(project / "patches", "0002-core-stamp.patch", STAMP_PATCH, header=STAMP_HEADER)
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache"))
    for k in ("CCACHE_BASEDIR", "CCACHE_DISABLE", "CCACHE_IGNOREOPTIONS", "CFLAGS", "CXXFLAGS"):
        monkeypatch.delenv(k, raising=False)
    a = _build(project, tmp_path / "a", tmp_path / "cache-a", monkeypatch)
    monkeypatch.setenv("CCACHE_DISABLE", "1")
    b = _build(project, tmp_path / "b", tmp_path / "other" / "deeper" / "cache-b", monkeypatch)
    assert {"bin/fixture-cli", "bin/fixture-rpc-server", "LICENSE"} <= set(a)
    assert a == b
    lib = next((tmp_path / "b" / "bin").glob("libfixture-core.so*")).read_bytes()
    assert b"../src/src/core.c" in lib and b"../src/extra/where.h" in lib  # as ccache gives them
    assert str(tmp_path).encode() not in lib  # no folder of either cache


@needs_ccache
def test_ccache_still_hits_across_cache_folders_with_the_maps(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The maps hold each folder's absolute paths; ccache must not hash them (else a second
    folder, or a second machine on a shared remote, never hits)."""
    import subprocess

    write_patch(project / "patches", "0002-core-stamp.patch", STAMP_PATCH, header=STAMP_HEADER)
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache"))
    for k in ("CCACHE_BASEDIR", "CCACHE_DISABLE", "CCACHE_IGNOREOPTIONS", "CFLAGS", "CXXFLAGS"):
        monkeypatch.delenv(k, raising=False)
    a = _build(project, tmp_path / "a", tmp_path / "cache-a", monkeypatch)
    subprocess.run(["ccache", "--zero-stats"], check=True, capture_output=True)
    b = _build(project, tmp_path / "b", tmp_path / "other" / "cache-b", monkeypatch)
    assert a == b
    stats = subprocess.run(
        ["ccache", "--print-stats"], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    got = dict(line.split("\t", 1) for line in stats if "\t" in line)
    hits = int(got.get("direct_cache_hit", 0)) + int(got.get("preprocessed_cache_hit", 0))
    misses = int(got.get("cache_miss", 0))
    assert hits >= 3 and misses == 0, got
