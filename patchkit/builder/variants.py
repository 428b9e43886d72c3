"""ggml's CPU backend as loadable variants: the defines, the chosen targets, the check.

A recipe with ``[build] cpu_variants`` is configured with ``GGML_BACKEND_DL=ON`` and
``GGML_CPU_ALL_VARIANTS=ON`` (``GGML_NATIVE=OFF``, shared libraries): every backend
(``ggml-cpu-<variant>``, ``ggml-rpc``, ``ggml-cuda``) becomes a CMake ``MODULE`` that
libggml loads with dlopen from the executables' folder, and no tool links ``ggml-cpu``.

Upstream adds every variant it knows and makes ``ggml`` depend on each
(``add_dependencies`` in ``ggml_add_backend_library``), so building any tool builds them
all, and one the compiler cannot build (GCC 10 and ``alderlake``'s ``-mavxvnni``) fails
the build. A recipe's list is therefore applied at configure time: a CMake file included
at ``project(ggml)`` (``CMAKE_PROJECT_ggml_INCLUDE``) watches ``GGML_CPU_TAG_NAME``,
which upstream's ``ggml_add_cpu_backend_variant`` sets right before it calls
``ggml_add_cpu_backend_variant_impl``, and at its first write wraps that function so that
a tag not in ``PATCHKIT_CPU_VARIANTS`` is skipped. The chosen variants are then the only
ones that exist as targets; :func:`check_variants` proves each is there after the
configure (a name the pin does not define is a recipe error, exit 3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from patchkit.builder import cmake as cm
from patchkit.core.errors import BuildError, RecipeError
from patchkit.core.fs import atomic_write_text, sha256_bytes
from patchkit.spec import cpuvariants
from patchkit.spec.buildinfo import CpuModelRecord, CpuVariantRecord, CpuVariantsRecord
from patchkit.spec.recipe import Recipe

__all__ = [
    "INCLUDE_ID",
    "VARIANTS_CMAKE",
    "build_targets",
    "check_variants",
    "configure_defines",
    "include_define",
    "variant_defines",
    "variants_record",
]

VARIANTS_CMAKE = """\
# written by patchkit (builder/variants.py): build only the CPU variants in
# PATCHKIT_CPU_VARIANTS of those ggml_add_cpu_backend_variant adds
function(_patchkit_cpu_variant_watch variable access value)
  if(NOT access STREQUAL "MODIFIED_ACCESS")
    return()
  endif()
  get_property(wrapped GLOBAL PROPERTY _PATCHKIT_CPU_VARIANTS_WRAPPED)
  if(wrapped)
    return()
  endif()
  set_property(GLOBAL PROPERTY _PATCHKIT_CPU_VARIANTS_WRAPPED TRUE)
  function(ggml_add_cpu_backend_variant_impl tag_name)
    if(tag_name STREQUAL "" OR tag_name IN_LIST PATCHKIT_CPU_VARIANTS)
      _ggml_add_cpu_backend_variant_impl(${tag_name})
    else()
      message(STATUS "patchkit: CPU variant ${tag_name} not chosen (build.cpu_variants)")
    endif()
  endfunction()
endfunction()
if(PATCHKIT_CPU_VARIANTS)
  variable_watch(GGML_CPU_TAG_NAME _patchkit_cpu_variant_watch)
