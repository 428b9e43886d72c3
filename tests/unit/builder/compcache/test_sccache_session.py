"""builder.compcache with sccache as the launcher, without processes: the server's start
(faked at Processes.start_server, what core.proc offers) and the sccache commands (faked at
run). A server that does not start with the remote falls back to the local cache with one
warning; one that does not start at all is ToolMissing (exit 8); the scheduler's config;
the server's log kept, redacted."""

from __future__ import annotations

import json
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from patchkit.builder.compcache import build_session, sccache
from patchkit.builder.compcache.build_session import session
from patchkit.builder.compcache.launcher import CachePlan
from patchkit.builder.compcache.remote import RemoteUrl, parse_dist, parse_remote
from patchkit.builder.problems import SccacheDidNotStart
from patchkit.core.errors import ServerStartError, ToolMissing
from patchkit.core.proc import Processes, RunResult
from tests.unit.builder.compcache.test_stats import SCCACHE_JSON

PW = "hunter2-Secret"
TOKEN = "d1st-t0ken"


class FakeServers:
    """Processes.start_server: writes the server's log where the real one does, fails the
    first ``fail`` starts the way core.proc does (ServerStartError)."""

    def __init__(self, fail: int) -> None:
        self.fail = fail
        self.envs: list[dict[str, str]] = []

    def __call__(
        self,
        procs: Processes,
        args: Sequence[object],
        port: int,
        *,
        name: str,
        timeout: float,
        env: dict[str, str] | None = None,
    ) -> None:
        self.envs.append(dict(env or {}))
        (procs.logdir / f"{name}-{port}.log").write_text(f"storage check: redis://:{PW}@h:1 said no\n")
        if len(self.envs) <= self.fail:
            raise ServerStartError(f"{name} did not listen on 127.0.0.1:{port} within 30s: {PW} refused")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Sets up the fakes; ``fake(fail=N)`` → (FakeServers, the sccache commands run)."""
    ran: list[list[str]] = []

    def run(args: Sequence[object], **kw: Any) -> RunResult:
        ran.append([str(a) for a in args[1:]])
        out = json.dumps(SCCACHE_JSON) if "--show-stats" in ran[-1] else ""
        return RunResult(args=tuple(map(str, args)), returncode=0, stdout=out, stderr="", seconds=0.0)

    def setup(fail: int = 0, probe: str | None = None) -> tuple[FakeServers, list[list[str]]]:
        servers = FakeServers(fail)
        monkeypatch.setattr(Processes, "start_server", lambda procs, *a, **kw: servers(procs, *a, **kw))
        monkeypatch.setattr(sccache, "run", run)
        monkeypatch.setattr(build_session, "probe", lambda remote: probe)
        monkeypatch.setattr(build_session, "tool_version", lambda path: "0.16.0")
        return servers, ran

    return setup


def _plan(tmp_path: Path, remote: RemoteUrl | None, dist: RemoteUrl | None = None) -> CachePlan:
    return CachePlan(
        launcher="sccache", program=tmp_path / "sccache", remote=remote, base_dir=tmp_path, env={}, dist=dist
    )


def test_a_server_that_fails_with_the_remote_falls_back_to_the_local_cache(
    tmp_path: Path, fake: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    servers, ran = fake(fail=1)
    remote = parse_remote(f"redis://:{PW}@h:1", where="x")
    work = tmp_path / "work"
    work.mkdir()
    with session(_plan(tmp_path, remote), work, {"SCCACHE_LOG": "debug"}) as s:
        assert s.remote is None and not any(k.startswith("SCCACHE_REDIS") for k in s.env)
        assert s.env["SCCACHE_SERVER_PORT"] == servers.envs[1]["SCCACHE_SERVER_PORT"]
        assert s.env["SCCACHE_IDLE_TIMEOUT"] == "1800"
        record = s.finish(work / "build")
    first, second = servers.envs
    assert first["SCCACHE_REDIS_PASSWORD"] == PW and first["SCCACHE_MULTILEVEL_CHAIN"] == "disk,redis"
    assert not any(k.startswith(("SCCACHE_REDIS", "SCCACHE_MULTILEVEL")) for k in second)
    for env in servers.envs:
        assert (env["SCCACHE_START_SERVER"], env["SCCACHE_NO_DAEMON"], env["SCCACHE_LOG"]) == (
            "1",
            "1",
            "debug",
        )
    assert s.fallback == (
        "sccache did not start with the remote redis://***@h:1 (its storage check failed): "
        "building with the local cache only"
    )
    assert record is not None and record.remote is None and record.fallback == s.fallback
    assert (record.compiles, record.local_hits, record.remote_hits) == (5, 1, 3)
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and PW not in err
    assert ran == [["--show-stats", "--stats-format", "json"], ["--stop-server"]]
    log = (work / "sccache.log").read_text()
    assert log.count("said no") == 2 and PW not in log and "***" in log


def test_a_server_that_does_not_start_is_a_missing_tool_without_the_password(
    tmp_path: Path, fake: Any
) -> None:
    servers, ran = fake(fail=2)
    remote = parse_remote(f"redis://:{PW}@h:1", where="x")
    with pytest.raises(ToolMissing) as e, session(_plan(tmp_path, remote), tmp_path, {}):
        pytest.fail("the block must not run")
    assert len(servers.envs) == 2 and e.value.exit_code == 8
    assert isinstance(e.value.problem, SccacheDidNotStart)
    assert e.value.problem.why.startswith("sccache did not listen on 127.0.0.1:")
    assert PW not in f"{e.value.problem} {e.value.message} {e.value.args}"
    assert ran == []  # no --stop-server after a failed start
    assert PW not in (tmp_path / "sccache.log").read_text()


def test_without_a_remote_one_failed_start_is_enough(tmp_path: Path, fake: Any) -> None:
    servers, _ = fake(fail=1)
    with (
        pytest.raises(ToolMissing, match="SccacheDidNotStart"),
        session(_plan(tmp_path, None), tmp_path, {}),
    ):
        pytest.fail("the block must not run")
    assert len(servers.envs) == 1


def test_the_scheduler_gets_a_private_config_or_one_warning(
    tmp_path: Path, fake: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    servers, _ = fake()
    dist = parse_dist(f"http://{TOKEN}@127.0.0.1:10600", where="--dist")
    with session(_plan(tmp_path, None, dist), tmp_path, {}) as s:
        conf = Path(s.env["SCCACHE_CONF"])
        assert servers.envs[0]["SCCACHE_CONF"] == str(conf)
        assert stat.S_IMODE(conf.stat().st_mode) == 0o600
        text = conf.read_text()
        assert 'scheduler_url = "http://127.0.0.1:10600"' in text and f'token = "{TOKEN}"' in text
        assert json.dumps(str(tmp_path / "sccache-dist-toolchains")) in text
        record = s.finish(tmp_path / "build")
    assert not conf.exists()  # the server's private folder is gone
    assert record is not None and record.dist_scheduler == "http://***@127.0.0.1:10600"
    assert "warning:" not in capsys.readouterr().err
    fake(probe="refused the connection")
    with session(_plan(tmp_path, None, dist), tmp_path, {}) as s:
        assert "SCCACHE_CONF" not in s.env and s.dist is None
        assert s.fallback == "sccache-dist scheduler http://***@127.0.0.1:10600 refused the connection"
    err = capsys.readouterr().err
    assert (
        "the sccache-dist scheduler http://***@127.0.0.1:10600 refused the connection: compiling here" in err
    )
    assert TOKEN not in err
