"""The CUDA runtime bundle: NVIDIA's cudart / cuBLAS / cuBLASLt for a CUDA release.

A CUDA build links NVIDIA's runtime libraries (``libcudart.so.13``, ``libcublas.so.13``,
``libcublasLt.so.13``; ``cudart64_12.dll``, ``cublas64_12.dll``, ``cublasLt64_12.dll``);
a machine without the toolkit lacks them. ``patchkit release`` takes them from NVIDIA's
PyPI wheels for the target OS (``nvidia-cuda-runtime-cu12`` / ``nvidia-cublas-cu12``;
CUDA 11: ``-cu11``; CUDA 13: ``nvidia-cuda-runtime`` / ``nvidia-cublas``) at the toolkit's
version (``==<major>.<minor>.*`` of the nvcc the build recorded; CUDA 11.8's cuBLAS is
11.11: :func:`wheel_versions`), and packs them, with NVIDIA's
licence text from each wheel, into one separate archive beside the builds::

    cudart-llama-<os>-<arch>-cuda<X.Y>.tar.gz   (.zip for Windows)
      cudart-llama-.../bin/<the libraries>
      cudart-llama-.../LICENSE.<distribution>.txt
      cudart-llama-.../manifest.json          (kind "cuda-runtime": wheels, files, sha256s)

It is one archive per CUDA version and platform, shared by every CUDA recipe released
into the folder (llama.cpp's own releases do the same): cuBLASLt alone is ~0.5 GB
(Linux) to ~0.7 GB (Windows), which every recipe's archive would otherwise repeat.
Unpacked over a build's folder, its ``bin/`` joins the build's ``bin/``. Each build's
manifest names it (``runtime``: archive, sha256, files) and ``verify`` checks both.

Only the libraries the build's binaries import (and what those import in turn) are
taken. Wheels are input from outside: each is a zip read with caps (members, sizes,
time), member names checked, and every file taken is checked against the wheel's own
``RECORD`` sha256. ``--runtime-wheels DIR`` takes the wheels from a folder (offline);
otherwise ``pip download --no-deps --only-binary :all: --platform ...`` fetches them
into the cache.
"""

from __future__ import annotations

import calendar
import dataclasses
import os
import re
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

from patchkit import __version__
from patchkit.core import proc
from patchkit.core.errors import ReleaseError
from patchkit.core.fs import atomic_write_bytes
from patchkit.core.paths import cache_layout
from patchkit.core.text import printable
from patchkit.release.archive import Member, write_archive
from patchkit.release.imports import Binary, check_imports, read_binary
from patchkit.release.names import runtime_name
from patchkit.release.wheel import (
    DEFAULT_WHEEL_LIMITS,
    WHEEL_NAME,
    Budget,
    Wheel,
    WheelLimits,
    normalize,
    open_wheel,
)
from patchkit.spec.buildinfo import BuildInfo, Platform
from patchkit.spec.manifest import (
    RUNTIME_KIND,
    ImportSummary,
    RuntimeCuda,
    RuntimeFile,
    RuntimeManifest,
    WheelRecord,
)

__all__ = [
    "RUNTIME_KIND",
    "RuntimeSpec",
    "StagedRuntime",
    "WheelLimits",
    "check_runtime",
    "distributions",
    "download_wheels",
    "pip_platforms",
    "runtime_manifest",
    "runtime_needed",
    "runtime_spec",
    "select_wheels",
    "stage_runtime",
    "version_key",
    "wheel_versions",
    "write_runtime",
]

