"""builder.compcache.build_session without processes: the ccache session (this build's
counters, the remembered time per compile, the fallback when the probe fails) and the
redaction of errors and the build log."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.builder.compcache import build_session
from patchkit.builder.compcache.build_session import session
from patchkit.builder.compcache.launcher import CachePlan, plan
from patchkit.builder.compcache.remote import RemoteUrl, parse_remote
from patchkit.builder.compcache.settings import CacheSettings
from patchkit.core.errors import BuildError
from tests.unit.builder.compcache.test_stats import STATS_LOG

PW = "hunter2-Secret"


def test_session_redacts_errors_and_the_build_log(tmp_path: Path) -> None:
    remote = parse_remote(f"redis://:{PW}@h:1", where="x")
    p = CachePlan(launcher=None, program=None, remote=remote, base_dir=tmp_path, env={})
    log = tmp_path / "build.log"
    log.write_text(f"ccache: error: bad remote storage redis://{PW}@h:1\n")
    with pytest.raises(BuildError) as e, session(p, tmp_path, {}, log_path=log):
        raise BuildError(f"failed with redis://:{PW}@h:1", detail=f"tail: {PW}", hint=PW)
    assert PW not in f"{e.value} {e.value.message} {e.value.detail} {e.value.hint} {e.value.args}"
    assert PW not in log.read_text() and "***" in log.read_text()


def _ccache_plan(tmp_path: Path, remote: RemoteUrl | None) -> CachePlan:
    return plan(CacheSettings(remote=remote), ccache=Path("/usr/bin/ccache"), cache_root=tmp_path, env={})


def test_ccache_session_counts_this_build_and_remembers_the_compile_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(build_session, "tool_version", lambda path: "4.7.5")
    monkeypatch.setattr(build_session, "probe", lambda remote: None)
    remote = parse_remote(f"redis://:{PW}@h:1", where="x")
    work, build = tmp_path / "work", tmp_path / "work" / "build"
    build.mkdir(parents=True)
    (work / "ccache-stats.log").write_text("stale lines from an earlier build\ncache_miss\n")
    with session(_ccache_plan(tmp_path, remote), work, {}) as s:
        assert s.env["CCACHE_STATSLOG"] == str(work / "ccache-stats.log")
        assert s.env["CCACHE_REMOTE_STORAGE"].startswith(f"redis://{PW}@h:1|")
        assert not (work / "ccache-stats.log").exists()  # this build's counters only
        s.before_build(build)
        (build / ".ninja_log").write_text(
            "# ninja log v6\n0\t4000\t0\ta.c.o\t1\n0\t2000\t0\tb.c.o\t1\n0\t10\t0\tc.c.o\t1\n"
        )
        (work / "ccache-stats.log").write_text(STATS_LOG)
        record = s.finish(build)
    assert record is not None
    assert (record.compiles, record.local_hits, record.remote_hits, record.misses) == (4, 1, 1, 2)
    assert record.miss_seconds == 3.0 and record.seconds_saved == 6.0  # 2 hits x 3 s
    assert record.remote == "redis://***@h:1" and record.remote_errors == 1
    assert "failed for 1 of 4 compiles" in record.fallback
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and PW not in err
    assert "4 compiles: 1 local hits, 1 remote hits, 2 misses; time saved ~6s" in err
    # the next build of this recipe with no miss uses the remembered time per compile
    with session(_ccache_plan(tmp_path, None), work, {}) as s:
        s.before_build(build)
        (work / "ccache-stats.log").write_text("# a.c\ndirect_cache_hit\nlocal_storage_hit\n")
        record = s.finish(build)
    assert record is not None and record.local_hits == 1 and record.seconds_saved == 3.0


def test_session_falls_back_when_the_probe_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(build_session, "probe", lambda remote: "refused the connection")
    remote = parse_remote(f"redis://:{PW}@h:1", where="x")
    with session(_ccache_plan(tmp_path, remote), tmp_path / "w", {}) as s:
        assert "CCACHE_REMOTE_STORAGE" not in s.env and s.remote is None
        assert s.fallback.endswith("refused the connection: building with the local cache only")
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "redis://***@h:1" in err and PW not in err
