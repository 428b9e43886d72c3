"""Windows only: put a child in a job object, so stopping it stops everything it started.

``attach`` creates one job per child with JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE (if patchkit
dies, Windows ends the tree too); ``terminate`` ends every process in the job. Uses the
Win32 API through ctypes; on any failure the caller falls back to killing the child alone.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

__all__ = ["attach", "terminate"]

_JOBS: dict[int, int] = {}  # pid -> job handle
_KILL_ON_JOB_CLOSE = 0x2000
_EXTENDED_LIMIT_INFORMATION = 9


class _BasicLimits(ctypes.Structure):
    _fields_ = [
        ("PerProcessUserTimeLimit", ctypes.c_int64),
        ("PerJobUserTimeLimit", ctypes.c_int64),
        ("LimitFlags", ctypes.c_uint32),
        ("MinimumWorkingSetSize", ctypes.c_size_t),
        ("MaximumWorkingSetSize", ctypes.c_size_t),
        ("ActiveProcessLimit", ctypes.c_uint32),
        ("Affinity", ctypes.c_size_t),
        ("PriorityClass", ctypes.c_uint32),
        ("SchedulingClass", ctypes.c_uint32),
    ]


class _IoCounters(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_uint64)
        for n in (
            "ReadOperationCount",
            "WriteOperationCount",
            "OtherOperationCount",
            "ReadTransferCount",
            "WriteTransferCount",
            "OtherTransferCount",
        )
    ]


class _ExtendedLimits(ctypes.Structure):
    _fields_ = [
        ("BasicLimitInformation", _BasicLimits),
        ("IoInfo", _IoCounters),
        ("ProcessMemoryLimit", ctypes.c_size_t),
        ("JobMemoryLimit", ctypes.c_size_t),
        ("PeakProcessMemoryUsed", ctypes.c_size_t),
        ("PeakJobMemoryUsed", ctypes.c_size_t),
    ]


def _kernel32() -> Any:
    return ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]


def attach(proc: Any) -> None:
    """Assign ``proc`` (a subprocess.Popen) to a new kill-on-close job object."""
    if sys.platform != "win32":
        return
    try:
        k32 = _kernel32()
        job = k32.CreateJobObjectW(None, None)
        if not job:
            return
        info = _ExtendedLimits()
        info.BasicLimitInformation.LimitFlags = _KILL_ON_JOB_CLOSE
        k32.SetInformationJobObject(job, _EXTENDED_LIMIT_INFORMATION, ctypes.byref(info), ctypes.sizeof(info))
        if k32.AssignProcessToJobObject(job, int(proc._handle)):
            _JOBS[proc.pid] = job
        else:
            k32.CloseHandle(job)
    except (OSError, AttributeError):
        return


def terminate(proc: Any) -> bool:
    """End every process in ``proc``'s job; False when it has none (caller kills it alone)."""
    job = _JOBS.pop(proc.pid, None)
    if job is None:
        return False
    k32 = _kernel32()
    ok = bool(k32.TerminateJobObject(job, 1))
    k32.CloseHandle(job)
    return ok