PIP_TIMEOUT = 3600.0
# the libraries a CUDA runtime wheel may give a release (anything else in them is left);
# CUDA 11's cudart is libcudart.so.11.0 (its soname), its cuBLAS libcublas.so.11
_RUNTIME_LIB = re.compile(
    r"^(?:lib(?:cudart|cublas|cublasLt)\.so\.\d+(?:\.0)?|(?:cudart|cublas|cublasLt)64_\d+\.dll)$"
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeSpec:
    os: str  # "linux" | "windows"
    arch: str  # "x86_64" | "aarch64"
    major: int
    minor: int

    @property
    def version(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def name(self) -> str:
        return runtime_name(self.os, self.arch, self.version)[0]

    @property
    def suffix(self) -> str:
        return runtime_name(self.os, self.arch, self.version)[1]


def runtime_spec(info: BuildInfo) -> RuntimeSpec:
    """The runtime a CUDA build needs, from its build-info (nvcc version, platform)."""
    raw = (info.cuda.nvcc if info.cuda else "") or info.tools.get("nvcc") or ""
    m = re.search(r"(\d+)\.(\d+)", raw)
    if not m:
        raise ReleaseError(
            f"build-info.json: cannot tell the CUDA version from nvcc {raw!r}",
            hint="pass --no-bundle-runtime to release without NVIDIA's runtime",
        )
    plat = info.platform
    if plat.os not in ("linux", "windows") or plat.arch not in ("x86_64", "aarch64"):
        raise ReleaseError(
            f"NVIDIA publishes no runtime wheels for {plat.os} {plat.arch}",
            hint="pass --no-bundle-runtime",
        )
    return RuntimeSpec(os=plat.os, arch=plat.arch, major=int(m.group(1)), minor=int(m.group(2)))


def distributions(spec: RuntimeSpec) -> tuple[str, str]:
    """The PyPI names of the runtime and cuBLAS wheels of that CUDA major."""
    if spec.major >= 13:
        return "nvidia-cuda-runtime", "nvidia-cublas"
    return f"nvidia-cuda-runtime-cu{spec.major}", f"nvidia-cublas-cu{spec.major}"


# CUDA 11's cuBLAS has its own minor numbers: the toolkit 11.8 ships cuBLAS 11.11, 11.7 ships
# 11.10 (NVIDIA's release notes; the only CUDA 11 versions with wheels on PyPI:
# nvidia-cuda-runtime-cu11 11.7.99, 11.8.89; nvidia-cublas-cu11 11.10.3.66, 11.11.3.6).
# From CUDA 12 on, cuBLAS X.Y comes with the toolkit X.Y.
_CUBLAS_CUDA11 = {7: "11.10", 8: "11.11"}


def wheel_versions(spec: RuntimeSpec) -> tuple[tuple[str, str], tuple[str, str]]:
    """(distribution, version prefix) of the runtime and cuBLAS wheels for that toolkit:
    ``("nvidia-cublas-cu11", "11.11")`` for CUDA 11.8. ReleaseError for a CUDA 11 whose
    cuBLAS has no wheel."""
    runtime, cublas = distributions(spec)
    if spec.major != 11:
        return (runtime, spec.version), (cublas, spec.version)
    if spec.minor not in _CUBLAS_CUDA11:
        raise ReleaseError(
            f"NVIDIA publishes CUDA 11 runtime wheels for 11.7 and 11.8 only, not {spec.version}",
            hint="build with CUDA 11.8 (or 12.x), or pass --no-bundle-runtime",
        )
    return (runtime, spec.version), (cublas, _CUBLAS_CUDA11[spec.minor])


def pip_platforms(spec: RuntimeSpec) -> list[str]:
    """Wheel platform tags that run on the target (pip matches --platform exactly)."""
    if spec.os == "windows":
        return ["win_amd64"] if spec.arch == "x86_64" else ["win_arm64"]
    newest = 28  # glibc 2.28 and older: any current distribution runs them
    oldest = 17 if spec.arch == "aarch64" else 5
    tags = [f"manylinux_2_{v}_{spec.arch}" for v in range(newest, oldest - 1, -1)]
    tags.append(f"manylinux2014_{spec.arch}")
    if spec.arch == "x86_64":
        tags += ["manylinux2010_x86_64", "manylinux1_x86_64"]
    return tags


def version_key(v: str) -> tuple[int, ...]:
    """The numbers of a version string, to compare (``13.0.88`` -> (13, 0, 88))."""
    return tuple(int(x) for x in re.findall(r"\d+", v))


def select_wheels(folder: Path, spec: RuntimeSpec) -> list[Path]:
    """One wheel per distribution from ``folder``: the newest of ``<major>.<minor>.*`` whose
    platform tag fits the target. ReleaseError naming what is missing."""
    plats = set(pip_platforms(spec))
    chosen: list[Path] = []
    for dist, prefix in wheel_versions(spec):
        cands: list[tuple[tuple[int, ...], Path]] = []
        for p in sorted(folder.glob("*.whl")) if folder.is_dir() else []:
            m = WHEEL_NAME.match(p.name)
            if not m or normalize(m.group("dist")) != normalize(dist):
                continue
            version = m.group("version")
            if not re.match(rf"^{re.escape(prefix)}(\.|$)", version) or "rc" in version:
                continue
            if not set(m.group("plat").split(".")) & plats:
                continue
            cands.append((version_key(version), p))
        if not cands:
            raise ReleaseError(
                f"no {dist} {prefix}.* wheel for {spec.os} {spec.arch} in {folder}",
                hint=f"put NVIDIA's {dist} wheel for that platform there (`pip download "
                f"--no-deps --only-binary :all: --platform {pip_platforms(spec)[0]} "
                f"'{dist}=={prefix}.*'`), or pass --no-bundle-runtime",
            )
        chosen.append(max(cands)[1])
    return chosen


def download_wheels(spec: RuntimeSpec) -> list[Path]:
    """Fetch the two wheels into the cache with pip (PyPI or the configured index)."""
    dest = cache_layout().wheels(f"{spec.os}-{spec.arch}-cuda{spec.version}")
    dest.mkdir(parents=True, exist_ok=True)
    args: list[str] = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--disable-pip-version-check",
        "--python-version",
        "3.12",
        "--implementation",
        "py",
        "-d",
        str(dest),
    ]
    for tag in pip_platforms(spec):
        args += ["--platform", tag]
    args += [f"{d}=={prefix}.*" for d, prefix in wheel_versions(spec)]
    r = proc.run(args, timeout=PIP_TIMEOUT, merge_stderr=True, start_error="result")
    if not r.ok:
        raise ReleaseError(
            f"pip could not download NVIDIA's CUDA {spec.version} runtime wheels "
            f"for {spec.os} {spec.arch} ({r.brief()}): {r.last_line()}",
            hint="pass --runtime-wheels DIR with the wheels, or --no-bundle-runtime",
        )
    return select_wheels(dest, spec)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StagedRuntime:
    """The runtime libraries taken out of the wheels into ``folder`` (``bin/...``,
    ``LICENSE.<dist>.txt``), not yet packed."""

    spec: RuntimeSpec
    folder: Path
    wheels: tuple[WheelRecord, ...]
    files: tuple[RuntimeFile, ...]
    binaries: tuple[Binary, ...]
    mtime: int  # the newest date of a file taken (so the bytes follow from the wheels)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def archive(self) -> str:
        return self.spec.name + self.spec.suffix

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files]


