"""`patchkit release`.

The result goes to stdout: the files it wrote, one line each (the CUDA runtime archive,
``ARCHIVE  sha256 HEX``, each provenance statement). The progress, the warnings (waivers,
no sources), the import check and the errors go to stderr. ``--json`` prints one object
instead, and the lines go to stderr.

``release --json`` keys:

- ``archive``: the archive written
- ``floor``: the C library floor line; null: none
- ``image``: with --image: the container image's ``file``, ``sha256``, ``digest``, ``ref``,
  ``layers``, ``system_from``, ``size``; else null
- ``imports``: the import check, one line per file
- ``manifest``: the manifest's copy beside it
- ``name``: the release's name (the archive's, without its suffix)
- ``provenance``: the in-toto statement (and its signature)
- ``runtime``: the CUDA runtime archive beside it; null: none
- ``sha256``: the archive's
- ``sums``: SHA256SUMS
- ``waivers``: the checks waived: unsmoked, stale
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from patchkit.builder.sysroot import require_root, root_dir
from patchkit.cli._common import load_recipe_arg, out, out_record
from patchkit.core.log import log
from patchkit.core.paths import cache_dir, default_out_dir
from patchkit.core.record import encode, meta
from patchkit.release.image import ImageOptions, ImageRecord
from patchkit.release.release import ReleaseOptions, release, source_date_epoch_from_env
from patchkit.spec.recipe import Recipe

__all__ = ["COMMANDS", "ReleaseJson"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReleaseJson:
    """``release --json``."""

    name: str  # the release's name (the archive's, without its suffix)
    archive: Path  # the archive written
    sha256: str  # the archive's
    manifest: Path  # the manifest's copy beside it
    sums: Path  # SHA256SUMS
    waivers: tuple[str, ...]  # the checks waived: unsmoked, stale
    provenance: tuple[Path, ...]  # the in-toto statement (and its signature)
    runtime: Path | None  # the CUDA runtime archive beside it; null: none
    imports: tuple[str, ...]  # the import check, one line per file
    floor: str = dataclasses.field(
        metadata=meta(encode=lambda s: s or None)
    )  # the C library floor line; null: none
    image: ImageRecord | None = dataclasses.field(
        metadata=meta(encode=encode)  # its keys are release.image's: listed here, not walked
    )
    """with --image: the container image's ``file``, ``sha256``, ``digest``, ``ref``, ``layers``,
    ``system_from``, ``size``; else null"""


@click.command("release")
@click.argument("recipe", required=False)
@click.option(
    "--build-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The finished build to release (default: out/<recipe name>).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("dist"),
    show_default=True,
    help="Where the archive and SHA256SUMS go.",
)
@click.option(
    "--allow-unsmoked",
    is_flag=True,
    help="Release even though the smoke stage failed, was skipped or not run (recorded in the manifest).",
)
@click.option(
    "--allow-stale",
    is_flag=True,
    help="Release a build whose recipe, upstream commit or patches changed since (recorded in the manifest).",
)
@click.option(
    "--sign-key",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="SSH private key: sign each provenance statement with ssh-keygen -Y "
    "(namespace patchkit) into <name>.intoto.json.sig.",
)
@click.option(
    "--bundle-runtime/--no-bundle-runtime",
    default=True,
    show_default=True,
    help="CUDA builds: NVIDIA's runtime (cudart, cuBLAS) in an archive beside them.",
)
@click.option(
    "--runtime-wheels",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="Take NVIDIA's runtime wheels from this folder (offline) instead of downloading them with pip.",
)
@click.option(
    "--allow-system",
    "allow_system",
    multiple=True,
    metavar="LIB",
    help="Let binaries import this system library too (e.g. libssl.so.3), beyond "
    "the documented set; recorded in the manifest. Repeatable.",
)
@click.option(
    "--image",
    "with_image",
    is_flag=True,
    help="Also write <name>.oci.tar: the build as a container image that podman load and "
    "docker load take (system libraries from the recipe's build root, else this machine).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.pass_context
def release_cmd(
    ctx: click.Context,
    recipe: str | None,
    build_dir: Path | None,
    out_dir: Path,
    allow_unsmoked: bool,
    allow_stale: bool,
    bundle_runtime: bool,
    runtime_wheels: Path | None,
    allow_system: tuple[str, ...],
    sign_key: Path | None,
    with_image: bool,
    as_json: bool,
) -> None:
    """Pack a finished build of RECIPE into a reproducible archive + SHA256SUMS.

    With only --build-dir the build is not compared with a recipe file.
    SOURCE_DATE_EPOCH, when set, replaces the upstream commit date as the archive mtime.
    """
    loaded = project = None
    if recipe is not None or build_dir is None:
        project, _, loaded = load_recipe_arg(ctx, recipe)
        build_dir = build_dir or default_out_dir(loaded.name)
    else:
        log.warning(f"no recipe given: {build_dir} is not checked against a recipe file")
    assert build_dir is not None
    opts = ReleaseOptions(
        build_dir=build_dir,
        out_dir=out_dir,
        recipe=loaded,
        allow_unsmoked=allow_unsmoked,
        allow_stale=allow_stale,
        source_date_epoch=source_date_epoch_from_env(),
        bundle_runtime=bundle_runtime,
        runtime_wheels=runtime_wheels,
        allow_system=tuple(allow_system),
        project=project,
        sign_key=sign_key,
        image=_image_options(loaded) if with_image else None,
    )
    with log.step(f"release {build_dir}"):
        result = release(opts)
    if result.no_sources:
        log.warning(
            f"the archive carries no sources ({result.no_sources}): `patchkit rebuild` cannot rebuild it"
        )
    for waiver in result.waivers:
        log.warning(f"released with waiver {waiver!r} (recorded in the manifest)")
    log.info("import check: every library resolves")
    for line in result.imports:
        log.info(f"  {line}")
    if result.floor:
        log.info(f"C library: the files need {result.floor}")
    if result.note:
        log.info(f"note: {result.note}")
    if result.runtime is not None:
        out(f"{result.runtime}  (the CUDA runtime: unpack it over the build's folder)", err=as_json)
    out(f"{result.archive}  sha256 {result.sha256}", err=as_json)
    if result.image is not None:
        img = result.image
        out(
            f"{result.sums.parent / img.file}  sha256 {img.sha256}  (image {img.ref}@{img.digest})",
            err=as_json,
        )
    for path in result.provenance:
        out(f"{path.name}  (provenance)", err=as_json)
    if as_json:
        out_record(
            ReleaseJson(
                name=result.name,
                archive=result.archive,
                sha256=result.sha256,
                manifest=result.manifest,
                sums=result.sums,
                waivers=result.waivers,
                provenance=result.provenance,
                runtime=result.runtime,
                imports=result.imports,
                floor=result.floor,
                image=result.image,
            )
        )


def _image_options(recipe: Recipe | None) -> ImageOptions:
    """The system layer from the recipe's build root (prepared), else this machine's /."""
    root = recipe.build.root if recipe is not None else None
    if root is None:
        return ImageOptions()
    cache = cache_dir()
    found = require_root(cache, root)
    return ImageOptions(system_root=root_dir(cache, root) / "tree", system_label=found.label)


COMMANDS = [release_cmd]
