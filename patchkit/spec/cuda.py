"""CUDA in a recipe: GPU families -> SM numbers, resolved once when the recipe loads.

Recipes name families (``pascal``) or numbers (``86``, ``"sm_86"``). Each SM is built as
real SASS (``60-real``) and the highest also as PTX (``86-virtual``) so newer GPUs can JIT
it. The [cuda] section owns the CMake defines that say which archs and toolkit to use.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

from patchkit.core.errors import RecipeError
from patchkit.core.record import Record
from patchkit.core.text import did_you_mean

__all__ = [
    "FAMILIES",
    "KNOWN_SMS",
    "NVCC_OBJTEMP_SINCE",
    "CudaArchs",
    "check_cuda_build",
    "family_of",
    "resolve_archs",
    "sm_label",
]

# nvcc names its temporary host file after its pid (it lands in each object's symbols)
# unless --objdir-as-tempdir, which it has since 12.0: older toolkits cannot build the same
# bytes twice
NVCC_OBJTEMP_SINCE = (12, 0)


FAMILIES: Mapping[str, tuple[int, ...]] = {
    "maxwell": (50, 52),
    "pascal": (60, 61),
    "volta": (70,),
    "turing": (75,),
    "ampere": (80, 86),
    "ada": (89,),
    "hopper": (90,),
}

# Every SM some CUDA release compiles (explicit numbers must be one of these).
KNOWN_SMS = frozenset(
    {30, 32, 35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 88, 89, 90, 100, 101, 103, 110, 120, 121}
)
_SM = re.compile(r"^(?:sm_|compute_)?(\d{2,3})$")


def family_of(sm: int) -> str | None:
    return next((f for f, sms in FAMILIES.items() if sm in sms), None)


def sm_label(sm: int) -> str:
    fam = family_of(sm)
    return f"sm_{sm} ({fam})" if fam else f"sm_{sm}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CudaArchs(Record):
    sms: tuple[int, ...]  # sorted, unique: each gets real SASS
    ptx: int  # the SM whose PTX is embedded too (the highest)
    cmake: str  # CMAKE_CUDA_ARCHITECTURES, e.g. "60-real;61-real;75-real;86-real;86-virtual"
    requested: tuple[str, ...]  # what the recipe said, for messages and build-info.json

    @property
    def names(self) -> list[str]:
        return [f"sm_{s}" for s in self.sms]

    def describe(self, sms: Sequence[int] | None = None) -> str:
        return ", ".join(sm_label(s) for s in (self.sms if sms is None else sms))


def resolve_archs(archs: Sequence[str | int], *, source: str = "recipe") -> CudaArchs:
    """cuda.archs -> CudaArchs; RecipeError (with did-you-mean) for names it does not know."""
    sms: set[int] = set()
    for i, raw in enumerate(archs):
        word = str(raw).strip().lower()
        where = f"{source}: cuda.archs[{i}]"
        if word in FAMILIES:
            sms.update(FAMILIES[word])
            continue
        m = _SM.match(word)
        if not m:
            raise RecipeError(
                f"{where}: {raw!r} is not a GPU family or SM number" + did_you_mean(word, FAMILIES),
                hint=f'families: {", ".join(FAMILIES)}; or a number such as 86 or "sm_86"',
            )
        sm = int(m.group(1))
        if sm not in KNOWN_SMS:
            near = did_you_mean(str(sm), [str(s) for s in sorted(KNOWN_SMS)])
            raise RecipeError(
                f"{where}: sm_{sm} is not a CUDA architecture{near}",
                hint=f"known: {', '.join(str(s) for s in sorted(KNOWN_SMS))}",
            )
        sms.add(sm)
    if not sms:
        raise RecipeError(f"{source}: cuda.archs must name at least one GPU family")
    ordered = tuple(sorted(sms))
    top = ordered[-1]
    cmake = ";".join([f"{s}-real" for s in ordered] + [f"{top}-virtual"])
    return CudaArchs(sms=ordered, ptx=top, cmake=cmake, requested=tuple(str(a) for a in archs))


# Defines that the [cuda] section owns: setting them in build.defines is a mistake.
_OWNED = {
    "CMAKE_CUDA_ARCHITECTURES": "set cuda.archs instead",
    "GGML_CUDA_FA_ALL_QUANTS": "set cuda.fa_all_quants instead",
    "CMAKE_CUDA_HOST_COMPILER": "set cuda.host_compiler instead",
    "CUDAToolkit_ROOT": "set cuda.toolkit_root or pass --cuda-root instead",
}


def check_cuda_build(
    label: str,
    *,
    defines: Mapping[str, str],
    has_cuda: bool,
    os_name: str,
    cross_toolchain: bool,
    generator: str,
) -> None:
    """The recipe's build settings against its [cuda] section (or its absence)."""
    if not has_cuda:
        if defines.get("GGML_CUDA", "OFF").upper() in ("ON", "1", "TRUE", "YES"):
            raise RecipeError(
                f"{label}: build.defines.GGML_CUDA is ON but there is no [cuda] section",
                hint='add [cuda] with archs = [...] (e.g. ["ampere"])',
            )
        return
    for key, why in _OWNED.items():
        if key in defines:
            raise RecipeError(f"{label}: build.defines.{key}: {why}")
    if defines.get("GGML_NATIVE", "OFF").upper() in ("ON", "1", "TRUE", "YES"):
        raise RecipeError(
            f"{label}: build.defines.GGML_NATIVE = ON builds for this machine's GPU only (or none)",
            hint="remove it: CUDA recipes always build with GGML_NATIVE=OFF and name their archs",
        )
    if defines.get("GGML_CUDA", "ON").upper() in ("OFF", "0", "FALSE", "NO"):
        raise RecipeError(f"{label}: build.defines.GGML_CUDA = OFF contradicts the [cuda] section")
    if os_name == "windows":
        if cross_toolchain:
            raise RecipeError(
                f"{label}: build.toolchain: CUDA on Windows needs MSVC as nvcc's "
                "host compiler; a cross toolchain (mingw) cannot build it",
                hint="drop build.toolchain; build this recipe on Windows",
            )
        if generator != "Ninja" and not generator.startswith("Visual Studio"):
            raise RecipeError(
                f"{label}: build.generator {generator!r} cannot drive MSVC + nvcc",
                hint='use "Ninja" from a VS developer prompt',
            )