endif()
"""
INCLUDE_ID = sha256_bytes(VARIANTS_CMAKE.encode())[:16]
_INCLUDE_FILE = "patchkit-cpu-variants.cmake"


def variant_defines(recipe: Recipe) -> dict[str, str]:
    """The defines loadable variants need (recorded in build-info): empty without any."""
    names = recipe.build.cpu_variants
    if not names:
        return {}
    return {
        "GGML_BACKEND_DL": "ON",
        "GGML_CPU_ALL_VARIANTS": "ON",
        "GGML_NATIVE": "OFF",
        "BUILD_SHARED_LIBS": "ON",
        "PATCHKIT_CPU_VARIANTS": ";".join(names),
    }


def include_define(recipe: Recipe, work_root: Path) -> dict[str, str]:
    """``CMAKE_PROJECT_ggml_INCLUDE`` for the configure command only (a host path: never
    recorded), the file written into the work folder; empty without variants."""
    if not recipe.build.cpu_variants:
        return {}
    path = work_root / _INCLUDE_FILE
    try:
        current = path.read_text(encoding="utf-8")
    except OSError:
        current = None
    if current != VARIANTS_CMAKE:
        atomic_write_text(path, VARIANTS_CMAKE)
    return {"CMAKE_PROJECT_ggml_INCLUDE": path.as_posix()}


def configure_defines(recipe: Recipe, defines: Mapping[str, str], work_root: Path) -> dict[str, str]:
    """What the configure command gets: the recorded defines plus the include."""
    return {**defines, **include_define(recipe, work_root)}


def build_targets(recipe: Recipe) -> tuple[str, ...]:
    """The recipe's targets plus its variants' modules (nothing links them: built and
    shipped by name)."""
    return (*recipe.build.targets, *(f"ggml-cpu-{n}" for n in recipe.build.cpu_variants))


def check_variants(recipe: Recipe, model: cm.CodeModel) -> None:
    """RecipeError (exit 3) for a chosen variant the configured upstream does not define
    (an older or newer pin, an MSVC build: ivybridge, piledriver, cooperlake, zen4 and
    sapphirerapids are GCC/Clang only)."""
    if not recipe.build.cpu_variants:
        return
    names = model.names
    if "ggml-cpu" in names:
        raise RecipeError(
            f"{recipe.path.name}: build.cpu_variants: the configured upstream built one CPU "
            "backend (target ggml-cpu), not variants: GGML_CPU_ALL_VARIANTS had no effect",
            hint="check the pin's ggml/src/CMakeLists.txt",
        )
    missing = [n for n in recipe.build.cpu_variants if f"ggml-cpu-{n}" not in names]
    if missing:
        raise RecipeError(
            f"{recipe.path.name}: build.cpu_variants: the upstream at "
            f"{recipe.upstream.commit[:12]} defines no CPU variant "
            + ", ".join(repr(m) for m in missing)
            + " for this compiler (no target ggml-cpu-<name>)",
            hint="remove it from build.cpu_variants (see ggml/src/CMakeLists.txt at the pin)",
        )


def variants_record(recipe: Recipe, artifacts: Sequence[cm.Artifact]) -> CpuVariantsRecord | None:
    """build-info's ``cpu_variants``: each chosen variant's module among the artifacts
    (``bin/<file>``, its sha256 in ``artifacts``), and the variant each known CPU model
    loads from them; None without variants. BuildError when a chosen variant built no
    module (the configure defined its target, so this is upstream's CMake changing)."""
    if not recipe.build.cpu_variants:
        return None
    files: dict[str, str] = {}
    for a in artifacts:
        name = cpuvariants.variant_of_target(a.target)
        if name is not None and a.type == "MODULE_LIBRARY":
            files.setdefault(name, f"bin/{a.path.name}")
    missing = [n for n in recipe.build.cpu_variants if n not in files]
    if missing:
        raise BuildError(
            f"the CPU variant(s) {', '.join(missing)} are targets but build no loadable module "
            "(MODULE_LIBRARY) in the File API reply",
            hint="check the pin's ggml_add_backend_library (GGML_BACKEND_DL)",
        )
    built = tuple(v.name for v in cpuvariants.VARIANTS if v.name in recipe.build.cpu_variants)
    return CpuVariantsRecord(
        variants=tuple(
            CpuVariantRecord(name=n, file=files[n], features=cpuvariants.variant(n).features) for n in built
        ),
        models=tuple(
            CpuModelRecord(model=m.name, qemu=m.qemu, variant=v) for m, v in cpuvariants.model_table(built)
        ),
    )
