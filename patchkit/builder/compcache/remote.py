"""A remote compile cache's URL (and an sccache-dist scheduler's): parsed and checked once,
its credentials kept apart, and the redaction every message, record and log line goes
through (:attr:`RemoteUrl.redacted`, :func:`redact`; a URL as typed, malformed or not,
through :func:`patchkit.core.redact.redact_url`, which masks secret query parameters too).
The credentials go only into the launcher's environment
(:mod:`patchkit.builder.compcache.launcher`).
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from typing import TypeVar

from patchkit.core.errors import ConfigError, Problem, RecipeError
from patchkit.core.redact import MASK, redact_text, redact_url

__all__ = ["OFF", "RemoteUrl", "parse_dist", "parse_remote", "redact", "redact_fields"]

P = TypeVar("P", bound=Problem)

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
_MASK = MASK


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

    @property
    def ccache_can_store(self) -> bool:
        """Whether ccache can use this remote (redis://, http://); sccache takes them all."""
        return self.scheme in _CCACHE_SCHEMES

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
    the userinfo and secret query values (core.redact); without a scheme, what stands
    before the last ``@`` (ccache's ``PASSWORD@host`` form)."""
    if "://" not in text and "@" in text:
        return f"{_MASK}@{text.rpartition('@')[2]}"
    return redact_url(text)


def redact(text: str, remote: RemoteUrl | None) -> str:
    """``text`` with every credential of ``remote`` (and its raw URL) masked, and any
    other URL's userinfo and secret query values."""
    if remote is None:
        return redact_text(text)
    if remote.raw and remote.has_credentials:
        text = text.replace(remote.raw, remote.redacted)
    for s in remote.secrets:
        text = text.replace(s, _MASK)
    return redact_text(text)


def redact_fields(problem: P, remote: RemoteUrl | None) -> P:
    """``problem`` with :func:`redact` applied to each of its text fields."""
    texts = {
        f.name: redact(v, remote)
        for f in dataclasses.fields(problem)  # type: ignore[arg-type]
        if isinstance(v := getattr(problem, f.name), str)
    }
    return dataclasses.replace(problem, **texts)  # type: ignore[type-var]
