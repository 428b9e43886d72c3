"""The smoke stage of a build, and its verdict kept for the next build.

A smoke verdict depends on known things only: the bytes the build wrote (each artifact's
sha256, and the rest of build-info.json that the checks read: patches, platform, runtime
environment...), the smoke tools and the libraries beside them in the build dir, the real
model (its sha256, or that there is none), the checks themselves (their code, settings,
limits and data: smoke.runner.suite_id), the checks skipped, the reference build when
there is one, patchkit's version and the kind of machine. After a smoke run that passed,
those inputs and the report are kept in the recipe's work folder (``smoke.json``, see
core.paths.WorkDirs); the next build with the very same inputs reuses the report instead
of running the checks (``smoke: unchanged since …``). Anything else runs them: a changed
input, ``--resmoke``, no record, a record that is not passed (a failed smoke is never
reused), one patchkit cannot read.

File hashes are remembered in the record with the file's identity (device, inode, size,
mtime and ctime in ns): a file whose identity is unchanged has not been written since, so
the 100 MB model is not read again by every build. The artifacts are hashed by the output
stage each build anyway.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import platform
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patchkit import __version__
from patchkit.builder.state import digest
from patchkit.core.errors import ConfigError
from patchkit.core.fs import atomic_write_json, sha256_file
from patchkit.core.log import log
from patchkit.core.record import Record
from patchkit.spec.buildinfo import BuildInfo, CheckResult, SmokeReport, SmokeStatus, write_build_info

if TYPE_CHECKING:
    from patchkit.smoke.realmodel import RealModel

__all__ = [
    "RECORD_FORMAT",
    "SmokeInputs",
    "SmokeRecord",
    "read_record",
    "run_or_reuse",
    "smoke_inputs",
    "write_record",
]

RECORD_FORMAT = 1
# build-info keys a smoke verdict does not depend on (they change with every build)
_VOLATILE = ("timings", "compile_cache", "smoke")
_LIB_SUFFIXES = (".so", ".dll", ".dylib")

Hashes = Mapping[str, Mapping[str, Any]]  # path -> {"id": [...], "sha256": hex}


@dataclasses.dataclass(frozen=True, kw_only=True)
class SmokeInputs(Record):
    """Everything a smoke verdict depends on."""

    artifacts: tuple[tuple[str, str], ...]  # (bin/ path, sha256), as build-info lists them
    build: str  # digest of build-info.json without its volatile keys
    tools: tuple[tuple[str, str], ...]  # (file in the build dir's tool folder, sha256)
    model: str | None  # the real model's sha256; None: there is none (kld, speed skip)
    checks: str  # smoke.runner.suite_id(): the checks' code, settings, limits and data
    skip: tuple[str, ...]  # the recipe's [smoke] skip
    reference: str | None  # the reference build's identity; None: no reference
    patchkit: str
    host: str  # OS and machine kind

    @property
    def key(self) -> str:
        return digest(self.to_json())


@dataclasses.dataclass(frozen=True, kw_only=True)
class SmokeRecord:
    """A kept verdict: its inputs' key, when it ran, the report (as JSON), the hashes."""

    key: str
    when: str
    report: Mapping[str, Any]
    hashes: Hashes

    @property
    def passed(self) -> bool:
        return self.report.get("status") == SmokeStatus.PASSED.value


