"""sccache's server for one build: a fresh server per build (so its counters are this
build's), on a free loopback port, in a private folder that holds its log and the dist
client config; stopped when the block ends, its log then kept, redacted, next to build.log.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from patchkit.builder.compcache.remote import RemoteUrl, redact
from patchkit.core import net
from patchkit.core.fs import atomic_write_text
from patchkit.core.proc import Processes, run

__all__ = ["START_TIMEOUT", "SccacheServer"]

START_TIMEOUT = 30.0
_LOG_CAP = 1 << 20  # characters kept of each server log
_LOG_NAME = "sccache.log"  # in the work folder, next to build.log


class SccacheServer:
    """sccache's server for one build, as a context manager: entering makes its private
    folder, :meth:`start` starts it, leaving stops it and writes ``work_root/sccache.log``
    with every string of ``secrets`` masked."""

    def __init__(self, program: Path, work_root: Path, *, secrets: Sequence[RemoteUrl] = ()) -> None:
        self.program = program
        self.work_root = work_root
        self._secrets = tuple(secrets)
        self._stack = contextlib.ExitStack()
        self._folder: Path | None = None
        self._procs: Processes | None = None

    def __enter__(self) -> SccacheServer:
        folder = Path(tempfile.mkdtemp(prefix="patchkit-sccache-"))
        self._stack.callback(shutil.rmtree, folder, True)
        self._stack.callback(self._save_log, folder)  # after the server stopped (LIFO)
        self._procs = self._stack.enter_context(Processes(folder))
        self._folder = folder
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._procs = self._folder = None
        self._stack.__exit__(et, ev, tb)

    def _opened(self) -> tuple[Path, Processes]:
        if self._folder is None or self._procs is None:
            raise RuntimeError("SccacheServer used outside its `with` block")
        return self._folder, self._procs

    def write_dist_config(self, dist: RemoteUrl, toolchains: Path) -> Path:
        """sccache reads its dist client settings from a config file only: a private one
        (mode 0600, it holds the client token) in this server's folder; its path, for
        SCCACHE_CONF."""
        folder, _ = self._opened()
        conf = folder / "sccache-client.conf"
        atomic_write_text(
            conf,
            f"[dist]\nscheduler_url = {json.dumps(dist.endpoint)}\n"
            f"toolchains = []\ncache_dir = {json.dumps(str(toolchains))}\n"
            f'[dist.auth]\ntype = "token"\ntoken = {json.dumps(dist.password)}\n',
            mode=0o600,
        )
        return conf

    def start(self, env: Mapping[str, str]) -> dict[str, str]:
        """Start the server with ``env`` on a free port and wait until it listens; the
        variables its clients need (its port, an idle timeout in case patchkit is killed).
        ServerStartError when it does not start or listen in time."""
        _, procs = self._opened()
        port = net.free_port()
        client = {
            "SCCACHE_SERVER_PORT": str(port),
            "SCCACHE_IDLE_TIMEOUT": env.get("SCCACHE_IDLE_TIMEOUT", "1800"),
        }
        server_env = {
            **env,
            **client,
            "SCCACHE_START_SERVER": "1",
            "SCCACHE_NO_DAEMON": "1",
            "SCCACHE_LOG": env.get("SCCACHE_LOG", "info"),
        }
        procs.start_server([self.program], port, name="sccache", timeout=START_TIMEOUT, env=server_env)
        return client

    def show_stats(self, env: Mapping[str, str]) -> str | None:
        """``sccache --show-stats --stats-format json`` from the server ``env`` names; None
        when that fails."""
        r = run([self.program, "--show-stats", "--stats-format", "json"], env=env, timeout=30)
        return r.stdout if r.ok else None

    def stop_stray_daemon(self, env: Mapping[str, str]) -> None:
        """A client that lost the server may have started a daemon on its port: stop it."""
        with contextlib.suppress(OSError):
            run([self.program, "--stop-server"], env=env, timeout=30)

    def _save_log(self, folder: Path) -> None:
        """The server's log, redacted, next to build.log."""
        text = "".join(
            f.read_text("utf-8", "replace")[-_LOG_CAP:] for f in sorted(folder.glob("sccache-*.log"))
        )
        with contextlib.suppress(OSError):
            for r in self._secrets:
                text = redact(text, r)
            atomic_write_text(self.work_root / _LOG_NAME, text)
