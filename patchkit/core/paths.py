"""Where things live: the project (recipes/ + patches/) and the cache."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import sys
from pathlib import Path

from patchkit.core.errors import ConfigError
from patchkit.core.fs import recover_batches
from patchkit.core.log import log
from patchkit.core.text import printable

__all__ = [
    "CacheLayout",
    "WorkDirs",
    "cache_dir",
    "cache_layout",
    "default_out_dir",
    "find_project_dir",
    "relative_label",
]


def _looks_like_project(p: Path) -> bool:
    return (p / "recipes").is_dir() and (p / "patches").is_dir()


def find_project_dir(explicit: Path | None = None) -> Path:
    """The folder holding recipes/ and patches/.

    Order: --project / PATCHKIT_PROJECT, the current directory or a parent of it,
    the source checkout patchkit runs from, the data shipped inside the wheel. A batch of
    writes into its recipes/ or patches/ that a killed patchkit left half done is put back
    first (:func:`_recovered`).
    """
    env = os.environ.get("PATCHKIT_PROJECT")
    for given in (explicit, Path(env) if env else None):
        if given is not None:
            given = given.expanduser().resolve()
            if not _looks_like_project(given):
                raise ConfigError(
                    f"{given} is not a patchkit project: it needs recipes/ and patches/ folders"
                )
            return _recovered(given)
    cwd = Path.cwd().resolve()
    for p in (cwd, *cwd.parents):
        if _looks_like_project(p):
            return _recovered(p)
    here = Path(__file__).resolve().parent.parent  # the patchkit package
    for p in (here.parent, here / "_data"):
        if _looks_like_project(p):
            return p
    raise ConfigError(
        "no patchkit project found (recipes/ and patches/): run from a patchkit checkout "
        "or pass --project DIR"
    )


def _recovered(project: Path) -> Path:
    """``project``, after every write of several of its files at once (a refreshed series
    and its recipes, an imported queue) that a killed run left half done is undone: its
    files are the old ones again (core.fs.recover_batches), and a warning says so."""
    for sub in ("patches", "recipes"):
        restored = recover_batches(project / sub)
        if restored:
            names = ", ".join(p.name for p in restored[:5]) + (", …" if len(restored) > 5 else "")
            log.warning(
                printable(
                    f"{project / sub}: a patchkit run was killed while writing {len(restored)} "
                    f"file(s) at once; their previous contents are back ({names})"
                )
            )
    return project


def _absolute_env(name: str) -> Path | None:
    """An environment variable naming a folder, if set to an absolute path (the XDG base
    directory spec: a relative path in XDG_* is invalid and is ignored)."""
    value = os.environ.get(name, "")
    if not value:
        return None
    p = Path(value)
    return p if p.is_absolute() else None


def _home() -> Path:
    """The user's home folder; an empty or relative HOME (USERPROFILE) is refused rather
    than turned into ``/`` or the current directory."""
    var = "USERPROFILE" if sys.platform == "win32" else "HOME"
    if var in os.environ:
        value = os.environ[var]
        if not value or not Path(value).is_absolute():
            raise ConfigError(
                f"{var}={value!r} is not an absolute folder: it cannot hold the cache",
                hint=f"set PATCHKIT_CACHE or {var}",
            )
        return Path(value)
    try:
        home = Path.home()  # the password database when HOME is unset
    except (KeyError, RuntimeError, OSError):
        raise ConfigError(
            f"{var} is not set and this user has no home folder", hint=f"set PATCHKIT_CACHE or {var}"
        ) from None
    if not home.is_absolute() or home == Path(home.anchor):
        raise ConfigError(
            f"the home folder {str(home)!r} cannot hold the cache", hint=f"set PATCHKIT_CACHE or {var}"
        )
    return home


def cache_dir() -> Path:
    """PATCHKIT_CACHE, else the platform's user cache dir + /patchkit.

    The user cache dir: ``LOCALAPPDATA`` (Windows), ``~/Library/Caches`` (macOS),
    ``XDG_CACHE_HOME`` if absolute, else ``~/.cache`` (elsewhere).
    """
    env = os.environ.get("PATCHKIT_CACHE")
    if env:
        return Path(env).expanduser().resolve()
    if sys.platform == "win32":
        base = _absolute_env("LOCALAPPDATA") or _home() / "AppData" / "Local"
    elif sys.platform == "darwin":
        base = _home() / "Library" / "Caches"
    else:
        base = _absolute_env("XDG_CACHE_HOME") or _home() / ".cache"
    return (base / "patchkit").resolve()


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkDirs:
    """One recipe's worktree, build dir, state and log, in the cache."""

    root: Path

    @property
    def src(self) -> Path:
        return self.root / "src"

    @property
    def build(self) -> Path:
        return self.root / "build"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def log(self) -> Path:
        return self.root / "build.log"

    @property
    def smoke(self) -> Path:
        """The last passed smoke verdict and what it depends on (builder.verdict)."""
        return self.root / "smoke.json"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text) or "_"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CacheLayout:
    """The whole cache, in one place::

    <cache>/lock, lock.owner            one run at a time (core.lock)
    <cache>/repos/<slug>-<hash>.git     one bare clone per upstream (git.cache)
    <cache>/work/<recipe>-<hash>/       worktree src/, build/, state.json, build.log, smoke.json
    <cache>/refresh/<recipe>/           a refresh in progress (upkeep.refresh)
    <cache>/rerere/                     recorded conflict resolutions (upkeep.rerere)
    <cache>/models/<name>/              real model weights (weights.store)
    <cache>/wheels/<os>-<arch>-cuda<X.Y>/  NVIDIA runtime wheels (release.bundle)
    <cache>/roots/<name>/               a build root: tree/ and root.json (builder.sysroot)
    """

    root: Path

    def repo(self, name: str, key: str) -> Path:
        """The bare clone of an upstream whose normalised URL is ``key``."""
        digest = hashlib.sha256(key.encode()).hexdigest()[:10]
        return self.root / "repos" / f"{_slug(name)}-{digest}.git"

    def work(self, recipe: str, url: str) -> WorkDirs:
        key = hashlib.sha256(url.encode()).hexdigest()[:8]
        return WorkDirs(root=self.root / "work" / f"{recipe}-{key}")

    def refresh(self, label: str) -> Path:
        return self.root / "refresh" / _slug(label)

    @property
    def rerere(self) -> Path:
        return self.root / "rerere"

    @property
    def models(self) -> Path:
        return self.root / "models"

    def wheels(self, label: str) -> Path:
        return self.root / "wheels" / _slug(label)


def cache_layout(root: Path | None = None) -> CacheLayout:
    """The cache at ``root`` (already resolved by the caller), else at :func:`cache_dir`."""
    return CacheLayout(root=cache_dir() if root is None else root)


def default_out_dir(recipe: str) -> Path:
    """Where a build of ``recipe`` goes without ``--out``: ``out/<recipe>``, relative to the
    current directory (the one rule for `build`, `release` and `bump`)."""
    return Path("out") / recipe


def relative_label(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` in POSIX form when it lies inside it, else as given
    (how build-info and the log name a recipe or toolchain file)."""
    try:
        return path.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return str(path)