_ET_DYN = 3
_PE_DLL = 0x2000  # IMAGE_FILE_DLL


def _not_a_library(path: Path, spec: RuntimeSpec) -> str:
    """Why the file taken as a runtime library is not a shared library of the target's
    format ('' when it is): an ELF shared object (e_type ET_DYN) on Linux, a PE DLL on
    Windows. A script, a text file or a symlink's target name is not."""
    with path.open("rb") as f:
        head = f.read(64)
        if spec.os != "windows":
            if head[:4] != b"\x7fELF" or len(head) < 18 or head[5] not in (1, 2):
                return "not an ELF file" if head[:2] != b"#!" else "a script"
            e_type = int.from_bytes(head[16:18], "little" if head[5] == 1 else "big")
            return "" if e_type == _ET_DYN else f"an ELF file of type {e_type} (not ET_DYN)"
        if head[:2] != b"MZ" or len(head) < 64:
            return "not a PE file" if head[:2] != b"#!" else "a script"
        pe = int.from_bytes(head[60:64], "little")
        f.seek(pe)
        sig = f.read(24)
    if len(sig) < 24 or sig[:4] != b"PE\0\0":
        return "not a PE file"
    characteristics = int.from_bytes(sig[22:24], "little")
    return "" if characteristics & _PE_DLL else "a PE file that is not a DLL"


def _lib_dir_ok(member: str, spec: RuntimeSpec) -> bool:
    parts = member.split("/")
    return (
        len(parts) >= 3 and parts[0] == "nvidia" and parts[-2] == ("bin" if spec.os == "windows" else "lib")
    )


def stage_runtime(
    spec: RuntimeSpec,
    wheels: Sequence[Path],
    needed: set[str],
    folder: Path,
    *,
    limits: WheelLimits = DEFAULT_WHEEL_LIMITS,
) -> StagedRuntime:
    """Take from ``wheels`` the runtime libraries in ``needed`` (and what they import, in
    turn) plus each wheel's licence into ``folder``; check each against RECORD."""
    budget = Budget.start(limits)
    (folder / "bin").mkdir(parents=True, exist_ok=True)
    taken = _Taken()
    opened: list[Wheel] = []
    try:
        for path in wheels:
            opened.append(open_wheel(path, limits))  # closed in the finally below
            _take_licence(opened[-1], folder, budget, taken)
        libs = [(w, _runtime_libs(w, spec)) for w in opened]
        _take_libraries(libs, needed, spec, folder, budget, taken)
    finally:
        for w in opened:
            w.close()
    return StagedRuntime(
        spec=spec,
        folder=folder,
        wheels=tuple(taken.wheels),
        files=tuple(sorted(taken.files, key=lambda f: f.path)),
        binaries=tuple(taken.binaries),
        mtime=max(taken.dates) if taken.dates else 0,
    )


@dataclasses.dataclass(kw_only=True)
class _Taken:
    """What :func:`stage_runtime` took so far."""

    files: list[RuntimeFile] = dataclasses.field(default_factory=list)
    wheels: list[WheelRecord] = dataclasses.field(default_factory=list)
    binaries: list[Binary] = dataclasses.field(default_factory=list)
    dates: list[int] = dataclasses.field(default_factory=list)


