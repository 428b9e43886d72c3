"""Which DLLs a Windows executable or DLL imports, and which of them Windows would look
for outside the folder it ships in and the system folders.

Windows' DLL search order for a desktop application (SafeDllSearchMode, on by default):
the application's folder, the system folder (System32), the 16-bit system folder, the
Windows folder, **the current directory**, then PATH. A DLL that is neither shipped next
to the exe nor a system DLL is therefore looked for in the current directory before PATH:
one planted there would be loaded. `unshipped_imports` names those.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Iterable
from pathlib import Path

import pefile

__all__ = [
    "MAX_IMPORTS",
    "NVIDIA_RUNTIME_PREFIXES",
    "PE_MAX",
    "PeFormatError",
    "PeImports",
    "read_imports",
    "unshipped_imports",
]

PE_MAX = 4 << 30  # a PE image cannot be larger (its sizes are 32-bit)
MAX_IMPORTS = 4096

# DLLs every Windows has in System32 (searched before the current directory), lower case
SYSTEM_DLLS = frozenset(
    (
        "advapi32",
        "bcrypt",
        "cfgmgr32",
        "comctl32",
        "comdlg32",
        "crypt32",
        "d3d11",
        "d3d12",
        "dbghelp",
        "dnsapi",
        "dwmapi",
        "dxgi",
        "gdi32",
        "imm32",
        "iphlpapi",
        "kernel32",
        "kernelbase",
        "msvcrt",
        "mswsock",
        "ncrypt",
        "normaliz",
        "ntdll",
        "ole32",
        "oleaut32",
        "opengl32",
        "powrprof",
        "psapi",
        "rpcrt4",
        "secur32",
        "setupapi",
        "shell32",
        "shlwapi",
        "ucrtbase",
        "user32",
        "userenv",
        "uxtheme",
        "version",
        "winhttp",
        "wininet",
        "winmm",
        "ws2_32",
        "wsock32",
        "nvcuda",
        "nvml",
        "msvcp140",
        "msvcp140_1",
        "msvcp140_2",
        "vcruntime140",
        "vcruntime140_1",
        "vcomp140",
    )
)
# installed by the CUDA toolkit (its bin/ on PATH), never into System32
NVIDIA_RUNTIME_PREFIXES = ("cudart64_", "cublas64_", "cublaslt64_", "nvrtc64_", "nvjitlink_")


class PeFormatError(ValueError):
    """The file starts like a PE (MZ) but its import table cannot be read."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PeImports:
    dlls: tuple[str, ...]  # as written in the import (and delay-import) tables


def _is_system(name: str) -> bool:
    low = name.lower()
    stem = low[:-4] if low.endswith(".dll") else low
    return stem in SYSTEM_DLLS or low.startswith(("api-ms-win-", "ext-ms-win-"))


def read_imports(path: Path) -> PeImports | None:
    """The DLLs a PE file imports, or None for a file that is not PE (no MZ/PE header).
    A symbolic link or anything but a regular file is a PeFormatError (never followed)."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise PeFormatError(f"{path.name}: not a regular file")
    if st.st_size > PE_MAX:
        raise PeFormatError(f"{path.name}: larger than a PE image can be")
    with path.open("rb") as f:
        if f.read(2) != b"MZ":
            return None
    try:
        pe = pefile.PE(str(path), fast_load=True)
    except pefile.PEFormatError as e:
        raise PeFormatError(f"{path.name}: not a readable PE file ({e})") from None
    try:
        pe.parse_data_directories(
            directories=[
                pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"],
                pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_DELAY_IMPORT"],
            ]
        )
        names: list[str] = []
        for attr in ("DIRECTORY_ENTRY_IMPORT", "DIRECTORY_ENTRY_DELAY_IMPORT"):
            for entry in getattr(pe, attr, ()):
                raw = entry.dll
                names.append(raw.decode("ascii", "replace") if isinstance(raw, bytes) else str(raw))
                if len(names) > MAX_IMPORTS:
                    raise PeFormatError(f"{path.name}: more than {MAX_IMPORTS} imported DLLs")
    except pefile.PEFormatError as e:
        raise PeFormatError(f"{path.name}: its import table cannot be read ({e})") from None
    finally:
        pe.close()
    return PeImports(dlls=tuple(names))


def unshipped_imports(imports: PeImports, shipped: Iterable[str]) -> tuple[str, ...]:
    """The imported DLLs that are neither in ``shipped`` (the names in bin/, compared
    without case, as Windows does) nor system DLLs: Windows looks for those in the
    current directory (before PATH)."""
    here = {n.lower() for n in shipped}
    return tuple(d for d in imports.dlls if d.lower() not in here and not _is_system(d))
