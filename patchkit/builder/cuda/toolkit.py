"""Finding a CUDA toolkit and what it can do: nvcc, its version, cuBLAS, libcuda, cuobjdump.

Search order for nvcc (first hit wins; an explicit place that lacks nvcc is an error,
never silently skipped): ``--cuda-root``, the recipe's ``cuda.toolkit_root``,
``CUDAToolkit_ROOT``, ``CUDA_PATH``, ``CUDA_HOME``, ``nvcc`` on ``PATH``, then the usual
install folders. The toolkit root is the folder nvcc itself reports (``_HERE_``), so
wrapper scripts and symlinks on PATH resolve to the real toolkit.

``TOOLKIT_LIMITS`` is what each CUDA release can compile and which host compilers it
accepts (from NVIDIA's release notes and each toolkit's ``crt/host_config.h``). When
nvcc can say it (``--list-gpu-code``, CUDA 11+), its own answer wins over the table.

Every process runs through a ``Runner`` so tests can replay real outputs.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import site
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from patchkit.builder.problems import NoCudaToolkit
from patchkit.core.errors import ToolMissing
from patchkit.core.proc import run

__all__ = [
    "TOOLKIT_LIMITS",
    "Cublas",
    "CudaToolkit",
    "HostCompiler",
    "Runner",
    "ToolkitLimits",
    "default_runner",
    "find_cublas",
    "find_cuobjdump",
    "find_libcuda",
    "find_toolkit",
    "limits_for",
    "parse_gpu_codes",
    "parse_host_compiler",
    "parse_nvcc_root",
    "parse_nvcc_version",
    "site_dirs",
]

Runner = Callable[[Sequence[str]], tuple[int, str]]
"""Runs an argument list, returns (exit code, stdout + stderr). Raises OSError if it cannot start."""


def default_runner(args: Sequence[str]) -> tuple[int, str]:
    r = run(args, timeout=120, merge_stderr=True)
    if r.returncode is None:
        raise OSError(f"{args[0]} did not answer within 120s")
    return r.returncode, r.stdout


# ---------------------------------------------------------------------------------------
# What each release can do

_CUDA10 = frozenset({30, 32, 35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75})
_CUDA11 = (_CUDA10 - {30, 32}) | {80}
_CUDA12 = frozenset({50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90})
_CUDA13 = frozenset({75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121})


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToolkitLimits:
    version: tuple[int, int]
    sms: frozenset[int]  # real and virtual archs it compiles
    gcc_max: int  # newest gcc major nvcc accepts as host compiler (enforced)
    clang_max: int  # newest clang major it supports (advisory: said, not enforced)


def _limits(v: tuple[int, int], sms: frozenset[int], gcc: int, clang: int) -> ToolkitLimits:
    return ToolkitLimits(version=v, sms=sms, gcc_max=gcc, clang_max=clang)


TOOLKIT_LIMITS: tuple[ToolkitLimits, ...] = (
    _limits((10, 0), _CUDA10, 7, 6),
    _limits((10, 1), _CUDA10, 8, 8),
    _limits((10, 2), _CUDA10, 8, 8),
    _limits((11, 0), _CUDA11, 9, 9),
    _limits((11, 1), _CUDA11 | {86}, 10, 10),
    _limits((11, 2), _CUDA11 | {86}, 10, 11),
    _limits((11, 3), _CUDA11 | {86}, 10, 11),
    _limits((11, 4), _CUDA11 | {86, 87}, 11, 12),
    _limits((11, 5), _CUDA11 | {86, 87}, 11, 12),
    _limits((11, 6), _CUDA11 | {86, 87}, 11, 13),
    _limits((11, 7), _CUDA11 | {86, 87}, 11, 13),
    _limits((11, 8), _CUDA11 | {86, 87, 89, 90}, 11, 14),
    _limits((12, 0), _CUDA12, 12, 14),
    _limits((12, 1), _CUDA12, 12, 15),
    _limits((12, 2), _CUDA12, 12, 15),
    _limits((12, 3), _CUDA12, 12, 16),
    _limits((12, 4), _CUDA12, 13, 17),
    _limits((12, 5), _CUDA12, 13, 17),
    _limits((12, 6), _CUDA12, 13, 18),
    _limits((12, 8), _CUDA12 | {100, 101, 120}, 14, 19),
    _limits((12, 9), _CUDA12 | {100, 101, 103, 120, 121}, 14, 20),
    _limits((13, 0), _CUDA13, 15, 20),
)


def limits_for(version: Sequence[int]) -> ToolkitLimits | None:
    """The table row for a toolkit version: the newest known row not newer than it.

    None when the version is older than every row (CUDA < 10). A version newer than the
    table's last row gets that row (callers say the toolkit is newer than patchkit knows).
    """
    key = (version[0], version[1])
    best = None
    for row in TOOLKIT_LIMITS:
        if row.version <= key and (row.version[0] == key[0] or row is TOOLKIT_LIMITS[-1]):
            best = row
    return best


# ---------------------------------------------------------------------------------------
# Parsing tool outputs

_NVCC_RELEASE = re.compile(r"release (\d+)\.(\d+), V(\d+)\.(\d+)\.(\d+)")


def parse_nvcc_version(text: str) -> tuple[int, int, int]:
    """``nvcc --version`` -> (major, minor, patch); ValueError if it is not there."""
    m = _NVCC_RELEASE.search(text)
    if not m:
        m2 = re.search(r"release (\d+)\.(\d+)", text)
        if not m2:
            raise ValueError("no `release X.Y` line in nvcc --version output")
        return int(m2.group(1)), int(m2.group(2)), 0
    return int(m.group(3)), int(m.group(4)), int(m.group(5))


def parse_nvcc_root(text: str) -> Path | None:
    """The toolkit root from ``nvcc --dryrun`` output (``#$ _HERE_=<root>/bin``)."""
    m = re.search(r"^#\$ _HERE_=(.+?)\s*$", text, re.MULTILINE)
    return Path(m.group(1)).parent if m else None


def parse_gpu_codes(text: str) -> frozenset[int] | None:
    """``nvcc --list-gpu-code`` -> the SM numbers (``sm_120a`` counts as 120)."""
    sms = {int(m.group(1)) for m in re.finditer(r"^sm_(\d+)[a-z]?\s*$", text, re.MULTILINE)}
    return frozenset(sms) or None


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostCompiler:
    """The C++ compiler nvcc hands host code to."""

    command: str  # as given (g++, g++-11, /opt/gcc/bin/g++, cl)
    path: Path | None  # None: not found
    kind: str = "unknown"  # gcc, clang, msvc, unknown
    version: tuple[int, ...] | None = None
    source: str = "default"  # recipe, CUDAHOSTCXX, default, auto
    explicit: bool = False  # True: patchkit passes CMAKE_CUDA_HOST_COMPILER

    @property
    def version_str(self) -> str:
        return ".".join(map(str, self.version)) if self.version else "?"

    def describe(self) -> str:
        where = str(self.path) if self.path else f"{self.command} (not found)"
        return f"{self.kind} {self.version_str} ({where})"


def parse_host_compiler(text: str) -> tuple[str, tuple[int, ...] | None]:
    """``<cxx> --version`` (or cl's banner) -> (kind, version)."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    m = re.search(r"Compiler Version (\d+)\.(\d+)\.(\d+)", text)
    if m:  # MSVC: version 19.38.33130 -> _MSC_VER 1938
        return "msvc", tuple(int(g) for g in m.groups())
    m = re.search(r"clang version (\d+)\.(\d+)\.(\d+)", text)
    if m:
        return "clang", tuple(int(g) for g in m.groups())
    if "Free Software Foundation" in text or "(GCC)" in first or re.search(r"g\+\+|gcc", first):
        nums = re.findall(r"\b(\d+)\.(\d+)(?:\.(\d+))?\b", first)
        if nums:
            major, minor, patch = nums[-1]
            return "gcc", (int(major), int(minor), int(patch or 0))
        return "gcc", None
    return "unknown", None


# ---------------------------------------------------------------------------------------
# Libraries next to the toolkit or in pip wheels


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cublas:
    library: Path
    lt_library: Path
    include_dir: Path
    source: str  # "toolkit" or "wheel"


def site_dirs() -> list[Path]:
    """Folders pip installs into (where NVIDIA wheels put ``nvidia/...``)."""
    dirs: list[Path] = []
    cands = [*getattr(site, "getsitepackages", lambda: [])(), site.getusersitepackages(), *sys.path]
    for d in cands:
        p = Path(d)
        if p.is_dir() and (p / "nvidia").is_dir() and p not in dirs:
            dirs.append(p)
    return dirs


def _lib_dirs(root: Path) -> list[Path]:
    return [root / "lib64", root / "lib", *sorted(root.glob("targets/*/lib")), root / "lib" / "x64"]


def _first(paths: Sequence[Path]) -> Path | None:
    return next((p for p in paths if p.is_file()), None)


def find_cublas(root: Path, major: int, sites: Sequence[Path], *, windows: bool) -> Cublas | None:
    """cuBLAS in the toolkit, else in the nvidia-cublas wheel for the same major version."""
    incs = [root / "include", *sorted(root.glob("targets/*/include"))]
    inc = next((d for d in incs if (d / "cublas_v2.h").is_file()), None)
    for d in _lib_dirs(root):
        names = ("cublas.lib", "cublasLt.lib") if windows else ("libcublas.so", "libcublasLt.so")
        lib, lt = d / names[0], d / names[1]
        if lib.is_file() and lt.is_file() and inc is not None:
            return Cublas(library=lib, lt_library=lt, include_dir=inc, source="toolkit")
    if windows:
        return None  # the Windows wheels ship DLLs only; use the toolkit's cuBLAS there
    # wheel layouts: nvidia/cu13/{lib,include} (CUDA 13), nvidia/cublas/{lib,include} (cu12)
    for sp in sites:
        for base in (sp / "nvidia" / f"cu{major}", sp / "nvidia" / "cublas"):
            wlib = _first([base / "lib" / f"libcublas.so.{major}", base / "lib" / "libcublas.so"])
            wlt = _first([base / "lib" / f"libcublasLt.so.{major}", base / "lib" / "libcublasLt.so"])
            if wlib and wlt and (base / "include" / "cublas_v2.h").is_file():
                return Cublas(library=wlib, lt_library=wlt, include_dir=base / "include", source="wheel")
    return None


_DRIVER_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib", "/usr/lib")


def find_libcuda(root: Path, *, windows: bool) -> tuple[Path | None, str | None]:
    """The library CMake's ``CUDA::cuda_driver`` links: the toolkit's stub or the driver's."""
    if windows:
        lib = _first([root / "lib" / "x64" / "cuda.lib"])
        return (lib, "stub") if lib else (None, None)
    stub = _first([d / "stubs" / "libcuda.so" for d in _lib_dirs(root)])
    if stub:
        return stub, "stub"
    drv = _first([Path(d) / "libcuda.so" for d in _DRIVER_DIRS])
    return (drv, "driver") if drv else (None, None)


def _exe(name: str, windows: bool) -> str:
    return f"{name}.exe" if windows else name


def find_cuobjdump(
    root: Path | None,
    env: Mapping[str, str],
    sites: Sequence[Path],
    *,
    windows: bool = sys.platform == "win32",
) -> Path | None:
    """cuobjdump: the toolkit's bin, PATH, then the nvidia-cuda-cuobjdump wheel."""
    name = _exe("cuobjdump", windows)
    if root is not None and (root / "bin" / name).is_file():
        return root / "bin" / name
    hit = shutil.which("cuobjdump", path=env.get("PATH", ""))
    if hit:
        return Path(hit)
    for sp in sites:  # cu13: nvidia/cu13/bin; cu12: nvidia/cuda_cuobjdump/bin
        for cand in sorted((sp / "nvidia").glob(f"*/bin/{name}"), reverse=True):
            if cand.is_file():
                return cand
    return None


# ---------------------------------------------------------------------------------------
# The toolkit


@dataclasses.dataclass(frozen=True, kw_only=True)
class CudaToolkit:
    root: Path
    nvcc: Path
    version: tuple[int, int, int]
    source: str  # where it was found: --cuda-root, cuda.toolkit_root, CUDA_PATH, PATH, ...
    gpu_codes: frozenset[int] | None  # from nvcc --list-gpu-code; None if it cannot say
    cublas: Cublas | None
    libcuda: Path | None
    libcuda_kind: str | None  # "stub", "driver" or None
    cuobjdump: Path | None
    host: HostCompiler
    windows: bool = False

    @property
    def version_str(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"

    @property
    def has_cublas(self) -> bool:
        return self.cublas is not None

    @property
    def has_libcuda_stub(self) -> bool:
        """True when CUDA::cuda_driver can link (a stub, or the driver's libcuda.so)."""
        return self.libcuda is not None

    @property
    def limits(self) -> ToolkitLimits | None:
        return limits_for(self.version)

    @property
    def sms(self) -> frozenset[int]:
        """What this nvcc compiles: its own list when it gave one, else the table's."""
        if self.gpu_codes is not None:
            return self.gpu_codes
        lim = self.limits
        return lim.sms if lim else frozenset()

    def describe(self) -> str:
        return f"CUDA {self.version_str} ({self.root})"


def _candidates(
    spec_root: str | None, cuda_root: Path | None, env: Mapping[str, str]
) -> list[tuple[str, Path]]:
    out: list[tuple[str, Path]] = []
    if cuda_root is not None:
        out.append(("--cuda-root", Path(cuda_root)))
    if spec_root:
        out.append(("cuda.toolkit_root", Path(spec_root)))
    for var in ("CUDAToolkit_ROOT", "CUDA_PATH", "CUDA_HOME"):
        if env.get(var):
            out.append((var, Path(env[var])))
    return out


def _default_roots(windows: bool, env: Mapping[str, str]) -> list[Path]:
    if windows:
        program_files = env.get("ProgramFiles", r"C:\Program Files")
        base = Path(program_files) / "NVIDIA GPU Computing Toolkit" / "CUDA"
        return sorted(base.glob("v*"), reverse=True)
    return [Path("/usr/local/cuda"), *sorted(Path("/usr/local").glob("cuda-*"), reverse=True)]


def find_nvcc(
    spec_root: str | None,
    cuda_root: Path | None,
    env: Mapping[str, str],
    *,
    windows: bool,
    default_roots: Sequence[Path] | None = None,
) -> tuple[Path, str]:
    """(nvcc path, where it came from), or ToolMissing naming what was searched."""
    name = _exe("nvcc", windows)
    for source, root in _candidates(spec_root, cuda_root, env):
        root = root.expanduser()
        nvcc = root / "bin" / name
        if not nvcc.is_file():
            raise ToolMissing(
                f"{source} points at {root}, which has no bin/{name}",
                hint="point it at a CUDA toolkit folder (the one holding bin/nvcc)",
            )
        return nvcc, source
    hit = shutil.which("nvcc", path=env.get("PATH", ""))
    if hit:
        return Path(hit), "PATH"
    for root in _default_roots(windows, env) if default_roots is None else default_roots:
        if (root / "bin" / name).is_file():
            return root / "bin" / name, "default location"
    raise ToolMissing(problem=NoCudaToolkit())


def _probe_host(
    command: str, source: str, explicit: bool, env: Mapping[str, str], run: Runner
) -> HostCompiler:
    hit = shutil.which(command, path=env.get("PATH", ""))
    if not hit:
        return HostCompiler(command=command, path=None, source=source, explicit=explicit)
    try:
        _, out = run([hit] if Path(hit).stem.lower() == "cl" else [hit, "--version"])
    except OSError:
        out = ""
    kind, version = parse_host_compiler(out)
    return HostCompiler(
        command=command, path=Path(hit), kind=kind, version=version, source=source, explicit=explicit
    )


def _pick_host(
    host_compiler: str | None,
    version: tuple[int, int, int],
    env: Mapping[str, str],
    run: Runner,
    windows: bool,
) -> HostCompiler:
    if host_compiler:
        return _probe_host(host_compiler, "recipe", True, env, run)
    if env.get("CUDAHOSTCXX"):
        return _probe_host(env["CUDAHOSTCXX"], "CUDAHOSTCXX", True, env, run)
    if windows:
        return _probe_host("cl", "default", False, env, run)
    host = _probe_host("g++", "default", False, env, run)
    lim = limits_for(version)
    if lim and host.kind == "gcc" and host.version and host.version[0] > lim.gcc_max:
        # the default g++ is too new for this toolkit: use an older g++-N when one is installed
        for n in range(lim.gcc_max, lim.gcc_max - 6, -1):
            alt = _probe_host(f"g++-{n}", "auto", True, env, run)
            if alt.path and alt.kind == "gcc" and alt.version and alt.version[0] <= lim.gcc_max:
                return alt
    return host


def find_toolkit(
    spec: object | None,
    cuda_root: Path | None,
    env: Mapping[str, str],
    *,
    run: Runner = default_runner,
    sites: Sequence[Path] | None = None,
    windows: bool = sys.platform == "win32",
    default_roots: Sequence[Path] | None = None,
) -> CudaToolkit:
    """Locate and probe the toolkit a recipe's [cuda] section (a CudaSpec, or None) asks for.

    ``default_roots``: install folders tried last (default: /usr/local/cuda*, or
    ``%ProgramFiles%/NVIDIA GPU Computing Toolkit/CUDA/v*``).
    """
    spec_root = getattr(spec, "toolkit_root", None)
    host_cmd = getattr(spec, "host_compiler", None)
    nvcc, source = find_nvcc(spec_root, cuda_root, env, windows=windows, default_roots=default_roots)
    try:
        rc, out = run([str(nvcc), "--version"])
    except OSError as e:
        raise ToolMissing(f"cannot run {nvcc}: {e}") from None
    try:
        version = parse_nvcc_version(out)
    except ValueError:
        raise ToolMissing(
            f"{nvcc} --version printed no CUDA release (exit {rc})", detail=out.strip()[-2000:]
        ) from None
    root = nvcc.resolve().parent.parent
    try:
        _, dry = run([str(nvcc), "--dryrun", "-x", "cu", "-E", os.devnull])
        root = parse_nvcc_root(dry) or root
    except OSError:
        pass
    gpu_codes = None
    if version >= (11, 0, 0):
        try:
            rc, codes = run([str(nvcc), "--list-gpu-code"])
            gpu_codes = parse_gpu_codes(codes) if rc == 0 else None
        except OSError:
            pass
    sites = site_dirs() if sites is None else list(sites)
    libcuda, libcuda_kind = find_libcuda(root, windows=windows)
    return CudaToolkit(
        root=root,
        nvcc=nvcc,
        version=version,
        source=source,
        gpu_codes=gpu_codes,
        cublas=find_cublas(root, version[0], sites, windows=windows),
        libcuda=libcuda,
        libcuda_kind=libcuda_kind,
        cuobjdump=find_cuobjdump(root, env, sites, windows=windows),
        host=_pick_host(host_cmd, version, env, run, windows),
        windows=windows,
    )
