"""What the compiler cache did in one build: the launcher's own counters (ccache's stats
log, ``sccache --show-stats``) as :class:`Counts`, the time one missed compile takes (from
the launcher, or ninja's log, or the last build's) to say how much the hits saved, and the
build-info record and the line that say it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from pathlib import Path

from patchkit.core.fs import atomic_write_json, open_regular, read_regular
from patchkit.spec.buildinfo import CompileCacheRecord

__all__ = [
    "STATS_CAP",
    "Counts",
    "ccache_counts",
    "miss_seconds",
    "ninja_entries",
    "read_ccache_stats_log",
    "record",
    "remember_miss_seconds",
    "sccache_counts",
    "summary",
]

STATS_CAP = 1 << 20  # bytes of a stats file or stats output patchkit reads
_TIMES = "compile-times.json"  # in the work folder: the last measured time per compile


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
    data = json.loads(text[:STATS_CAP])
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


def ninja_entries(build_dir: Path, offset: int) -> list[float]:
    """Durations (s) of the object-file steps ninja logged after byte ``offset``."""
    path = build_dir / ".ninja_log"
    try:
        with open_regular(path) as f:  # the build wrote that folder: no link, no FIFO
            size = os.fstat(f.fileno()).st_size
            f.seek(offset if offset <= size else 0)
            text = f.read(16 * STATS_CAP).decode("utf-8", "replace")
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


def read_ccache_stats_log(path: Path) -> Counts:
    """:func:`ccache_counts` of the stats log at ``path`` (``CCACHE_STATSLOG``: this build's
    calls only); nothing compiled when it is not there (ccache makes it on its first call)."""
    try:
        data = read_regular(path, limit=16 * STATS_CAP, part="head")  # no link, no FIFO
    except OSError:
        return Counts()
    return ccache_counts(data.decode("utf-8", "replace"))


def remember_miss_seconds(work_root: Path, mean: float | None) -> float | None:
    """Keep this build's time per compile in the work folder; without one, the last."""
    path = work_root / _TIMES
    if mean is not None:
        with contextlib.suppress(OSError):
            atomic_write_json(path, {"miss_seconds": round(mean, 3)})
        return mean
    try:
        value = json.loads(path.read_text(encoding="utf-8")[:4096]).get("miss_seconds")
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def record(
    counts: Counts,
    *,
    launcher: str,
    version: str | None,
    remote: str | None,
    fallback: str,
    mean: float | None,
    dist_scheduler: str | None,
) -> CompileCacheRecord:
    """build-info's record of ``counts``: the time saved is the hits times ``mean`` (the
    seconds of one missed compile; None: unknown). ``remote`` and ``dist_scheduler`` are
    redacted URLs."""
    hits = counts.local_hits + counts.remote_hits
    saved = round(hits * mean, 1) if mean is not None else None
    return CompileCacheRecord(
        launcher=launcher,
        version=version,
        remote=remote,
        compiles=counts.compiles,
        local_hits=counts.local_hits,
        remote_hits=counts.remote_hits,
        misses=counts.misses,
        remote_errors=counts.remote_errors,
        miss_seconds=round(mean, 3) if mean is not None else None,
        seconds_saved=saved,
        fallback=fallback,
        distributed=counts.distributed,
        dist_scheduler=dist_scheduler,
    )


def summary(rec: CompileCacheRecord) -> str:
    """The one line a build prints about its compile cache."""
    where = f", remote {rec.remote}" if rec.remote else ""
    saved = rec.seconds_saved
    said = "unknown (no compile measured here yet)" if saved is None else f"~{saved:.0f}s"
    dist = f", {rec.distributed} compiled on build servers" if rec.dist_scheduler else ""
    return (
        f"compile cache ({rec.launcher} {rec.version or '?'}{where}): {rec.compiles} "
        f"compiles: {rec.local_hits} local hits, {rec.remote_hits} remote hits, "
        f"{rec.misses} misses{dist}; time saved {said}"
    )
