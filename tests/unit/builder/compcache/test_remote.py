"""builder.compcache.remote: remote URLs, checked (one line, never the password) and
redacted in every form; an sccache-dist scheduler's URL."""

from __future__ import annotations

import pytest

from patchkit.builder.compcache.remote import parse_dist, parse_remote, redact
from patchkit.core.errors import ConfigError

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
    r = parse_remote(url, where="--cache-remote")
    assert r.redacted == redacted == str(r)
    assert r.ccache_url() == ccache_url + "|connect-timeout=500|operation-timeout=5000"
    assert PW not in repr(r) and PW not in r.endpoint


def test_percent_encoded_password_is_decoded_and_redacted() -> None:
    r = parse_remote("redis://:p%40ss%3Aword@h:1", where="x")
    assert r.password == "p@ss:word" and r.ccache_url().startswith("redis://p%40ss%3Aword@h:1|")
    assert redact("url redis://:p%40ss%3Aword@h:1 and p@ss:word", r) == "url redis://***@h:1 and ***"


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
    r = parse_remote(url, where="--cache-remote")
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
        parse_remote(url, where="--cache-remote")
    assert e.value.exit_code == 2
    assert needle in e.value.message and "\n" not in e.value.message
    assert PW not in e.value.message + e.value.hint


def test_redact_masks_every_form() -> None:
    r = parse_remote(f"redis://ci:{PW}@h:1", where="x")
    text = f"failed: redis://ci:{PW}@h:1 (user ci, AUTH {PW})"
    assert PW not in redact(text, r)
    assert "redis://***@h:1" in redact(text, r)
    assert redact("nothing here", None) == "nothing here"


def test_dist_urls() -> None:
    d = parse_dist("http://tok3n@127.0.0.1:10600", where="--dist")
    assert d.password == "tok3n" and d.endpoint == "http://127.0.0.1:10600"
    assert d.redacted == "http://***@127.0.0.1:10600"
    for bad, needle in (
        ("redis://t@h", "scheduler is http"),
        ("http://h:1", "no client token"),
        ("http://t@h:1/x", "HOST:PORT"),
    ):
        with pytest.raises(ConfigError, match=needle):
            parse_dist(bad, where="--dist")