def _runtime_libs(w: Wheel, spec: RuntimeSpec) -> dict[str, zipfile.ZipInfo]:
    """The runtime libraries in the wheel's library folder, by file name."""
    return {
        i.filename.split("/")[-1]: i
        for i in w.members()
        if _lib_dir_ok(i.filename, spec) and _RUNTIME_LIB.match(i.filename.split("/")[-1])
    }


def _take_licence(w: Wheel, folder: Path, budget: Budget, taken: _Taken) -> None:
    lic = w.licence()
    dist = normalize(w.dist).replace("_", "-")
    rel = f"LICENSE.{dist}.txt"
    sha = w.extract(lic, folder / rel, budget)
    taken.files.append(
        RuntimeFile(
            path=rel,
            sha256=sha,
            size=lic.file_size,
            mode="644",
            type="LICENSE",
            wheel=w.path.name,
            member=lic.filename,
        )
    )
    taken.dates.append(calendar.timegm((*lic.date_time, 0, 0, 0)))
    taken.wheels.append(
        WheelRecord(distribution=dist, version=w.version, file=w.path.name, sha256=w.sha256, size=w.size)
    )


def _take_libraries(
    opened: Sequence[tuple[Wheel, dict[str, zipfile.ZipInfo]]],
    needed: set[str],
    spec: RuntimeSpec,
    folder: Path,
    budget: Budget,
    taken: _Taken,
) -> None:
    """The ``needed`` libraries out of the wheels, then what those import, in turn."""
    todo = sorted(needed)
    done: set[str] = set()
    while todo:
        lib = todo.pop(0)
        if lib in done:
            continue
        src = next(((w, libs[lib]) for w, libs in opened if lib in libs), None)
        if src is None:
            continue  # not a runtime library: the import check decides about it
        w, info = src
        done.add(lib)
        dest = folder / "bin" / lib
        sha = w.extract(info, dest, budget)
        os.chmod(dest, 0o755)
        taken.files.append(
            RuntimeFile(
                path=f"bin/{lib}",
                sha256=sha,
                size=info.file_size,
                mode="755",
                type="SHARED_LIBRARY",
                wheel=w.path.name,
                member=info.filename,
            )
        )
        taken.dates.append(calendar.timegm((*info.date_time, 0, 0, 0)))
        why = _not_a_library(dest, spec)
        if why:
            raise ReleaseError(
                f"{w.path.name}: {printable(info.filename[:200])} is {why}, not a shared library",
                hint="a runtime archive ships only NVIDIA's libraries: this wheel is damaged or altered",
            )
        try:
            b = read_binary(dest, f"bin/{lib}")
        except ValueError as e:
            raise ReleaseError(f"{w.path.name}: {e}") from None
        if b is not None:
            taken.binaries.append(b)
            todo += [n for n in b.needed if n not in done]


def runtime_manifest(rt: StagedRuntime, *, sde: int | None, imports: ImportSummary) -> RuntimeManifest:
    return RuntimeManifest(
        kind=RUNTIME_KIND,
        name=rt.name,
        archive=rt.archive,
        variant=f"cuda{rt.spec.version}",
        released_by=f"patchkit {__version__}",
        platform=Platform(os=rt.spec.os, arch=rt.spec.arch),
        cuda=RuntimeCuda(version=rt.spec.version, major=rt.spec.major),
        wheels=rt.wheels,
        imports=imports,
        source_date_epoch=sde if sde is not None else rt.mtime,
        mtime_from="SOURCE_DATE_EPOCH" if sde is not None else "wheels",
        files=rt.files,
        waivers=(),
    )


def write_runtime(rt: StagedRuntime, out: Path, manifest_bytes: bytes, mtime: int) -> tuple[str, Path]:
    """Pack it into ``out`` (atomically) with its manifest copy beside it: (sha256, side)."""
    members = [Member(name=f.path, mode=int(f.mode, 8), source=rt.folder / f.path) for f in rt.files]
    members.append(Member(name="manifest.json", mode=0o644, data=manifest_bytes))
    digest = write_archive(out / rt.archive, rt.name, members, mtime=mtime)
    side = out / f"{rt.name}.manifest.json"
    atomic_write_bytes(side, manifest_bytes, mode=0o644)
    return digest, side


def runtime_needed(binaries: Sequence[Binary]) -> set[str]:
    return {n for b in binaries for n in b.needed if _RUNTIME_LIB.match(n)}


def check_runtime(rt: StagedRuntime) -> list[str]:
    """The runtime's own libraries import only each other and the allowed sets."""
    report = check_imports(rt.binaries, os_name=rt.spec.os, files=rt.paths)
    return list(report.problems)
