"""The smoke stage: run the checks (smoke.checks) on a build output, on this machine,
and record the report in its build-info.json.

A Windows build runs under wine on Linux, a build asked to run as another CPU model
under qemu (``--cpu``); a CUDA build that links the NVIDIA driver is
skipped (with why) on a machine without one. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from patchkit.core.errors import SmokeError
from patchkit.core.proc import run
from patchkit.smoke.emulate import Emulation
from patchkit.smoke.env import SmokeEnv
from patchkit.smoke.realmodel import NO_MODEL, RealModel, find_model
from patchkit.spec.buildinfo import (
    BuildInfo,
    CheckResult,
    CheckStatus,
    SmokeReport,
    SmokeStatus,
    read_build_info,
    write_build_info,
)

__all__ = ["SUITE_PACKAGES", "raise_if_failed", "run_smoke", "suite_id"]

# The code a smoke verdict depends on: the checks, their settings and limits, the data they
# read (smoke/), and what they may import (the dependency rules: core, spec, rpc, weights).
SUITE_PACKAGES = ("smoke", "rpc", "weights", "spec", "core")


@functools.cache
def suite_id() -> str:
    """A digest of every file of :data:`SUITE_PACKAGES` as installed: it changes when a
    check, a threshold, a setting or the text a check reads changes."""
    root = Path(__file__).resolve().parent.parent  # the patchkit package
    h = hashlib.sha256()
    for pkg in SUITE_PACKAGES:
        files = sorted(
            p
            for p in (root / pkg).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        )
        for f in files:
            h.update(f"{f.relative_to(root).as_posix()}\0".encode())
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def _nvidia_driver_present() -> bool:
    """Whether the NVIDIA driver library (libcuda / nvcuda.dll) can be loaded here."""
    import ctypes

    for name in ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.so"):
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


def _needs_missing_driver(info: BuildInfo) -> str:
    """Why a CUDA build cannot run here at all ('' if it can)."""
    if info.cuda is None:
        return ""
    if info.cuda.no_vmm:
        return ""  # built without libcuda (GGML_CUDA_NO_VMM): runs on the CPU without a driver
    if info.cpu_variants is not None:
        return ""  # GGML_BACKEND_DL: libggml-cuda is a module that does not load; the tools run on the CPU
    if _nvidia_driver_present():
        return ""
    return (
        "this CUDA build links the NVIDIA driver (libcuda.so.1 / nvcuda.dll), which this "
        "machine lacks: run `patchkit smoke OUTDIR` on the GPU machine"
    )


def _wine() -> tuple[tuple[str, ...], dict[str, str], str]:
    for cand in ("/usr/lib/wine/wine64", shutil.which("wine64") or "", shutil.which("wine") or ""):
        if cand and Path(cand).is_file():
            return (cand,), {"WINEDEBUG": "-all"}, ""
    return (), {}, "wine is not installed (apt-get install wine64)"


def _stop_wineserver(env: Mapping[str, str]) -> None:
    """The prefix's wineserver outlives the last wine process by a few seconds and keeps
    writing into the prefix: stop it and wait for it, or removing the temp folder fails
    ("wineprefix: Directory not empty")."""
    server = next(
        (
            c
            for c in (
                "/usr/lib/wine/wineserver64",
                "/usr/lib/wine/wineserver",
                shutil.which("wineserver") or "",
            )
            if c and Path(c).is_file()
        ),
        "",
    )
    if not server or "WINEPREFIX" not in env:
        return
    for arg in ("-k", "-w"):
        run([server, arg], env=env, timeout=30, start_error="result")


def run_smoke(
    out_dir: Path,
    *,
    skip: tuple[str, ...] = (),
    only: tuple[str, ...] = (),
    timeout: float = 300.0,
    tool_dirs: tuple[Path, ...] = (),
    record: bool = True,
    on_result: Callable[[CheckResult], None] | None = None,
    extra_env: dict[str, str] | None = None,
    reference: Path | None = None,
    partial: bool = False,
    model: Path | RealModel | None = None,
    emulation: Emulation | None = None,
    env: Mapping[str, str],
) -> SmokeReport:
    """Run the checks against a build output dir; record the report in its build-info.json.

    ``partial``: some checks are left out on request (``--only``/``--skip``); a run that
    would pass is then recorded as "partial", which `patchkit release` does not accept.
    ``model``: the real GGUF of the kld and speed checks, as a path or as already found by
    smoke.realmodel (else smoke.realmodel finds one, ``env``'s PATCHKIT_MODEL first).
    ``env``: the environment the binaries run with (the caller's snapshot), under
    ``extra_env`` and what the build says it needs.
    ``emulation``: the binaries run as another CPU model (qemu); the reference, unless
    given, is this build run natively, and nothing is recorded (it is not this machine's
    verdict).
    """
    from patchkit.smoke.checks import CHECKS  # the checks and what they use: only to run them

    info = read_build_info(out_dir)
    real = model if isinstance(model, RealModel) else find_model(model, env=env)
    launcher: tuple[str, ...] = emulation.launcher if emulation is not None else ()
    if emulation is not None:
        record = False
        reference = reference or out_dir
    # what the build says its binaries need at run time (CUDA: the toolkit's library path)
    extra_env = {**info.runtime_env, **(extra_env or {})}
    results: list[CheckResult] = []
    windows = info.windows
    no_driver = _needs_missing_driver(info)
    if no_driver:
        results.append(CheckResult(name="all", status=CheckStatus.SKIP, why=no_driver))
    with tempfile.TemporaryDirectory(prefix="patchkit-smoke-") as tmp:
        if windows and sys.platform != "win32" and not results:
            launcher, wine_env, missing = _wine()
            extra_env.update(wine_env)
            if missing:
                results.append(CheckResult(name="all", status=CheckStatus.SKIP, why=missing))
            else:
                extra_env["WINEPREFIX"] = str(Path(tmp) / "wineprefix")
        smoke_env = SmokeEnv(
            out_dir=out_dir,
            info=info,
            workdir=Path(tmp),
            timeout=timeout,
            base_env=env,
            launcher=launcher,
            emulation=emulation,
            gpu=info.cuda is not None and emulation is None and _nvidia_driver_present(),
            env=extra_env,
            tool_dirs=tool_dirs,
            reference=reference,
            model=real.path if real else None,
            model_label=real.label if real else "",
            model_why=NO_MODEL,
        )
        if results:  # nothing can run here (no driver, no wine): say why
            for res in results:
                if on_result is not None:
                    on_result(res)
        else:
            for name, check in CHECKS.items():
                if name in skip or (only and name not in only):
                    res = CheckResult(name=name, status=CheckStatus.SKIP, why="skipped on request")
                else:
                    res = check(smoke_env)
                results.append(res)
                if on_result is not None:
                    on_result(res)
            _stop_wineserver(smoke_env.run_env)
    statuses = {r.status for r in results}
    status = (
        SmokeStatus.FAILED
        if CheckStatus.FAIL in statuses
        else SmokeStatus.PASSED
        if CheckStatus.PASS in statuses
        else SmokeStatus.SKIPPED
    )
    if status is SmokeStatus.PASSED and partial:
        status = SmokeStatus.PARTIAL  # some checks were left out on request: release refuses it
    report = SmokeReport(status=status, checks=tuple(results))
    if record:
        write_build_info(out_dir, dataclasses.replace(info, smoke=report))
    return report


def raise_if_failed(report: SmokeReport) -> None:
    """The rule: a smoke run with a failed check is a SmokeError (exit 7)."""
    if report.status is SmokeStatus.FAILED:
        raise SmokeError(
            f"smoke failed: {', '.join(report.failed)}",
            hint="the build-info.json of the output records every check",
        )