def _file_id(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _hash(path: Path, known: Hashes, seen: dict[str, dict[str, Any]]) -> str:
    """``path``'s sha256, from ``known`` when the file's identity is the one recorded."""
    key = str(path)
    ident = _file_id(path)
    was = known.get(key)
    if (
        ident is not None
        and was is not None
        and was.get("id") == ident
        and isinstance(was.get("sha256"), str)
    ):
        sha = str(was["sha256"])
    else:
        sha = sha256_file(path)
        ident = _file_id(path)  # as it is now that it was read
    if ident is not None:
        seen[key] = {"id": ident, "sha256": sha}
    return sha


def smoke_inputs(
    info: BuildInfo,
    *,
    tool_dirs: tuple[Path, ...],
    tools: tuple[str, ...],
    model: Path | None,
    checks: str,
    skip: tuple[str, ...],
    reference: BuildInfo | None = None,
    known: Hashes | None = None,
) -> tuple[SmokeInputs, dict[str, dict[str, Any]]]:
    """The inputs of a smoke run of the build ``info`` describes (as written in its output),
    and the file hashes taken (to keep with the record).

    ``tools``: the smoke tools' names; in ``tool_dirs`` those files and every shared library
    beside them count. ``model``: the real model's file (None: none). ``checks``: the suite's
    id (smoke.runner.suite_id). ``known``: the hashes of a previous record."""
    known = known or {}
    seen: dict[str, dict[str, Any]] = {}
    exe = ".exe" if info.windows else ""
    names = {f"{t}{exe}" for t in tools}
    found: list[tuple[str, str]] = []
    for d in tool_dirs:
        try:
            files = sorted(p for p in d.iterdir() if p.is_file())
        except OSError:
            continue
        for f in files:
            if f.name in names or f.name.endswith(_LIB_SUFFIXES) or ".so." in f.name:
                found.append((f"{d.name}/{f.name}", _hash(f, known, seen)))
    data = {k: v for k, v in info.to_json().items() if k not in _VOLATILE}
    inputs = SmokeInputs(
        artifacts=tuple((a.path, a.sha256) for a in info.artifacts),
        build=digest(data),
        tools=tuple(found),
        model=_hash(model, known, seen) if model is not None else None,
        checks=checks,
        skip=tuple(skip),
        reference=_reference_id(reference),
        patchkit=__version__,
        host=f"{sys.platform} {platform.machine()}",
    )
    return inputs, seen


def _reference_id(info: BuildInfo | None) -> str | None:
    if info is None:
        return None
    return digest({"identity": info.identity, "artifacts": [[a.path, a.sha256] for a in info.artifacts]})


def read_record(path: Path) -> SmokeRecord | None:
    """The kept verdict; None when there is none or it is not what patchkit writes."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
        return None
    key, when, report, hashes = (data.get(k) for k in ("key", "when", "report", "hashes"))
    if not (isinstance(key, str) and isinstance(when, str) and isinstance(report, dict)):
        return None
    hashes = {k: v for k, v in hashes.items() if isinstance(v, dict)} if isinstance(hashes, dict) else {}
    return SmokeRecord(key=key, when=when, report=report, hashes=hashes)


def write_record(
    path: Path, inputs: SmokeInputs, report: SmokeReport, hashes: Hashes, *, when: dt.datetime | None = None
) -> None:
    """Keep a passed verdict (anything else is never kept)."""
    if report.status is not SmokeStatus.PASSED:
        raise ValueError(f"only a passed smoke verdict is kept, not {report.status.value}")
    stamp = (when or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
    atomic_write_json(
        path,
        {
            "format": RECORD_FORMAT,
            "key": inputs.key,
            "when": stamp.strftime("%Y-%m-%d %H:%M:%S UTC"),
            "inputs": inputs.to_json(),  # for a person asking why it ran again
            "report": report.to_json(),
            "hashes": dict(hashes),
        },
    )


def _reused_report(record: SmokeRecord, info: BuildInfo) -> SmokeReport | None:
    """The kept report, read as build-info reads it (None if it does not read)."""
    try:
        return BuildInfo.from_json({**info.to_json(), "smoke": dict(record.report)}).smoke
    except ConfigError:
        return None


def run_or_reuse(
    out_dir: Path,
    info: BuildInfo,
    *,
    record_path: Path,
    tool_dirs: tuple[Path, ...],
    tools: tuple[str, ...],
    skip: tuple[str, ...],
    runtime_env: Mapping[str, str],
    on_check: Callable[[CheckResult], None] | None,
    rerun: bool,
    env: Mapping[str, str],
) -> SmokeReport:
    """The smoke report of the build in ``out_dir`` (``info``: its build-info as written):
    the kept one when every input is unchanged (and not ``rerun``), else a fresh run, kept
    when it passed. Either way it is recorded in the output's build-info.json.

    ``env``: the environment the checks run with and whose PATCHKIT_MODEL names the real
    model (the build's, BuildOptions.env)."""
    from patchkit.smoke.realmodel import find_model
    from patchkit.smoke.runner import run_smoke, suite_id

    real: RealModel | None = find_model(env=env)
    previous = read_record(record_path)
    inputs, hashes = smoke_inputs(
        info,
        tool_dirs=tool_dirs,
        tools=tools,
        model=real.path if real is not None else None,
        checks=suite_id(),
        skip=skip,
        known=previous.hashes if previous is not None else None,
    )
    if previous is not None and not rerun and previous.passed and previous.key == inputs.key:
        report = _reused_report(previous, info)
        if report is not None:
            write_build_info(out_dir, dataclasses.replace(info, smoke=report))
            log.info(f"smoke: unchanged since {previous.when}, {len(report.checks)} checks")
            return report
    record_path.unlink(missing_ok=True)  # whatever it said, it is not this run's verdict
    report = run_smoke(
        out_dir,
        skip=skip,
        tool_dirs=tool_dirs,
        on_result=on_check,
        extra_env=dict(runtime_env),
        model=real,
        env=env,
    )
    if report.status is SmokeStatus.PASSED:
        try:
            write_record(record_path, inputs, report, hashes)
        except OSError as e:
            log.warning(f"cannot keep the smoke verdict in {record_path}: {e.strerror or e}")
    return report
