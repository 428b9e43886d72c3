"""The import check: every library a shipped binary loads is in the release or on any machine.

Each artifact's dynamic imports are read (ELF ``DT_NEEDED`` with its ``RUNPATH``/``RPATH``
through :mod:`patchkit.binary.elf`; PE import and delay-import tables through
:mod:`patchkit.binary.pe_imports`) and
each one must resolve, the way the loader would on a clean machine, to

- a file of the release (``bin/`` of the archive, or of the CUDA runtime archive that is
  unpacked beside it): on Linux only through an ``$ORIGIN``-based ``RUNPATH``/``RPATH``
  entry of the object that needs it (an absolute or empty entry points at the machine
  that built it or the current folder, never at the release) or a library of that name
  the same file set already provides by its ``SONAME`` to a parent; on Windows through the
  application's folder (every executable lives in ``bin/``);
- the documented system set (:data:`LINUX_SYSTEM`, :data:`WINDOWS_SYSTEM`, API sets
  ``api-ms-win-*`` / ``ext-ms-*``);
- the NVIDIA driver (:data:`LINUX_DRIVER`, :data:`WINDOWS_DRIVER`), which no release can
  ship.

Anything else is a problem naming the file and the library. Files are never followed
through links, sizes are capped, and a malformed ELF or PE file is a problem, not a crash.

Every binary of the release is a root, not only the executables: ggml's backend modules
(``libggml-cpu-<variant>.so``, ``libggml-rpc.so``, ``libggml-cuda.so`` with
``GGML_BACKEND_DL``; ``ggml-cpu-<variant>.dll``) are ``dlopen``'d and NEEDED by nothing,
so a module has no parent whose loaded libraries it could reuse: each of its imports must
resolve through its own ``$ORIGIN`` search path (or the system and driver sets), or it is
a problem like an executable's.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO

from patchkit.binary.elf import ElfFormatError, read_dynamic
from patchkit.binary.pe_imports import PeFormatError, read_imports
from patchkit.spec.manifest import ImportSummary

__all__ = [
    "LIBRARY_NAME",
    "LINUX_DRIVER",
    "LINUX_SYSTEM",
    "MAX_BINARY",
    "WINDOWS_DRIVER",
    "WINDOWS_SYSTEM",
    "Binary",
    "ImportReport",
    "Resolution",
    "archive_binaries",
    "check_imports",
    "read_binary",
]

MAX_BINARY = 4 << 30  # a file larger than this is not read (cublasLt64_12.dll is ~0.7 GB)
MAX_IMPORTS = 4096
LIBRARY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")  # `--allow-system` names

# Linux: glibc and GCC's runtime libraries, present on every glibc distribution
# (libgomp: GCC's OpenMP runtime, Debian/Ubuntu package libgomp1, which a minimal
# system may lack: the manifest lists it under `needs.system`).
LINUX_SYSTEM = frozenset(
    {
        "libc.so.6",
        "libm.so.6",
        "libmvec.so.1",
        "libpthread.so.0",
        "libdl.so.2",
        "librt.so.1",
        "libutil.so.1",
        "libresolv.so.2",
        "libstdc++.so.6",
        "libgcc_s.so.1",
        "libgomp.so.1",
        "ld-linux-x86-64.so.2",
        "ld-linux-aarch64.so.1",
        "ld-linux.so.2",
        "ld-linux-armhf.so.3",
        "ld64.so.2",
        "ld-linux-riscv64-lp64d.so.1",
    }
)
# The NVIDIA driver's user-space libraries: installed with the driver, never shipped.
LINUX_DRIVER = frozenset({"libcuda.so.1", "libnvidia-ml.so.1"})
# Windows: DLLs of every supported Windows (10 and later; the universal CRT included).
WINDOWS_SYSTEM = frozenset(
    {
        "kernel32.dll",
        "kernelbase.dll",
        "ntdll.dll",
        "user32.dll",
        "gdi32.dll",
        "advapi32.dll",
        "shell32.dll",
        "shlwapi.dll",
        "ole32.dll",
        "oleaut32.dll",
        "comdlg32.dll",
        "comctl32.dll",
        "ws2_32.dll",
        "wsock32.dll",
        "mswsock.dll",
        "iphlpapi.dll",
        "dnsapi.dll",
        "winhttp.dll",
        "wininet.dll",
        "msvcrt.dll",
        "ucrtbase.dll",
        "bcrypt.dll",
        "ncrypt.dll",
        "crypt32.dll",
        "secur32.dll",
        "rpcrt4.dll",
        "version.dll",
        "winmm.dll",
        "dbghelp.dll",
        "psapi.dll",
        "userenv.dll",
        "setupapi.dll",
        "cfgmgr32.dll",
        "powrprof.dll",
        "imm32.dll",
        "dwmapi.dll",
        "dxgi.dll",
        "d3d11.dll",
        "d3d12.dll",
        "netapi32.dll",
        "normaliz.dll",
        "synchronization.dll",
    }
)
WINDOWS_API_SETS = ("api-ms-win-", "ext-ms-win-", "ext-ms-onecore-")
WINDOWS_DRIVER = frozenset({"nvcuda.dll", "nvml.dll"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Binary:
    """What one file of a release asks of the dynamic loader."""

    path: str  # relative to the release root, posix: "bin/llama-cli"
    format: str  # "elf" | "pe"
    needed: tuple[str, ...]
    rpath: tuple[str, ...] = ()  # ELF DT_RPATH entries as written
    runpath: tuple[str, ...] = ()  # ELF DT_RUNPATH entries as written
    soname: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Resolution:
    file: str  # the importing file (release-relative)
    library: str  # as imported
    where: str  # "bin/libggml.so" (a file of the release) | "system" | "driver" | "" (nowhere)
    why: str = ""  # for where == "": what was looked at


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImportReport:
    binaries: tuple[Binary, ...]
    resolutions: tuple[Resolution, ...]
    problems: tuple[str, ...]  # unreadable files and unresolved imports, one line each
    allowed: tuple[str, ...] = ()  # system libraries allowed beyond the documented set

    @property
    def ok(self) -> bool:
        return not self.problems

    def needs(self, kind: str, of: Iterable[str] | None = None) -> list[str]:
        """The libraries the target machine must provide: kind "system" or "driver"
        (for the importing files ``of`` only, if given)."""
        files = set(of) if of is not None else None
        return sorted(
            {r.library for r in self.resolutions if r.where == kind and (files is None or r.file in files)},
            key=str.lower,
        )

    def summary(self, of: Iterable[str] | None = None) -> ImportSummary:
        """For the manifest: what the machine must provide (for the files ``of``)."""
        files = list(of) if of is not None else None
        return ImportSummary(
            system=tuple(self.needs("system", files)),
            driver=tuple(self.needs("driver", files)),
            allowed_extra=self.allowed,
        )

    def lines(self) -> list[str]:
        """One line per importing file: ``bin/x: libA (bin), libc.so.6 (system), ...``."""
        by_file: dict[str, list[str]] = {}
        for r in self.resolutions:
            label = r.where if r.where in ("system", "driver") else (r.where if r.where else "NOT FOUND")
            by_file.setdefault(r.file, []).append(f"{r.library} ({label})")
        return [f"{f}: {', '.join(libs)}" for f, libs in sorted(by_file.items())]


class _Unreadable(ValueError):
    pass


def _plain_size(path: Path) -> int:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise _Unreadable("is a symbolic link (not followed)")
    if not stat.S_ISREG(st.st_mode):
        raise _Unreadable("is not a regular file")
    if st.st_size > MAX_BINARY:
        raise _Unreadable(f"is larger than {MAX_BINARY >> 30} GiB")
    return st.st_size


def _pe_imports(path: Path) -> tuple[str, ...]:
    try:
        imports = read_imports(path)
    except PeFormatError as e:
        raise _Unreadable(str(e).split(": ", 1)[-1]) from None
    except Exception as e:  # pefile raises many kinds on odd input
        raise _Unreadable(f"not a readable PE file ({str(e)[:160]})") from None
    if imports is None:
        raise _Unreadable("not a readable PE file (no PE header)")
    for name in imports.dlls:
        if not name or any(c in name for c in "/\\:\0\ufffd") or len(name) > 255:
            raise _Unreadable(f"imports a DLL by an odd name {name[:80]!r}")
    return tuple(dict.fromkeys(imports.dlls))


def read_binary(path: Path, rel: str) -> Binary | None:
    """The imports of the file at ``path`` (shown as ``rel``); None when it is neither
    ELF nor PE (a licence text, a model). ValueError (one line) for a file that claims
    to be one but cannot be read, a link, or one over :data:`MAX_BINARY`."""
    try:
        _plain_size(path)
        with path.open("rb") as f:
            head = f.read(4)
        if head[:4] == b"\x7fELF":
            dyn = read_dynamic(path)
            if dyn is None:  # pragma: no cover - the magic was just read
                return None
            if len(dyn.needed) > MAX_IMPORTS:
                raise _Unreadable(f"needs more than {MAX_IMPORTS} libraries")
            return Binary(
                path=rel,
                format="elf",
                needed=dyn.needed,
                rpath=dyn.rpath,
                runpath=dyn.runpath,
                soname=dyn.soname,
            )
        if head[:2] == b"MZ":
            return Binary(path=rel, format="pe", needed=_pe_imports(path))
        return None
    except ElfFormatError as e:
        raise ValueError(f"{rel}: not a readable ELF file ({str(e)[:160]})") from None
    except _Unreadable as e:
        raise ValueError(f"{rel}: {e}") from None
    except OSError as e:
        raise ValueError(f"{rel}: cannot be read ({e.strerror or e})") from None


def _origin_dirs(b: Binary) -> list[str]:
    """The release folders an object's search path names (``$ORIGIN``-based entries only:
    anything else is the builder's machine or the current folder, not the release)."""
    entries = b.runpath if b.runpath else b.rpath
    origin = posixpath.dirname(b.path)
    out: list[str] = []
    for e in entries:
        for token in ("${ORIGIN}", "$ORIGIN"):
            if e == token or e.startswith(token + "/"):
                d = posixpath.normpath(origin + e[len(token) :])
                if not d.startswith("..") and d not in out:
                    out.append(d)
                break
    return out


