"""`patchkit release`, `patchkit verify`, `patchkit ci-template`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from patchkit.release.ci import DEFAULT_CUDA, matrix_from_recipes, render_workflow
from patchkit.cli._common import load_project, load_recipe_arg
from patchkit.core.errors import ConfigError, ReleaseError
from patchkit.core.log import log
from patchkit.model.recipe import list_recipes, load_recipe, resolve_recipe_path
from patchkit.release.release import ReleaseOptions, release, source_date_epoch_from_env
from patchkit.core.fs import atomic_write_text
from patchkit.release.verify import verify_dir

__all__ = ["COMMANDS"]


@click.command("release")
@click.argument("recipe", required=False)
@click.option("--build-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The finished build to release (default: out/<recipe name>).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("dist"), show_default=True, help="Where the archive and SHA256SUMS go.")
@click.option("--allow-unsmoked", is_flag=True,
              help="Release even though the smoke stage failed, was skipped or not run "
                   "(recorded in the manifest).")
@click.option("--allow-stale", is_flag=True,
              help="Release a build whose recipe, upstream commit or patches changed since "
                   "(recorded in the manifest).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.pass_context
def release_cmd(ctx: click.Context, recipe: str | None, build_dir: Path | None, out_dir: Path,
                allow_unsmoked: bool, allow_stale: bool, as_json: bool) -> None:
    """Pack a finished build of RECIPE into a reproducible archive + SHA256SUMS.

    With only --build-dir the build is not compared with a recipe file.
    SOURCE_DATE_EPOCH, when set, replaces the upstream commit date as the archive mtime.
    """
    loaded = None
    if recipe is not None or build_dir is None:
        _, _, loaded = load_recipe_arg(ctx, recipe)
        build_dir = build_dir or Path("out") / loaded.name
    else:
        log.warning(f"no recipe given: {build_dir} is not checked against a recipe file")
    assert build_dir is not None
    opts = ReleaseOptions(build_dir=build_dir, out_dir=out_dir, recipe=loaded,
                          allow_unsmoked=allow_unsmoked, allow_stale=allow_stale,
                          source_date_epoch=source_date_epoch_from_env())
    with log.step(f"release {build_dir}"):
        result = release(opts)
    for waiver in result.waivers:
        log.warning(f"released with waiver {waiver!r} (recorded in the manifest)")
    log.info(f"{result.archive}  sha256 {result.sha256}")
    if as_json:
        click.echo(json.dumps({"name": result.name, "archive": str(result.archive),
                               "sha256": result.sha256, "manifest": str(result.manifest),
                               "sums": str(result.sums), "waivers": list(result.waivers)},
                              indent=2))


@click.command("verify")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the differences as JSON on stdout.")
def verify_cmd(directory: Path, as_json: bool) -> None:
    """Recompute SHA256SUMS, every archive's members and its manifest; list what differs."""
    report = verify_dir(directory)
    if as_json:
        click.echo(json.dumps({"directory": str(directory), "archives": list(report.archives),
                               "differences": list(report.differences)}, indent=2))
    if not report.ok:
        n = len(report.differences)
        raise ReleaseError(f"{directory}: {n} difference{'s' if n != 1 else ''}",
                           detail="\n".join(report.differences))
    log.info(f"{directory}: {len(report.archives)} archive(s) match SHA256SUMS and their manifests")


@click.command("ci-template")
@click.argument("recipes", nargs=-1)
@click.option("--cuda", "cuda_version", default=DEFAULT_CUDA, show_default=True,
              help="CUDA toolkit version the CUDA recipes' jobs install.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write here (e.g. .github/workflows/release.yml) instead of stdout.")
@click.pass_context
def ci_template_cmd(ctx: click.Context, recipes: tuple[str, ...], cuda_version: str,
                    output: Path | None) -> None:
    """A GitHub Actions workflow: check, build RECIPES (default: all), release, publish."""
    project, series = load_project(ctx)
    paths = ([resolve_recipe_path(r, project) for r in recipes] if recipes
             else list_recipes(project))
    if not paths:
        raise ConfigError(f"no recipes in {project / 'recipes'}")
    entries = matrix_from_recipes([load_recipe(p, project, series) for p in paths],
                                  cuda=cuda_version)
    text = render_workflow(entries)
    if output is None:
        click.echo(text, nl=False)
    else:
        atomic_write_text(output, text)
        log.info(f"wrote {output} ({len(entries)} recipe(s))")


COMMANDS = [release_cmd, verify_cmd, ci_template_cmd]
