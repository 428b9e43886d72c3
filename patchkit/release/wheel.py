"""Reading a wheel that comes from outside: NVIDIA's runtime wheels for ``release``.

A wheel is a zip from the network (or a folder the user names), so it is read as hostile:
one regular file opened once (never through a link, never a FIFO or device), at most
:class:`WheelLimits` members, no member name that leaves its folder, one ``.dist-info``
that names the distribution and version the file name says, and every member taken out
checked against the wheel's own ``RECORD`` sha256 while it is copied, within a size and
time budget (a 4 MB wheel may not make gigabytes). ``release.bundle`` decides what to take.
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import errno
import hashlib
import io
import os
import re
import stat
import time
import zipfile
import zlib
from pathlib import Path
from typing import BinaryIO

from patchkit.core.errors import ReleaseError
from patchkit.core.fs import sha256_stream
from patchkit.core.text import printable
from patchkit.release.archive import unsafe_member_name

__all__ = [
    "DEFAULT_WHEEL_LIMITS",
    "WHEEL_NAME",
    "Budget",
    "Wheel",
    "WheelLimits",
    "normalize",
    "open_wheel",
]

WHEEL_NAME = re.compile(
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


DEFAULT_WHEEL_LIMITS = WheelLimits()


def normalize(dist: str) -> str:
    """A distribution name as wheels compare it (``nvidia-cublas-cu12`` -> ``nvidia_cublas_cu12``)."""
    return re.sub(r"[-_.]+", "_", dist).lower()


@dataclasses.dataclass(kw_only=True)
class Budget:
    """What may still be taken out of a run's wheels: bytes in all, and until when."""

    limits: WheelLimits
    deadline: float
    taken: int = 0

    @classmethod
    def start(cls, limits: WheelLimits) -> Budget:
        return cls(limits=limits, deadline=time.monotonic() + limits.seconds)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Wheel:
    """A wheel opened for reading (:func:`open_wheel`; :meth:`close` it): what its file name
    and its metadata say, and its ``RECORD`` (member -> sha256 hex)."""

    path: Path
    dist: str
    version: str
    sha256: str
    size: int
    dist_info: str
    record: dict[str, str]
    zip: zipfile.ZipFile

    def members(self) -> list[zipfile.ZipInfo]:
        return self.zip.infolist()

    def licence(self) -> zipfile.ZipInfo:
        """The licence file in its ``.dist-info`` (NVIDIA's licence ships with its libraries)."""
        pattern = rf"^{re.escape(self.dist_info)}/(?:licenses/)?(?:License|LICENSE)(?:\.txt|\.md)?$"
        lic = next((i for i in self.members() if re.match(pattern, i.filename)), None)
        if lic is None:
            raise ReleaseError(
                f"{self.path.name}: has no licence file in {self.dist_info}/: "
                "NVIDIA's licence must ship with its libraries"
            )
        return lic

    def extract(self, info: zipfile.ZipInfo, dest: Path, budget: Budget) -> str:
        """Copy member ``info`` to ``dest``, checked against RECORD as it is copied: its sha256."""
        return _extract(self.zip, info, dest, self.record.get(info.filename), budget, self.path.name)

    def close(self) -> None:
        _close(self.zip)


def open_wheel(path: Path, limits: WheelLimits) -> Wheel:
    """``path`` opened as a wheel, its name, members and metadata checked (ReleaseError)."""
    m = WHEEL_NAME.match(path.name)
    if not m:
        raise ReleaseError(f"{path.name}: not a wheel file name")
    zf, digest, size = _open_wheel(path, limits)
    try:
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
            raise ReleaseError(f"{path.name}: has {len(infos)} .dist-info folders ({shown}): not one wheel")
        dist_info = infos[0]
        _check_dist_info(path.name, dist_info, m.group("dist"), m.group("version"))
        record = _record(zf, dist_info, limits, path.name)
    except BaseException:
        _close(zf)
        raise
    return Wheel(
        path=path,
        dist=m.group("dist"),
        version=m.group("version"),
        sha256=digest,
        size=size,
        dist_info=dist_info,
        record=record,
        zip=zf,
    )


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
    budget: Budget,
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
    if info.file_size > budget.limits.member:
        raise ReleaseError(
            f"{label}: {name} declares {info.file_size} bytes, more than the "
            f"{budget.limits.member / (1 << 30):g} GiB a file of a wheel may be (a bomb?)"
        )
    if budget.taken + info.file_size > budget.limits.total:
        raise ReleaseError(
            f"{label}: {name} ({info.file_size} bytes) takes what is taken out of the wheels "
            f"past {budget.limits.total / (1 << 30):g} GiB (a bomb?)"
        )
    h = hashlib.sha256()
    n = 0
    try:
        with zf.open(info) as src, dest.open("wb") as out:
            for chunk in iter(lambda: src.read(1 << 20), b""):
                n += len(chunk)
                budget.taken += len(chunk)
                if n > info.file_size:
                    raise ReleaseError(
                        f"{label}: {name} inflates past its declared {info.file_size} bytes (a bomb?)"
                    )
                if time.monotonic() > budget.deadline:
                    raise ReleaseError(f"{label}: reading it took more than {budget.limits.seconds:.0f}s")
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


def _check_dist_info(label: str, dist_info: str, dist: str, version: str) -> None:
    """The wheel's ``.dist-info`` names the distribution and version its file name says
    (what the manifest records, and what was chosen by): else it is another package."""
    m = _DIST_INFO.match(dist_info)
    if m is None or normalize(m.group("dist")) != normalize(dist) or m.group("version") != version:
        raise ReleaseError(
            f"{label}: its metadata folder {printable(dist_info[:120])!r} is not "
            f"{normalize(dist)}-{version}.dist-info: the file name does not say what it holds",
            hint="use the wheel as NVIDIA publishes it (pip download)",
        )
