"""The compiler cache around configure + build: a :class:`Session` (what :func:`session`
returns) probes the remote (down: one warning, local cache only), runs sccache's server for
the build, and :meth:`Session.finish` reads the stats. No credential leaves it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from patchkit.builder.compcache.launcher import SCCACHE_REMOTE_VARS, CachePlan, remote_env
from patchkit.builder.compcache.probe import probe
from patchkit.builder.compcache.remote import RemoteUrl, redact, redact_fields
from patchkit.builder.compcache.sccache import SccacheServer
from patchkit.builder.compcache.stats import (
    Counts,
    miss_seconds,
    ninja_entries,
    read_ccache_stats_log,
    record,
    remember_miss_seconds,
    sccache_counts,
    summary,
)
from patchkit.builder.problems import SccacheDidNotStart
from patchkit.core.errors import FatalError, ServerStartError, ToolMissing
from patchkit.core.fs import atomic_write_text
from patchkit.core.log import log
from patchkit.core.proc import tool_version
from patchkit.spec.buildinfo import CompileCacheRecord

__all__ = ["Session", "session"]


class Session:
    """The compiler cache while configure and build run, as a context manager.

    ``env`` is what they run with; ``remote`` the remote in use (None when there is none or
    it fell back), ``dist`` the sccache-dist scheduler in use, ``fallback`` the warning
    when one of them was given up. Entering probes the remote and starts sccache's server
    if it is the launcher; leaving stops it. Whatever happens, no credential leaves: an
    error passing out of the block (a failed build's log tail) has them masked, and so has
    ``log_path`` (the build log) afterwards.
    """

    def __init__(
        self, p: CachePlan, work_root: Path, env: Mapping[str, str], *, log_path: Path | None = None
    ) -> None:
        self.plan = p
        self.work_root = work_root
        self.remote = p.remote
        self.dist = p.dist
        self.fallback = ""
        self.env: dict[str, str] = dict(env)
        self._log_path = log_path
        self._secrets = [r for r in (p.remote, p.dist) if r is not None and r.has_credentials]
        self._stats_log = work_root / "ccache-stats.log"
        self._ninja_offset = 0
        self._server: SccacheServer | None = None
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Session:
        with contextlib.ExitStack() as failed:
            failed.push(self)  # a failed start is unwound (and redacted) like a failed block
            self._start()
            failed.pop_all()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if ev is None and self._server is not None:
                self._server.stop_stray_daemon(self.env)
        finally:
            try:
                self._stack.__exit__(et, ev, tb)
            finally:
                # not a catch: the error leaves the block as it came, its text redacted
                if isinstance(ev, FatalError):
                    self._redact_error(ev)
                if self._log_path is not None and self._secrets:
                    _redact_file(self._log_path, self._secrets)

    # -- starting ------------------------------------------------------------------------------

    def _start(self) -> None:
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
            self._start_sccache()

    def _fall_back(self, message: str) -> None:
        log.warning(message)
        self.fallback = message
        self.remote = None

    def _start_sccache(self) -> None:
        assert self.plan.program is not None
        server = SccacheServer(self.plan.program, self.work_root, secrets=self._secrets)
        self._server = self._stack.enter_context(server)
        self._use_dist(server)
        for attempt in (1, 2):
            try:
                self.env.update(server.start(self.env))
                return
            except ServerStartError as e:
                why = redact(str(e), self.remote)
                if attempt == 2 or self.remote is None:
                    raise ToolMissing(problem=SccacheDidNotStart(why=why)) from None
                for k in [k for k in self.env if k.startswith(SCCACHE_REMOTE_VARS)]:
                    del self.env[k]
                self._fall_back(
                    f"sccache did not start with the remote {self.remote.redacted} "
                    "(its storage check failed): building with the local cache only"
                )

    def _use_dist(self, server: SccacheServer) -> None:
        """The scheduler when it answers (its config for the server), else one warning."""
        d = self.dist
        if d is None:
            return
        why = probe(d)
        if why is not None:
            log.warning(f"the sccache-dist scheduler {d.redacted} {why}: compiling here")
            self.fallback = self.fallback or f"sccache-dist scheduler {d.redacted} {why}"
            self.dist = None
            return
        conf = server.write_dist_config(d, toolchains=self.work_root / "sccache-dist-toolchains")
        self.env["SCCACHE_CONF"] = str(conf)

    def _redact_error(self, e: FatalError) -> None:
        for r in self._secrets:
            e.message, e.detail, e.hint = (redact(e.message, r), redact(e.detail, r), redact(e.hint, r))
            if e.problem is not None:  # its text fields are shown too
                e.problem = redact_fields(e.problem, r)
        e.args = (e.message,)

    # -- the build -----------------------------------------------------------------------------

    def before_build(self, build_dir: Path) -> None:
        try:
            self._ninja_offset = (build_dir / ".ninja_log").stat().st_size
        except OSError:
            self._ninja_offset = 0

    def _counts(self) -> Counts | None:
        if self.plan.launcher == "ccache":
            return read_ccache_stats_log(self._stats_log)
        text = self._server.show_stats(self.env) if self._server is not None else None
        try:
            return sccache_counts(text) if text is not None else None
        except ValueError:
            return None

    def finish(self, build_dir: Path) -> CompileCacheRecord | None:
        """After a successful build: what the cache did, printed and returned for build-info."""
        p = self.plan
        if p.launcher is None:
            return None
        counts = self._counts()
        version = tool_version(p.program)
        remote = self.remote.redacted if self.remote else None
        if counts is None:
            log.warning(f"compile cache ({p.launcher}): no stats from the launcher")
            return CompileCacheRecord(
                launcher=p.launcher, version=version, remote=remote, fallback=self.fallback
            )
        mean = counts.miss_seconds
        if mean is None:
            mean = miss_seconds(ninja_entries(build_dir, self._ninja_offset), counts.misses)
        mean = remember_miss_seconds(self.work_root, mean)
        if self.remote is not None and counts.remote_errors:
            self.fallback = (
                f"the remote compile cache {self.remote.redacted} failed for "
                f"{counts.remote_errors} of {counts.compiles} compiles (down or too "
                "slow): those used the local cache"
            )
            log.warning(self.fallback)
        rec = record(
            counts,
            launcher=p.launcher,
            version=version,
            remote=remote,
            fallback=self.fallback,
            mean=mean,
            dist_scheduler=self.dist.redacted if self.dist else None,
        )
        log.info(summary(rec))
        return rec


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


def session(
    p: CachePlan, work_root: Path, env: Mapping[str, str], *, log_path: Path | None = None
) -> Session:
    """The compiler cache for one configure + build (``with session(...) as s:``): the remote
    probed, sccache's server running; ``log_path`` (the build log) redacted afterwards."""
    return Session(p, work_root, env, log_path=log_path)