def _linux_resolve(
    binaries: Sequence[Binary], files: Mapping[str, str], extra: frozenset[str]
) -> list[Resolution]:
    """ELF: each NEEDED through the object's own $ORIGIN search path; else a release file
    whose SONAME is that name and which an object loading this one reaches itself (the
    loader reuses a library already loaded by that name)."""
    direct: dict[tuple[str, str], str] = {}
    for b in binaries:
        for lib in b.needed:
            if "/" in lib:
                continue
            for d in _origin_dirs(b):
                cand = posixpath.join(d, lib)
                if cand in files:
                    direct[(b.path, lib)] = cand
                    break
    # parents: who loads whom through a resolved edge
    parents: dict[str, set[str]] = {}
    for (src, _lib), dst in direct.items():
        parents.setdefault(dst, set()).add(src)

    def loaded_by_ancestors(path: str) -> dict[str, str]:
        """name -> release file, for what the objects that load ``path`` load themselves."""
        seen: set[str] = set()
        todo = list(parents.get(path, ()))
        while todo:
            p = todo.pop()
            if p not in seen:
                seen.add(p)
                todo += parents.get(p, ())
        return {lib: dst for (src, lib), dst in sorted(direct.items()) if src in seen}

    out: list[Resolution] = []
    for b in binaries:
        for lib in b.needed:
            if (b.path, lib) in direct:
                out.append(Resolution(file=b.path, library=lib, where=direct[(b.path, lib)]))
            elif "/" in lib:
                out.append(Resolution(file=b.path, library=lib, where="", why="a path, not a library name"))
            elif lib in LINUX_SYSTEM or lib in extra:
                out.append(Resolution(file=b.path, library=lib, where="system"))
            elif lib in LINUX_DRIVER:
                out.append(Resolution(file=b.path, library=lib, where="driver"))
            elif lib in (inherited := loaded_by_ancestors(b.path)):
                out.append(Resolution(file=b.path, library=lib, where=inherited[lib]))
            else:
                dirs = _origin_dirs(b)
                in_bin = [p for p in files if posixpath.basename(p) == lib]
                if in_bin and not dirs:
                    why = f"{in_bin[0]} is there, but {b.path} has no $ORIGIN RUNPATH to find it"
                elif in_bin:
                    why = f"{in_bin[0]} is not on its $ORIGIN search path ({', '.join(dirs)})"
                else:
                    why = "not in the release and not an allowed system library"
                out.append(Resolution(file=b.path, library=lib, where="", why=why))
    return out


