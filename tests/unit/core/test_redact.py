"""One redaction for every URL patchkit prints (core.redact): the userinfo
(`user:TOKEN@`, `TOKEN@`) and secret-bearing query parameters (`?password=`, `?token=`...)
are masked; the rest of the URL (scheme, host, port, path) stays readable."""

from __future__ import annotations

import pytest

from patchkit.builder.compcache.remote import parse_remote
from patchkit.core.errors import ConfigError
from patchkit.core.redact import redact_text, redact_url

SECRET = "S3cr3t-7f3a"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"https://user:{SECRET}@host/llama.cpp.git", "https://***@host/llama.cpp.git"),
        (f"https://{SECRET}@github.com/o/r", "https://***@github.com/o/r"),
        (f"https://x-access-token:{SECRET}@github.com/o/r.git", "https://***@github.com/o/r.git"),
        (f"https://u:p%40{SECRET}@h:8443/p", "https://***@h:8443/p"),
        (f"https://u:a@b{SECRET}@h/p", "https://***@h/p"),  # an unencoded @ in the password
        (f"redis://127.0.0.1:6379/0?password={SECRET}", "redis://127.0.0.1:6379/0?password=***"),
        (f"https://h/r.git?access_token={SECRET}&ref=main", "https://h/r.git?access_token=***&ref=main"),
        (
            f"https://h/r?X-Amz-Signature={SECRET};X-Amz-Credential={SECRET}",
            "https://h/r?X-Amz-Signature=***;X-Amz-Credential=***",
        ),
        (
            f"https://h/r?apiKey={SECRET}&auth={SECRET}&sig={SECRET}",
            "https://h/r?apiKey=***&auth=***&sig=***",
        ),
        (f"https://h/r?private_token={SECRET}#frag", "https://h/r?private_token=***#frag"),
        ("https://github.com/ggml-org/llama.cpp", "https://github.com/ggml-org/llama.cpp"),
        ("https://h/r?ref=main&depth=1", "https://h/r?ref=main&depth=1"),
        ("file:///srv/mirrors/llama.cpp", "file:///srv/mirrors/llama.cpp"),
        ("/srv/mirrors/a@b/llama.cpp", "/srv/mirrors/a@b/llama.cpp"),  # a path, not a URL
        ("git@github.com:ggml-org/llama.cpp.git", "git@github.com:ggml-org/llama.cpp.git"),  # ssh login name
        (f"deploy:{SECRET}@host:repo.git", "***@host:repo.git"),  # scp-like with a password
        ("gha", "gha"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert SECRET not in redact_url(url)


def test_redact_text_finds_every_url_in_a_message() -> None:
    text = (
        f"fatal: unable to access 'https://127.0.0.1:9/x.git?token={SECRET}/': Failed to connect\n"
        f'cloning https://user:{SECRET}@h/llama.cpp.git (and "redis://:{SECRET}@c:6379/0")'
    )
    out = redact_text(text)
    assert SECRET not in out
    assert "'https://127.0.0.1:9/x.git?token=***'" in out
    assert "cloning https://***@h/llama.cpp.git" in out and '"redis://***@c:6379/0"' in out
    assert redact_text("nothing secret: /a@b/c, git@h:r") == "nothing secret: /a@b/c, git@h:r"


def test_a_cache_remote_with_a_secret_query_never_shows_it() -> None:
    with pytest.raises(ConfigError) as e:
        parse_remote(f"redis://127.0.0.1:6379/0?password={SECRET}", where="--cache-remote")
    assert "query or fragment" in e.value.message
    assert SECRET not in e.value.message + e.value.hint + e.value.detail
    assert "redis://127.0.0.1:6379/0?password=***" in e.value.message


@pytest.mark.parametrize(
    ("url", "public"),
    [
        (f"https://user:{SECRET}@host/llama.cpp.git", "https://host/llama.cpp.git"),
        (f"https://h/r.git?access_token={SECRET}&ref=main", "https://h/r.git?ref=main"),
        (f"https://h/r.git?access_token={SECRET}", "https://h/r.git"),
        ("https://github.com/ggml-org/llama.cpp", "https://github.com/ggml-org/llama.cpp"),
        ("/srv/mirrors/llama.cpp", "/srv/mirrors/llama.cpp"),
        (f"deploy:{SECRET}@host:repo.git", "host:repo.git"),
    ],
)
def test_public_url_drops_the_secrets(url: str, public: str) -> None:
    """What a record that gets published (build-info's upstream url) should hold."""
    from patchkit.core.redact import public_url

    assert public_url(url) == public
