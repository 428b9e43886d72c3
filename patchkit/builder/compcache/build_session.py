"""The compiler cache around configure + build: :func:`session` probes the remote (down:
one warning, local cache only), runs sccache's server for the build, and
:meth:`Session.finish` reads the stats; no credential leaves it.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from patchkit.builder.compcache.launcher import SCCACHE_REMOTE_VARS, CachePlan, remote_env
from patchkit.builder.compcache.probe import probe
from patchkit.builder.compcache.remote import RemoteUrl, redact
from patchkit.builder.compcache.stats import (
    STATS_CAP,
    Counts,
    ccache_counts,
    miss_seconds,
    ninja_entries,
    sccache_counts,
)
from patchkit.core import net
from patchkit.core.errors import FatalError, ToolMissing
from patchkit.core.fs import atomic_write_json, atomic_write_text
from patchkit.core.log import log
from patchkit.core.proc import Processes, run, tool_version
from patchkit.spec.buildinfo import CompileCacheRecord

__all__ = ["SCCACHE_START_TIMEOUT", "Session", "session"]

SCCACHE_START_TIMEOUT = 30.0

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
        self.env.update(remote_env(p.launcher, self.remote))
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
                for k in [k for k in self.env if k.startswith(SCCACHE_REMOTE_VARS)]:
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
            f.read_text("utf-8", "replace")[-STATS_CAP:] for f in sorted(self._tmp.glob("sccache-*.log"))
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
                    return ccache_counts(f.read(16 * STATS_CAP).decode("utf-8", "replace"))
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
            mean = miss_seconds(ninja_entries(build_dir, self._ninja_offset), counts.misses)
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
