"""Credentials out of what patchkit prints: the one redaction of URLs a user gives.

A URL may carry a secret in two places: its userinfo (``https://user:TOKEN@host/…``,
``https://TOKEN@github.com/…``, ccache's ``redis://PASSWORD@host``) and its query
(``redis://host/0?password=…``, ``…?access_token=…``, a signed URL's ``X-Amz-Signature``).
:func:`redact_url` masks both and keeps the rest readable (scheme, host, port, path), so an
error still says which server failed; :func:`redact_text` does it to every URL inside a
message (git's own error lines quote the URL it was given). Every progress line, error and
log line that shows a user's URL goes through one of them (``git.cache``, ``git.runner``,
``builder.compcache.remote``). A URL that is recorded rather than shown (build-info's
upstream url, which releases publish) should be :func:`public_url`: without the secrets at
all, so what reads it back can still use it where no credentials are needed.
"""

from __future__ import annotations

import re

__all__ = ["MASK", "public_url", "redact_text", "redact_url"]

MASK = "***"

# a query parameter whose name holds one of these is taken for a secret
_SECRET_WORDS = ("pass", "pwd", "token", "secret", "key", "auth", "cred", "sig", "session", "cookie")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*\Z")
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
# scp-like `user:password@host:path` (a bare `user@host:path` is an ssh login name, shown)
_SCP = re.compile(r"^(?P<user>[^/\\\s@]+:[^/\\\s]*)@(?P<rest>[^/\\\s@]+:.*)\Z", re.S)
_SCP_IN_TEXT = re.compile(r"(?<![^\s'\"(<=])[^/\\\s'\"@:]+:[^/\\\s'\"]*@(?=[^/\\\s'\"@:]+:)")
_PORT = re.compile(r"[0-9]*\Z")


def _secret_name(name: str) -> bool:
    low = name.lower()
    return any(w in low for w in _SECRET_WORDS)


def _redact_query(query: str) -> str:
    parts = re.split(r"([&;])", query)
    out = []
    for part in parts:
        name, eq, value = part.partition("=")
        out.append(f"{name}={MASK}" if eq and value and _secret_name(name) else part)
    return "".join(out)


def _userinfo_end(rest: str) -> int:
    """The index of the ``@`` that ends the userinfo in ``rest`` (what follows ``://``), or
    -1. The authority ends at the first ``/``, ``?`` or ``#``; a password holding a raw
    ``/`` (``user:pa/ss@host``, malformed but typed) is caught too."""
    stop = min((i for i in (rest.find(c) for c in "?#") if i >= 0), default=len(rest))
    authority_end = min((i for i in (rest.find("/", 0, stop),) if i >= 0), default=stop)
    at = rest.rfind("@", 0, authority_end)
    if at >= 0:
        return at
    authority = rest[:authority_end]
    if ":" in authority and not _PORT.match(authority.rpartition(":")[2]):
        return rest.rfind("@", 0, stop)  # `user:pa/ss@host`: the password's tail is in the path
    return -1


def redact_url(url: str) -> str:
    """``url`` with its userinfo and secret-bearing query values masked (``***``).

    Text that is not a URL (a local path, ``gha``) comes back as it is; so does an ssh
    login name in ``git@host:path``."""
    head, sep, rest = url.partition("://")
    if not sep or not _SCHEME.match(head):
        m = _SCP.match(url)
        return f"{MASK}@{m.group('rest')}" if m else url
    at = _userinfo_end(rest)
    if at >= 0:
        rest = f"{MASK}@{rest[at + 1 :]}"
    before, qmark, query = rest.partition("?")
    if qmark:
        query, hash_, fragment = query.partition("#")
        rest = f"{before}?{_redact_query(query)}{hash_}{fragment}"
    return f"{head}://{rest}"


def redact_text(text: str) -> str:
    """``text`` (an error message, git's stderr, a log line) with every URL in it redacted."""
    text = _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
    return _SCP_IN_TEXT.sub(f"{MASK}@", text)


def public_url(url: str) -> str:
    """``url`` without its userinfo and without its secret-bearing query parameters (not
    masked: gone), for records that are published; anything else as :func:`redact_url`."""
    shown = redact_url(url)
    if shown == url:
        return url
    head, sep, rest = shown.partition("://")
    if not sep:
        return shown.replace(f"{MASK}@", "", 1)
    rest = rest.removeprefix(f"{MASK}@")
    before, qmark, query = rest.partition("?")
    if qmark:
        query, hash_, fragment = query.partition("#")
        kept = [p for p in re.split(r"[&;]", query) if p and not p.endswith(f"={MASK}")]
        rest = before + (f"?{'&'.join(kept)}" if kept else "") + hash_ + fragment
    return f"{head}://{rest}"