def _windows_resolve(
    binaries: Sequence[Binary], files: Mapping[str, str], extra: frozenset[str]
) -> list[Resolution]:
    """PE: the application's folder (bin/, case-insensitive), then the system set."""
    here = {
        posixpath.basename(p).lower(): p
        for p in files
        if p.startswith("bin/") and "/" not in p[len("bin/") :]
    }
    out: list[Resolution] = []
    for b in binaries:
        for lib in b.needed:
            low = lib.lower()
            if low in here:
                out.append(Resolution(file=b.path, library=lib, where=here[low]))
            elif low in WINDOWS_SYSTEM or low.startswith(WINDOWS_API_SETS) or low in extra:
                out.append(Resolution(file=b.path, library=lib, where="system"))
            elif low in WINDOWS_DRIVER:
                out.append(Resolution(file=b.path, library=lib, where="driver"))
            else:
                out.append(
                    Resolution(
                        file=b.path, library=lib, where="", why="not in bin/ and not a Windows system DLL"
                    )
                )
    return out


def check_imports(
    binaries: Iterable[Binary],
    *,
    os_name: str,
    files: Iterable[str],
    unreadable: Iterable[str] = (),
    allow: Iterable[str] = (),
) -> ImportReport:
    """Resolve every import of ``binaries`` against the release's ``files`` (every file
    path of the unpacked release, the runtime bundle's included) and the allowed sets
    of ``os_name`` ("linux" / "windows"), plus the system libraries in ``allow``
    (``release --allow-system``, recorded in the manifest)."""
    allowed = tuple(sorted(set(allow)))
    extra = frozenset(a.lower() if os_name == "windows" else a for a in allowed)
    bins = tuple(sorted(binaries, key=lambda b: b.path))
    names = {f: f for f in files}
    problems = list(unreadable)
    formats = {b.format for b in bins}
    want = "pe" if os_name == "windows" else "elf"
    for b in bins:
        if b.format != want:
            problems.append(f"{b.path}: a {b.format.upper()} file in a {os_name} release")
    resolve = _windows_resolve if os_name == "windows" else _linux_resolve
    resolutions = resolve([b for b in bins if b.format == want], names, extra) if formats else []
    for r in resolutions:
        if not r.where:
            problems.append(f"{r.file} needs {r.library}: {r.why}")
    return ImportReport(
        binaries=bins, resolutions=tuple(resolutions), problems=tuple(problems), allowed=allowed
    )


