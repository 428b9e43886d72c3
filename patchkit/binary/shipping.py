"""What a build may ship in ``bin/``: the library search policy, checked file by file.

- An ELF file may search only `$ORIGIN`-based folders (its RUNPATH/RPATH: ``elf``); an
  empty entry is the current directory, an absolute one a host folder.
- A PE file may import only DLLs shipped beside it or Windows' system DLLs
  (``pe_imports``): any other is looked for in the current directory before PATH. NVIDIA's
  runtime DLLs are the exception a CUDA build cannot avoid: they are not shipped, so they
  are a warning, not a refusal.
- A file whose dynamic section or import table cannot be read is refused.

Every file of ``bin/`` is read, whether anything NEEDs it or not: a backend module that
libggml ``dlopen``s (a CPU variant, ``ggml-rpc``, ``ggml-cuda``) is held to the same rules.

:func:`shipping_findings` reads a staged ``bin/`` and returns what it found, in file
order, ending at the first refusal; the caller decides what a refusal is (the build
raises its BuildError, exit 6).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from patchkit.binary.elf import ElfFormatError, read_dynamic, rpath_problems
from patchkit.binary.pe_imports import (
    NVIDIA_RUNTIME_PREFIXES,
    PeFormatError,
    read_imports,
    unshipped_imports,
)

__all__ = ["ShippingFinding", "shipping_findings"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShippingFinding:
    """One thing found in ``bin/``: a refusal (``refused``) or a warning."""

    file: str  # the file's name in bin/
    message: str  # one line, naming the file and the entry
    hint: str = ""
    refused: bool = True


def shipping_findings(bin_dir: Path) -> tuple[ShippingFinding, ...]:
    """The warnings and the first refusal for the files in ``bin_dir``, in name order;
    nothing after a refusal is read (empty: every file may ship as it is)."""
    files = sorted(bin_dir.iterdir())
    out: list[ShippingFinding] = []
    for f in files:
        try:
            dyn = read_dynamic(f)
            imports = read_imports(f) if dyn is None else None
        except (ElfFormatError, PeFormatError, OSError) as e:
            out.append(
                ShippingFinding(
                    file=f.name, message=f"bin/{f.name}: cannot read its dynamic section or imports: {e}"
                )
            )
            return tuple(out)
        problems = rpath_problems(dyn) if dyn is not None else ()
        if problems:
            out.append(
                ShippingFinding(
                    file=f.name,
                    message=f"bin/{f.name}: {problems[0].describe()}; "
                    "shipped binaries may only search $ORIGIN",
                    hint="a recipe define (CMAKE_INSTALL_RPATH, CMAKE_BUILD_RPATH, "
                    "linker flags) put it there: remove it and build again",
                )
            )
            return tuple(out)
        missing = unshipped_imports(imports, (g.name for g in files)) if imports else ()
        nvidia = [d for d in missing if d.lower().startswith(NVIDIA_RUNTIME_PREFIXES)]
        out += [
            ShippingFinding(
                file=f.name,
                message=f"bin/{f.name} imports {d} (NVIDIA's runtime, not shipped): copy it "
                "next to the exe, or Windows looks for it in the current directory before PATH",
                refused=False,
            )
            for d in nvidia
        ]
        others = [d for d in missing if d not in nvidia]
        if others:
            out.append(
                ShippingFinding(
                    file=f.name,
                    message=f"bin/{f.name} imports {others[0]}, which is neither shipped in bin/ nor a "
                    "Windows system DLL: Windows would look for it in the current directory",
                    hint="link it statically (the mingw toolchain's -static) or build it as "
                    "part of the recipe's targets",
                )
            )
            return tuple(out)
    return tuple(out)
