"""builder.compcache.stats: ccache's stats log, sccache's JSON stats, ninja's log and the
time one missed compile takes (remembered per work folder), the record and its line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkit.builder.compcache.stats import (
    Counts,
    ccache_counts,
    miss_seconds,
    ninja_entries,
    read_ccache_stats_log,
    record,
    remember_miss_seconds,
    sccache_counts,
    summary,
)

# ccache 4.7.5's stats log: a local miss that wrote to the remote, a remote hit, a local hit,
# a call whose remote failed
STATS_LOG = """\
# /c/work/x/src/a.c
cache_miss
direct_cache_miss
local_storage_miss
preprocessed_cache_miss
remote_storage_miss
remote_storage_read_miss
remote_storage_write
# /c/work/x/src/b.c
direct_cache_hit
local_storage_miss
remote_storage_hit
remote_storage_read_hit
# /c/work/x/src/c.c
direct_cache_hit
local_storage_hit
local_storage_read_hit
# /c/work/x/src/d.c
cache_miss
direct_cache_miss
remote_storage_error
# CMakeFiles/link
called_for_link
"""


def test_ccache_counts() -> None:
    c = ccache_counts(STATS_LOG)
    assert (c.compiles, c.local_hits, c.remote_hits, c.misses, c.remote_errors) == (4, 1, 1, 2, 1)
    assert ccache_counts("") == Counts()


# the real `sccache --show-stats --stats-format json` (0.16.0, disk + redis), trimmed
SCCACHE_JSON = {
    "stats": {
        "compile_requests": 6,
        "cache_errors": {"counts": {}},
        "cache_hits": {"counts": {"C/C++": 4}},
        "cache_misses": {"counts": {"C/C++": 1}},
        "cache_timeouts": 0,
        "cache_read_errors": 0,
        "compilations": 1,
        "compiler_write_duration": {"secs": 2, "nanos": 500_000_000},
        "multi_level": [
            {"name": "L0 (disk)", "hits": 1},
            {"name": "L1 (redis)", "location": "redis, name: redis://h:1", "hits": 3},
        ],
    },
    "version": "0.16.0",
}


def test_sccache_counts() -> None:
    c = sccache_counts(json.dumps(SCCACHE_JSON))
    assert (c.compiles, c.local_hits, c.remote_hits, c.misses, c.remote_errors) == (5, 1, 3, 1, 0)
    assert c.miss_seconds == 2.5
    with pytest.raises(ValueError):
        sccache_counts("[]")
    with pytest.raises(ValueError):
        sccache_counts("not json")


def test_ninja_log_and_miss_seconds(tmp_path: Path) -> None:
    log = tmp_path / ".ninja_log"
    log.write_text(
        "# ninja log v6\n0\t5000\t0\tCMakeFiles/a.dir/a.c.o\t1\n"
        "0\t40\t0\tCMakeFiles/a.dir/b.c.o\t1\n10\t3000\t0\tbin/liba.so\t1\n"
    )
    offset = log.stat().st_size
    with log.open("a") as f:
        f.write("0\t3000\t0\tCMakeFiles/a.dir/c.c.o\t1\n5\t25\t0\tCMakeFiles/a.dir/d.c.obj\t1\nbroken\n")
    assert ninja_entries(tmp_path, 0) == [5.0, 0.04, 3.0, 0.02]
    assert ninja_entries(tmp_path, offset) == [3.0, 0.02]  # this build's lines only
    assert ninja_entries(tmp_path, 10**9) == [5.0, 0.04, 3.0, 0.02]  # log was rewritten
    assert miss_seconds([5.0, 0.04, 3.0, 0.02], 2) == 4.0
    assert miss_seconds([0.02], 0) is None and miss_seconds([], 3) is None


def test_ccache_stats_log_file(tmp_path: Path) -> None:
    log = tmp_path / "ccache-stats.log"
    assert read_ccache_stats_log(log) == Counts()  # no call yet: nothing compiled
    log.write_text(STATS_LOG)
    assert read_ccache_stats_log(log) == ccache_counts(STATS_LOG)


def test_the_time_per_compile_is_remembered_per_work_folder(tmp_path: Path) -> None:
    assert remember_miss_seconds(tmp_path, None) is None  # never measured
    assert remember_miss_seconds(tmp_path, 2.34567) == 2.34567
    assert json.loads((tmp_path / "compile-times.json").read_text()) == {"miss_seconds": 2.346}
    assert remember_miss_seconds(tmp_path, None) == 2.346
    for junk in ("[1]", '{"miss_seconds": -1}', '{"miss_seconds": "3"}', "not json"):
        (tmp_path / "compile-times.json").write_text(junk)
        assert remember_miss_seconds(tmp_path, None) is None, junk


def test_record_and_its_line() -> None:
    counts = Counts(compiles=10, local_hits=3, remote_hits=5, misses=2, remote_errors=1, distributed=2)
    rec = record(
        counts,
        launcher="sccache",
        version="0.16.0",
        remote="redis://***@h:1",
        fallback="",
        mean=1.23456,
        dist_scheduler="http://***@s:1",
    )
    assert (rec.compiles, rec.local_hits, rec.remote_hits, rec.misses, rec.remote_errors) == (10, 3, 5, 2, 1)
    assert rec.miss_seconds == 1.235 and rec.seconds_saved == 9.9 and rec.distributed == 2
    assert summary(rec) == (
        "compile cache (sccache 0.16.0, remote redis://***@h:1): 10 compiles: 3 local hits, "
        "5 remote hits, 2 misses, 2 compiled on build servers; time saved ~10s"
    )
    rec = record(
        Counts(), launcher="ccache", version=None, remote=None, fallback="", mean=None, dist_scheduler=None
    )
    assert rec.seconds_saved is None and rec.miss_seconds is None
    assert summary(rec) == (
        "compile cache (ccache ?): 0 compiles: 0 local hits, 0 remote hits, 0 misses; "
        "time saved unknown (no compile measured here yet)"
    )