def archive_binaries(
    path: Path, root: str, *, members: int = 10_000, seconds: float = 1800.0
) -> tuple[list[Binary], list[str], list[str]]:
    """(binaries, unreadable, every file path) of ``root/bin/`` in a release archive: each
    member is spooled to a temp file as it streams past (one at a time, at most
    :data:`MAX_BINARY`) and read there. Call it on an archive ``read_archive`` has already
    accepted (its bomb limits); ValueError for an archive that cannot be read."""
    import tarfile
    import tempfile
    import time
    import zipfile

    deadline = time.monotonic() + seconds
    binaries: list[Binary] = []
    unreadable: list[str] = []
    files: list[str] = []
    prefix = f"{root}/"

    def take(name: str, size: int, src: IO[bytes], spool: Path) -> None:
        rel = name[len(prefix) :]
        files.append(rel)
        if not rel.startswith("bin/"):
            return
        if size > MAX_BINARY:
            unreadable.append(f"{rel}: is larger than {MAX_BINARY >> 30} GiB")
            return
        with spool.open("wb") as out:
            n = 0
            for chunk in iter(lambda: src.read(1 << 20), b""):
                n += len(chunk)
                if n > size or time.monotonic() > deadline:
                    raise ValueError(f"{rel}: inflates past its size, or reading took too long")
                out.write(chunk)
        try:
            b = read_binary(spool, rel)
        except ValueError as e:
            unreadable.append(str(e))
        else:
            if b is not None:
                binaries.append(b)

    with tempfile.TemporaryDirectory(prefix="patchkit-imports-") as tmp:
        spool = Path(tmp) / "member"
        count = 0
        try:
            if path.name.endswith(".zip"):
                with zipfile.ZipFile(path) as zf:
                    for info in zf.infolist():
                        count += 1
                        if count > members:
                            raise ValueError(f"more than {members} members")
                        if info.is_dir() or not info.filename.startswith(prefix):
                            continue
                        with zf.open(info) as src:
                            take(info.filename, info.file_size, src, spool)
            else:
                with tarfile.open(path, mode="r|gz") as tar:
                    for ti in tar:
                        count += 1
                        if count > members:
                            raise ValueError(f"more than {members} members")
                        if not ti.isreg() or not ti.name.startswith(prefix):
                            continue
                        member = tar.extractfile(ti)
                        if member is not None:
                            take(ti.name, ti.size, member, spool)
        except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as e:
            raise ValueError(f"not a readable archive ({str(e)[:160]})") from None
    return binaries, unreadable, files
