"""The compiler cache of a build: ccache or sccache as the C/C++/CUDA compiler launcher,
a shared remote storage behind it, keys that do not depend on where the cache lives, what
happened (hits, misses, time saved) after the build, and the fallback to the local cache
when the remote is down or slow. One concern per module:

- ``settings``: what the user asked for, flags > environment > recipe (:func:`resolve`);
- ``remote``: a remote's URL, checked, its credentials apart, and their redaction;
- ``launcher``: the launcher plan: which program, its defines and environment (:func:`plan`);
- ``probe``: is the remote there (a TCP connect; enough Redis to check the credentials);
- ``stats``: the launcher's counters and the time a miss takes;
- ``build_session``: the cache around configure + build (:func:`session`).

A URL's credentials go only into the launcher's environment: every message, record and log
line gets ``RemoteUrl.redacted`` / ``remote.redact``. This face re-exports what the rest of
patchkit uses.
"""

from __future__ import annotations

from patchkit.builder.compcache.build_session import Session, session
from patchkit.builder.compcache.launcher import CachePlan, find_sccache, plan
from patchkit.builder.compcache.settings import (
    ENV_DIST,
    ENV_LAUNCHER,
    ENV_REMOTE,
    LAUNCHERS,
    CacheSettings,
    resolve,
)

__all__ = [
    "ENV_DIST",
    "ENV_LAUNCHER",
    "ENV_REMOTE",
    "LAUNCHERS",
    "CachePlan",
    "CacheSettings",
    "Session",
    "find_sccache",
    "plan",
    "resolve",
    "session",
]
