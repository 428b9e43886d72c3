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

import base64
import calendar
import csv
import dataclasses
import errno
import hashlib
import io
import os
import re
import shutil
import stat
import sys
import time
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from patchkit import __version__
from patchkit.core import proc
from patchkit.core.errors import ReleaseError
from patchkit.core.fs import atomic_write_bytes, sha256_file, sha256_stream
from patchkit.core.paths import cache_layout
from patchkit.core.text import printable
from patchkit.release.archive import Member, unsafe_member_name, write_archive
from patchkit.release.imports import (
    LIBRARY_NAME,
    Binary,
    ImportReport,
    archive_binaries,
    check_imports,
    read_binary,
)
from patchkit.release.names import runtime_name
from patchkit.spec.buildinfo import BuildInfo, Platform
from patchkit.spec.manifest import (
    RUNTIME_KIND,
    ImportSummary,
    Manifest,
    ReleaseManifest,
    RuntimeCuda,
    RuntimeFile,
    RuntimeManifest,
    RuntimeRef,
    WheelRecord,
    dump_manifest,
)

__all__ = [
    "RUNTIME_KIND",
    "ReleaseCheck",
    "RuntimeSpec",
    "StagedRuntime",
    "WheelLimits",
    "check_release",
    "distributions",
    "pip_platforms",
    "publish",
    "runtime_spec",
    "select_wheels",
    "stage_runtime",
    "verify_imports",
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
_WHEEL_NAME = re.compile(
    r"^(?P<dist>[A-Za-z0-9_.]+)-(?P<version>[0-9][A-Za-z0-9_.+!]*)(?:-\d[^-]*)?"
    r"-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$"
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WheelLimits:
    members: int = 10_000
    member: int = 4 << 30  # one file in a wheel
    total: int = 8 << 30  # what is taken out of all wheels
    record: int = 4 << 20  # RECORD and licence files, read into memory
    seconds: float = 1800.0


DEFAULT_WHEEL_LIMITS = WheelLimits()


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


def _norm(dist: str) -> str:
    return re.sub(r"[-_.]+", "_", dist).lower()


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
            m = _WHEEL_NAME.match(p.name)
            if not m or _norm(m.group("dist")) != _norm(dist):
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
class _Wheel:
    path: Path
    dist: str
    version: str
    sha256: str
    size: int


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


def _record(zf: zipfile.ZipFile, dist_info: str, limits: WheelLimits, label: str) -> dict[str, str]:
    """RECORD: member -> sha256 hex."""
    name = f"{dist_info}/RECORD"
    try:
        info = zf.getinfo(name)
    except KeyError:
        raise ReleaseError(f"{label}: has no {name}: not a wheel") from None
    if info.file_size > limits.record:
        raise ReleaseError(f"{label}: its RECORD is {info.file_size} bytes (a bomb?)")
    try:
        text = zf.read(info).decode("utf-8", "replace")
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as e:
        raise ReleaseError(
            f"{label}: its RECORD cannot be read ({str(e)[:160]}): a damaged or altered wheel",
            hint="download it again",
        ) from None
    out: dict[str, str] = {}
    for row in csv.reader(io.StringIO(text)):
        if len(row) >= 2 and row[1].startswith("sha256="):
            b64 = row[1][len("sha256=") :]
            try:
                out[row[0]] = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()
            except ValueError:
                continue
    return out


def _extract(
    zf: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    dest: Path,
    want_sha: str | None,
    budget: list[int],
    limits: WheelLimits,
    deadline: float,
    label: str,
) -> str:
    name = printable(info.filename[:200])
    if want_sha is None:
        raise ReleaseError(f"{label}: {name} is not in the wheel's RECORD")
    kind = stat.S_IFMT(info.external_attr >> 16)
    if info.is_dir() or kind not in (0, stat.S_IFREG):
        raise ReleaseError(
            f"{label}: {name} is not a plain file in the wheel "
            f"({'a symlink' if kind == stat.S_IFLNK else 'a folder' if info.is_dir() else f'mode {kind:o}'})",
            hint="NVIDIA's wheels hold plain files: this one is damaged or altered",
        )
    # what it declares, before a byte is written: a 4 MB wheel may not make gigabytes
    if info.file_size > limits.member:
        raise ReleaseError(
            f"{label}: {name} declares {info.file_size} bytes, more than the "
            f"{limits.member / (1 << 30):g} GiB a file of a wheel may be (a bomb?)"
        )
    if budget[0] + info.file_size > limits.total:
        raise ReleaseError(
            f"{label}: {name} ({info.file_size} bytes) takes what is taken out of the wheels "
            f"past {limits.total / (1 << 30):g} GiB (a bomb?)"
        )
    h = hashlib.sha256()
    n = 0
    try:
        with zf.open(info) as src, dest.open("wb") as out:
            for chunk in iter(lambda: src.read(1 << 20), b""):
                n += len(chunk)
                budget[0] += len(chunk)
                if n > info.file_size:
                    raise ReleaseError(
                        f"{label}: {name} inflates past its declared {info.file_size} bytes (a bomb?)"
                    )
                if time.monotonic() > deadline:
                    raise ReleaseError(f"{label}: reading it took more than {limits.seconds:.0f}s")
                h.update(chunk)
                out.write(chunk)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as e:
        raise ReleaseError(
            f"{label}: {name} cannot be read ({str(e)[:160]}): a damaged or altered wheel",
            hint="download it again",
        ) from None
    digest = h.hexdigest()
    if digest != want_sha:
        raise ReleaseError(
            f"{label}: {info.filename} does not match the sha256 in the wheel's "
            "RECORD (a damaged or altered wheel)",
            hint="download it again",
        )
    return digest


def _open_plain(path: Path) -> BinaryIO:
    """``path`` opened for reading, when it is a regular file: never through a link (one to
    /dev/zero would be read forever), never a FIFO or device (a FIFO blocks its reader
    until someone writes): checked on the open file itself, so nothing can swap it after."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    flags |= getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    if os.path.islink(path):  # O_NOFOLLOW where there is none (Windows)
        raise ReleaseError(f"{path.name}: not a plain file (a link: links are not followed)")
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ReleaseError(f"{path.name}: not a plain file (a link: links are not followed)") from None
        raise ReleaseError(f"{path.name}: cannot be read ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ReleaseError(f"{path.name}: not a plain file (a FIFO, device or folder is never read)")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _open_wheel(path: Path, limits: WheelLimits) -> tuple[zipfile.ZipFile, str, int]:
    """The wheel as a zip, its sha256 and size: one regular file, opened once."""
    f = _open_plain(path)
    try:
        size = os.fstat(f.fileno()).st_size
        digest = sha256_stream(f)
        f.seek(0)
        zf = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        f.close()
        raise ReleaseError(f"{path.name}: not a readable wheel ({str(e)[:160]})") from None
    except BaseException:
        f.close()
        raise
    zf._patchkit_file = f  # type: ignore[attr-defined]  # closed with the zip (see _close)
    infos = zf.infolist()
    if len(infos) > limits.members:
        _close(zf)
        raise ReleaseError(f"{path.name}: more than {limits.members} members (a bomb?)")
    for i in infos:
        why = unsafe_member_name(i.filename)
        if why and not i.filename.endswith("/"):
            _close(zf)
            raise ReleaseError(f"{path.name}: member {printable(i.filename[:120])!r}: {why}")
    return zf, digest, size


def _close(zf: zipfile.ZipFile) -> None:
    zf.close()
    f = getattr(zf, "_patchkit_file", None)
    if f is not None:
        f.close()


_DIST_INFO = re.compile(r"^(?P<dist>[A-Za-z0-9_.]+)-(?P<version>[0-9][A-Za-z0-9_.+!]*)\.dist-info$")


def _check_dist_info(label: str, dist_info: str, w: _Wheel) -> None:
    """The wheel's ``.dist-info`` names the distribution and version its file name says
    (what the manifest records, and what was chosen by): else it is another package."""
    m = _DIST_INFO.match(dist_info)
    if m is None or _norm(m.group("dist")) != _norm(w.dist) or m.group("version") != w.version:
        raise ReleaseError(
            f"{label}: its metadata folder {printable(dist_info[:120])!r} is not "
            f"{_norm(w.dist)}-{w.version}.dist-info: the file name does not say what it holds",
            hint="use the wheel as NVIDIA publishes it (pip download)",
        )


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
    deadline = time.monotonic() + limits.seconds
    budget = [0]
    (folder / "bin").mkdir(parents=True, exist_ok=True)
    files: list[RuntimeFile] = []
    wheel_rows: list[WheelRecord] = []
    binaries: list[Binary] = []
    dates: list[int] = []
    opened: list[tuple[_Wheel, zipfile.ZipFile, dict[str, zipfile.ZipInfo], dict[str, str]]] = []
    try:
        for path in wheels:
            m = _WHEEL_NAME.match(path.name)
            if not m:
                raise ReleaseError(f"{path.name}: not a wheel file name")
            zf, digest, size = _open_wheel(path, limits)
            w = _Wheel(path=path, dist=m.group("dist"), version=m.group("version"), sha256=digest, size=size)
            opened.append((w, zf, {}, {}))  # closed in the finally below, whatever happens next
            infos = sorted(
                {
                    i.filename.split("/")[0]
                    for i in zf.infolist()
                    if re.match(r"^[^/]+\.dist-info/RECORD$", i.filename)
                }
            )
            if not infos:
                raise ReleaseError(f"{path.name}: has no .dist-info/RECORD: not a wheel")
            if len(infos) > 1:
                shown = ", ".join(printable(d[:80]) for d in infos[:3])
                raise ReleaseError(
                    f"{path.name}: has {len(infos)} .dist-info folders ({shown}): not one wheel"
                )
            dist_info = infos[0]
            _check_dist_info(path.name, dist_info, w)
            record = _record(zf, dist_info, limits, path.name)
            libs = {
                i.filename.split("/")[-1]: i
                for i in zf.infolist()
                if _lib_dir_ok(i.filename, spec) and _RUNTIME_LIB.match(i.filename.split("/")[-1])
            }
            opened[-1] = (w, zf, libs, record)
            lic = next(
                (
                    i
                    for i in zf.infolist()
                    if re.match(
                        rf"^{re.escape(dist_info)}/(?:licenses/)?(?:License|LICENSE)(?:\.txt|\.md)?$",
                        i.filename,
                    )
                ),
                None,
            )
            if lic is None:
                raise ReleaseError(
                    f"{path.name}: has no licence file in {dist_info}/: "
                    "NVIDIA's licence must ship with its libraries"
                )
            rel = f"LICENSE.{_norm(w.dist).replace('_', '-')}.txt"
            sha = _extract(
                zf, lic, folder / rel, record.get(lic.filename), budget, limits, deadline, path.name
            )
            files.append(
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
            dates.append(calendar.timegm((*lic.date_time, 0, 0, 0)))
            wheel_rows.append(
                WheelRecord(
                    distribution=_norm(w.dist).replace("_", "-"),
                    version=w.version,
                    file=w.path.name,
                    sha256=w.sha256,
                    size=w.size,
                )
            )
        todo = sorted(needed)
        taken: set[str] = set()
        while todo:
            lib = todo.pop(0)
            if lib in taken:
                continue
            src = next(((w, zf, libs[lib], rec) for w, zf, libs, rec in opened if lib in libs), None)
            if src is None:
                continue  # not a runtime library: the import check decides about it
            w, zf, info, rec = src
            taken.add(lib)
            dest = folder / "bin" / lib
            sha = _extract(zf, info, dest, rec.get(info.filename), budget, limits, deadline, w.path.name)
            os.chmod(dest, 0o755)
            files.append(
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
            dates.append(calendar.timegm((*info.date_time, 0, 0, 0)))
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
                binaries.append(b)
                todo += [n for n in b.needed if n not in taken]
    finally:
        for _, zf, _, _ in opened:
            _close(zf)
    return StagedRuntime(
        spec=spec,
        folder=folder,
        wheels=tuple(wheel_rows),
        files=tuple(sorted(files, key=lambda f: f.path)),
        binaries=tuple(binaries),
        mtime=max(dates) if dates else 0,
    )


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


def clean(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------- release and verify glue


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReleaseCheck:
    """What `release` learnt about a build's imports, and the runtime archive it packed
    (in the staging folder, not yet in the out folder)."""

    report: ImportReport
    runtime: StagedRuntime | None
    runtime_archive: Path | None = None
    runtime_sha256: str = ""
    runtime_manifest: bytes = b""
    note: str = ""
    artifacts: tuple[str, ...] = ()  # the build's own files (the manifest's imports are theirs)

    @property
    def imports(self) -> ImportSummary:
        """The manifest's ``imports``: what the build's own files need."""
        return self.report.summary(of=self.artifacts)

    @property
    def runtime_ref(self) -> RuntimeRef | None:
        """The manifest's ``runtime``: the runtime archive it needs beside it."""
        rt = self.runtime
        if rt is None:
            return None
        return RuntimeRef(
            archive=rt.archive, sha256=self.runtime_sha256, cuda=rt.spec.version, files=tuple(rt.paths)
        )


def _problems_error(what: str, problems: Sequence[str]) -> ReleaseError:
    shown = "; ".join(problems[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
    return ReleaseError(
        f"{what}: {shown}",
        hint="every library a binary loads must be in bin/, in the CUDA runtime "
        "bundle, or an allowed system library (docs/release.md)",
    )


def check_release(
    info: BuildInfo,
    build_dir: Path,
    artifacts: Sequence[str],
    *,
    bundle: bool,
    wheels: Path | None,
    stage: Path,
    sde: int | None,
    allow: Sequence[str] = (),
) -> ReleaseCheck:
    """Read every artifact's imports; for a CUDA build (unless ``bundle`` is off) take the
    runtime it imports from the wheels and pack the runtime archive into ``stage``; then
    prove every import resolves. ReleaseError (exit 12) naming file and library if not."""
    bad = [a for a in allow if not LIBRARY_NAME.match(a)]
    if bad:
        raise ReleaseError(f"--allow-system {bad[0]!r} is not a library file name (libssl.so.3)")
    binaries: list[Binary] = []
    unreadable: list[str] = []
    for rel in artifacts:
        try:
            b = read_binary(build_dir / rel, rel)
        except ValueError as e:
            unreadable.append(str(e))
            continue
        if b is not None:
            binaries.append(b)
    if unreadable:
        raise _problems_error("the import check cannot read the artifacts", unreadable)
    runtime = None
    note = ""
    if info.cuda is not None and not bundle:
        note = "no CUDA runtime bundle (--no-bundle-runtime): the target needs the toolkit's"
    elif info.cuda is not None:
        spec = runtime_spec(info)
        needed = runtime_needed(binaries)
        if not needed:
            note = "the binaries link no NVIDIA runtime library: no runtime bundle"
        else:
            chosen = select_wheels(wheels, spec) if wheels is not None else download_wheels(spec)
            runtime = stage_runtime(spec, chosen, needed, stage / "runtime")
            own = check_runtime(runtime)
            if own:
                raise _problems_error("the CUDA runtime bundle's own imports do not resolve", own)
    files = [*artifacts, *(runtime.paths if runtime else [])]
    report = check_imports(
        [*binaries, *(runtime.binaries if runtime else ())],
        os_name=info.platform.os,
        files=files,
        allow=allow,
    )
    if report.problems:
        raise _problems_error("the import check failed", report.problems)
    if runtime is None:
        return ReleaseCheck(report=report, runtime=None, note=note, artifacts=tuple(artifacts))
    rt_report = check_imports(runtime.binaries, os_name=runtime.spec.os, files=runtime.paths)
    data = dump_manifest(runtime_manifest(runtime, sde=sde, imports=rt_report.summary()))
    mtime = sde if sde is not None else runtime.mtime
    packed = stage / "packed"
    digest, _ = write_runtime(runtime, packed, data, mtime)
    return ReleaseCheck(
        report=report,
        runtime=runtime,
        runtime_archive=packed / runtime.archive,
        runtime_sha256=digest,
        runtime_manifest=data,
        note=note,
        artifacts=tuple(artifacts),
    )


def publish(check: ReleaseCheck, out: Path) -> dict[str, str]:
    """Put the staged runtime archive and its manifest copy into ``out``: {name: sha256}
    for SHA256SUMS. The same archive already there is kept; another one is refused (the
    releases already in ``out`` name its sha256)."""
    rt = check.runtime
    if rt is None or check.runtime_archive is None:
        return {}
    dest = out / rt.archive
    side = out / f"{rt.name}.manifest.json"
    if os.path.lexists(dest):
        if os.path.islink(dest) or not dest.is_file() or sha256_file(dest) != check.runtime_sha256:
            raise ReleaseError(
                f"{dest} already holds another CUDA {rt.spec.version} runtime "
                "bundle (other wheels?), which releases in that folder name",
                hint="release into a fresh --out folder, or pass --runtime-wheels "
                "with the wheels used before",
            )
    else:
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / f".{rt.archive}.tmp"
        shutil.copyfile(check.runtime_archive, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    atomic_write_bytes(side, check.runtime_manifest, mode=0o644)
    return {dest.name: check.runtime_sha256, side.name: sha256_file(side)}


def verify_imports(dist: Path, name: str, root: str, manifest: Manifest) -> list[str]:
    """verify: the import check on an archive's own bin/ (plus, for a build, the files of
    the CUDA runtime archive its manifest names, which must be in ``dist`` with that
    sha256); the manifest's recorded ``imports`` must be what the archive gives."""
    os_name = manifest.platform.os
    if os_name not in ("linux", "windows"):
        return []
    diffs: list[str] = []
    try:
        binaries, unreadable, files = archive_binaries(dist / name, root)
    except ValueError as e:
        return [f"{name}: import check: {e}"]
    extra: list[str] = []
    if isinstance(manifest, ReleaseManifest) and manifest.runtime is not None:
        extra, why = _runtime_files(dist, manifest.runtime)
        diffs += [f"{name}: {w}" for w in why]
    recorded = manifest.imports
    allow = [a for a in recorded.allowed_extra if LIBRARY_NAME.match(a)] if recorded is not None else []
    report = check_imports(
        binaries, os_name=os_name, files=[*files, *extra], unreadable=unreadable, allow=allow
    )
    diffs += [f"{name}: import check: {p}" for p in report.problems]
    if isinstance(manifest, RuntimeManifest):  # NVIDIA's files: each library must be one
        fmt = "pe" if os_name == "windows" else "elf"
        found = {b.path: b.format for b in binaries}
        for f in manifest.files:
            if f.type == "SHARED_LIBRARY" and found.get(f.path) != fmt:
                diffs.append(
                    f"{name}: {printable(f.path[:200])}: not an {fmt.upper()} shared library "
                    "(a runtime archive ships only NVIDIA's libraries)"
                )
    if recorded is not None and recorded != report.summary():
        diffs.append(
            f"{name}: the manifest's imports {recorded.to_json()!r:.200} are not what its "
            f"binaries import ({report.summary().to_json()!r:.200})"
        )
    return diffs


def _runtime_files(dist: Path, rt: RuntimeRef) -> tuple[list[str], list[str]]:
    archive = rt.archive
    if "/" in archive or "\\" in archive or not archive.startswith("cudart-llama-"):
        return [], [f"the manifest's runtime archive {archive!r:.80} is not a runtime archive name"]
    path = dist / archive
    if not path.is_file() or path.is_symlink():
        return [], [f"the CUDA runtime archive it names, {archive}, is missing"]
    got = sha256_file(path)
    if got != rt.sha256:
        return [], [
            f"the CUDA runtime archive {archive} has sha256 {got[:12]}…, the manifest says {rt.sha256[:12]}…"
        ]
    return list(rt.files), []
