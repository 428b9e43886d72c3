"""On the real command: credentials in a URL the user gives are never
printed. `--upstream https://user:TOKEN@HOST/llama.cpp.git` printed `cloning
https://user:TOKEN@...` and repeated it in the error; a token in the query (which git itself
does not hide) reached the error through git's own message; `--cache-remote
'redis://...?password=SECRET'` printed SECRET in its error line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TOKEN = "TOKEN-9c1e55aa"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again: a connection is refused at once


def _patchkit(project: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "PYTHONDONTWRITEBYTECODE": "1",
        "COLUMNS": "300",
        "PATCHKIT_CACHE": str(cache),
        "GIT_TERMINAL_PROMPT": "0",
    }
    return subprocess.run(
        [sys.executable, "-m", "patchkit", "--project", str(project), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _nothing_holds(cache: Path, secret: str) -> None:
    for p in cache.rglob("*") if cache.exists() else ():
        assert secret not in str(p)
        if p.is_file() and not p.is_symlink():
            assert secret.encode() not in p.read_bytes(), p


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:{t}@127.0.0.1:{port}/llama.cpp.git", "https://***@127.0.0.1:{port}/llama.cpp.git"),
        ("https://{t}@127.0.0.1:{port}/llama.cpp.git", "https://***@127.0.0.1:{port}/llama.cpp.git"),
        ("https://127.0.0.1:{port}/llama.cpp.git?access_token={t}", "?access_token=***"),
    ],
)
@pytest.mark.parametrize("command", ["build", "check"])
def test_an_upstream_url_with_credentials_is_never_printed(
    project: Path, tmp_path: Path, url: str, shown: str, command: str
) -> None:
    port = _closed_port()
    upstream = url.format(t=TOKEN, port=port)
    cache = tmp_path / "cache"
    args = (
        ["build", "fixture", "--out", str(tmp_path / "out")] if command == "build" else ["check", "fixture"]
    )
    r = _patchkit(project, cache, *args, "--upstream", upstream)
    assert r.returncode == 4, r.stderr
    assert TOKEN not in r.stdout + r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and shown.format(port=port) in r.stderr, r.stderr
    _nothing_holds(cache, TOKEN)


def test_a_cache_remote_with_a_password_query_is_never_printed(project: Path, tmp_path: Path) -> None:
    r = _patchkit(
        project,
        tmp_path / "cache",
        "build",
        "fixture",
        "--out",
        str(tmp_path / "out"),
        "--cache-remote",
        f"redis://127.0.0.1:6379/0?password={TOKEN}",
    )
    assert r.returncode == 2, r.stderr
    assert TOKEN not in r.stdout + r.stderr, r.stderr
    assert (
        "error: --cache-remote 'redis://127.0.0.1:6379/0?password=***': has a query or fragment" in r.stderr
    )


def test_a_successful_clone_with_credentials_publishes_none(project: Path, upstream, tmp_path: Path) -> None:
    """A clone that works (git's dumb HTTP protocol from a local server, which ignores the
    credentials) must not carry the token into build-info.json, from where a release's
    manifest and provenance would publish it."""
    import functools
    import http.server
    import threading

    served = tmp_path / "served" / "up.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(upstream.path), str(served)], check=True)
    subprocess.run(["git", "-C", str(served), "update-server-info"], check=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        url = f"http://user:{TOKEN}@127.0.0.1:{port}/up.git"
        out = tmp_path / "out"
        r = _patchkit(
            project,
            tmp_path / "cache",
            "build",
            "fixture",
            "--out",
            str(out),
            "--no-smoke",
            "--upstream",
            url,
        )
    finally:
        server.shutdown()
    assert r.returncode == 0, r.stderr
    assert TOKEN not in r.stdout + r.stderr
    info = (out / "build-info.json").read_text()
    assert TOKEN not in info and f"http://127.0.0.1:{port}/up.git" in info
