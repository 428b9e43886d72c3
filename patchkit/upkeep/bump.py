"""`patchkit bump`: move every recipe of one upstream to a newer commit, patches and all.

1. **Plan** (:func:`plan_bump`, read-only): the recipes on that upstream must share one
   pin (the old commit) and set no ``upstream.ref``; the target is ``--to REF`` or the
   newest commit of the upstream's default branch (:func:`default_target`). It gathers
   upstream's build number of both (``git rev-list --count``, what llama.cpp prints as
   "build N"), the commits in between, those that touched a file the series patches, the
   RPC protocol at both ends (ggml-rpc.h), and ``check``'s verdict for every patch at the
   target (the series is cumulative).
2. **Apply** (:func:`run_bump`): ``refresh`` onto the target (a 3-way merge per patch;
   patch files, series hashes and every recipe's pin written in one all-or-nothing step).
   At a conflict it stops like ``refresh`` does, with its state kept (:class:`BumpStopped`,
   carrying the bump so far for the summary): ``patchkit refresh --continue`` finishes
   the bump (every pin moves then), ``--abort`` drops it, and nothing in the project was
   written. ``dry_run`` runs the same refresh on a copy of ``patches/`` in a temp folder
   (to say whether it would merge cleanly) and writes nothing.
3. **Summary** (:func:`patchkit.upkeep.bump_summary.render_summary`): markdown for a
   pull-request body; a failed ``--build``'s compile errors are mapped to the patches by
   :mod:`patchkit.upkeep.compile_errors`.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from patchkit.core.errors import PatchError, RecipeError, SourceError
from patchkit.core.fs import atomic_write_many, first_foreign
from patchkit.core.lock import cache_lock
from patchkit.core.log import log
from patchkit.git.repo import CommitInfo, Git
from patchkit.spec.patchfile import parse_diff
from patchkit.spec.recipe import Recipe
from patchkit.spec.rpcproto import RPC_HEADER, ProtoVersion, parse_rpc_header
from patchkit.spec.series import Patch
from patchkit.upkeep.check import check_series
from patchkit.upkeep.refresh import (
    STATE_FILE,
    RefreshOptions,
    RefreshResult,
    RefreshState,
    StateDamaged,
    move_recipe_pin,
    refresh_abort,
    refresh_in_progress,
    refresh_start,
)
from patchkit.upkeep.refresh.scratch import OWNED_DIRS, OWNED_FILES, rmtree
from patchkit.upkeep.scratch import PatchVerdict, Status

__all__ = [
    "BumpOptions",
    "BumpPlan",
    "BumpResult",
    "BumpStopped",
    "Touching",
    "default_target",
    "github_web",
    "plan_bump",
    "run_bump",
]

_MAX_TOUCHING = 200  # commits listed in the summary (the count is always exact)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BumpOptions:
    repo: Path  # the upstream repository (read-only): a mirror, a clone, the cache's clone
    upstream: str  # how the user named it (for the summary)
    recipes: tuple[Recipe, ...]  # every recipe on that upstream: all move, or none
    patches: tuple[Patch, ...]  # the whole series, in order
    patches_dir: Path
    workdir: Path  # refresh's scratch folder (its --continue / --abort find it there)
    to: str | None = None  # None: the newest commit of the default branch
    dry_run: bool = False
    drop_upstreamed: bool = False  # refresh drops the patches found already upstream
    workdir_given: bool = True  # the user chose the work folder (bump never clears one it did not make)
    rerere: Path | None = None  # recorded conflict resolutions (refresh's)
    independent: bool = False  # a series of independent patches (each on the commit alone)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Touching:
    commit: CommitInfo
    files: tuple[str, ...]  # the patched files it changed


@dataclasses.dataclass(frozen=True, kw_only=True)
class BumpPlan:
    upstream: str
    target: str  # the ref it resolved (e.g. origin/master)
    old: CommitInfo
    new: CommitInfo
    old_build: int
    new_build: int
    first_parent: int  # first-parent commits in old..new
    commits: int  # all commits in old..new
    touching: tuple[Touching, ...]  # newest first, at most _MAX_TOUCHING
    touching_total: int
    files: tuple[str, ...]  # the files the series patches
    verdicts: tuple[PatchVerdict, ...]  # check at new, series order
    rpc_old: ProtoVersion | None
    rpc_new: ProtoVersion | None
    recipes: tuple[str, ...]  # names
    recipe_paths: tuple[Path, ...]
    patch_files: tuple[tuple[str, str], ...] = ()  # (name, file) in series order
    # the upstream's web address when it is on GitHub (commits and pull requests are linked
    # there in the summary), else ""
    web: str = ""

    @property
    def up_to_date(self) -> bool:
        return self.old.sha == self.new.sha

    @property
    def conflicts(self) -> tuple[str, ...]:
        return tuple(v.patch for v in self.verdicts if v.status is Status.CONFLICTS)

    @property
    def needs_refresh(self) -> bool:
        """Any patch that does not apply exactly (offsets, conflicts): rewrite it."""
        return any(v.status in (Status.OFFSET, Status.CONFLICTS, Status.UPSTREAM) for v in self.verdicts)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BumpResult:
    plan: BumpPlan
    dry_run: bool
    refresh: RefreshResult | None = None  # what the refresh did (or would do, dry run)
    moved: tuple[str, ...] = ()  # recipe names whose pin moved ("would move" in a dry run)
    stopped: str = ""  # the refresh stopped (conflict): its message


class BumpStopped(PatchError):
    """The refresh stopped at a conflict, its state kept in the work folder (``patchkit
    refresh --continue`` / ``--abort``); refresh's message, detail and hint, and
    ``result``: the bump so far (nothing written), for the summary."""

    def __init__(self, error: PatchError, result: BumpResult) -> None:
        super().__init__(error.message, detail=error.detail, hint=error.hint, problem=error.problem)
        self.result = result


# -- planning --------------------------------------------------------------------------
def default_target(git: Git) -> tuple[str, str]:
    """(name, sha) of the newest commit of the upstream's default branch.

    A clone has ``origin/HEAD``; a bare mirror (or the cache's clone) has ``HEAD`` naming
    the default branch, whose ``origin/<branch>`` is newer when it was fetched since.
    """
    remote_head = _symref(git, "refs/remotes/origin/HEAD")
    if remote_head.startswith("refs/remotes/"):
        return remote_head.removeprefix("refs/remotes/"), git.resolve(remote_head)
    head = _symref(git, "HEAD")
    if head.startswith("refs/heads/"):
        name = head.removeprefix("refs/heads/")
        for ref, label in ((f"refs/remotes/origin/{name}", f"origin/{name}"), (head, name)):
            try:
                return label, git.resolve(ref)
            except SourceError:
                continue
    raise SourceError(
        f"{git.repo}: cannot tell the default branch (no origin/HEAD, no HEAD branch)",
        hint="name the target with --to REF (e.g. --to origin/master)",
    )


def _symref(git: Git, ref: str) -> str:
    """What the symbolic ref points to ('' when it is none)."""
    try:
        return git.run("symbolic-ref", "-q", ref).strip()
    except SourceError:  # not a symbolic ref (git's exit 1)
        return ""


def _one_pin(recipes: Sequence[Recipe]) -> str:
    if not recipes:
        raise RecipeError("no recipe to bump")
    pins: dict[str, list[str]] = {}
    for r in recipes:
        pins.setdefault(r.upstream.commit, []).append(r.name)
        if r.upstream.ref:
            raise RecipeError(
                f"{r.path}: upstream.ref {r.upstream.ref!r} pins it by name: bump moves commits only",
                hint="drop upstream.ref from the recipe, then bump",
            )
    if len(pins) > 1:
        parts = "; ".join(f"{c[:12]}: {', '.join(sorted(n))}" for c, n in pins.items())
        raise RecipeError(
            f"the recipes on this upstream pin different commits ({parts}): "
            "bump moves them together from one pin",
            hint="bring them to one pin first: `patchkit refresh RECIPE --onto COMMIT --move-pin`",
        )
    return next(iter(pins))


def _count(git: Git, *args: str) -> int:
    return int(git.run("rev-list", "--count", *args).strip() or 0)


def _touching(git: Git, old: str, new: str, files: Sequence[str]) -> tuple[list[Touching], int]:
    if not files:
        return [], 0
    out = git.run(
        "log",
        "--no-show-signature",
        "--format=%x1e%H%x1f%cI%x1f%s",
        "--name-only",
        f"{old}..{new}",
        "--",
        *files,
    )
    found: list[Touching] = []
    for block in out.split("\x1e"):
        lines = [ln for ln in block.splitlines() if ln.strip()]
        if not lines:
            continue
        sha, date, subject = ([*lines[0].split("\x1f"), "", ""])[:3]
        found.append(
            Touching(
                commit=CommitInfo(sha=sha, date=date, subject=subject),
                files=tuple(f for f in lines[1:] if f in files),
            )
        )
    return found[:_MAX_TOUCHING], len(found)


def _rpc_at(git: Git, commit: str) -> ProtoVersion | None:
    try:
        text = git.run("cat-file", "blob", f"{commit}:{RPC_HEADER}")
    except SourceError:
        return None  # no such file there
    return parse_rpc_header(text)


def plan_bump(opts: BumpOptions) -> BumpPlan:
    """Everything the summary says, read from the upstream; changes nothing."""
    old_sha = _one_pin(opts.recipes)
    git = Git(opts.repo)
    if opts.to is None:
        target, new_sha = default_target(git)
    else:
        target, new_sha = opts.to, git.resolve(opts.to)
    try:
        old_sha = git.resolve(old_sha)
    except SourceError:
        raise SourceError(
            f"the recipes' pin {old_sha[:12]} is not in {opts.upstream}",
            hint="fetch it, or pass --upstream with a repository that has it",
        ) from None
    infos = git.commit_infos([old_sha, new_sha])
    if not git.is_ancestor(old_sha, new_sha):
        raise SourceError(
            f"{target} ({new_sha[:12]}, {infos[new_sha].date[:10]}) does not descend from the "
            f"pin {old_sha[:12]}: bump only moves forward",
            hint="name the branch to follow with --to REF (e.g. --to master); to move "
            "anywhere else: `patchkit refresh RECIPE --onto COMMIT --move-pin`",
        )
    files: list[str] = []
    for p in opts.patches:
        for f in parse_diff(p.read_verified().decode("utf-8", "replace")).paths:
            if f not in files:
                files.append(f)
    touching, total = _touching(git, old_sha, new_sha, files)
    verdicts: tuple[PatchVerdict, ...] = ()
    if opts.patches:
        verdicts = (
            check_series(opts.repo, opts.patches, [new_sha], independent=opts.independent).refs[0].results
        )
    return BumpPlan(
        upstream=opts.upstream,
        target=target,
        old=infos[old_sha],
        new=infos[new_sha],
        old_build=_count(git, old_sha),
        new_build=_count(git, new_sha),
        first_parent=_count(git, "--first-parent", f"{old_sha}..{new_sha}"),
        commits=_count(git, f"{old_sha}..{new_sha}"),
        touching=tuple(touching),
        touching_total=total,
        files=tuple(files),
        verdicts=verdicts,
        rpc_old=_rpc_at(git, old_sha),
        rpc_new=_rpc_at(git, new_sha),
        recipes=tuple(r.name for r in opts.recipes),
        recipe_paths=tuple(r.path for r in opts.recipes),
        patch_files=tuple((p.name, p.filename) for p in opts.patches),
        web=_web(opts),
    )


def _web(opts: BumpOptions) -> str:
    """The recipes' upstream on GitHub (a local mirror of it is read), else --upstream's."""
    for url in (*(r.upstream.url for r in opts.recipes), opts.upstream):
        if web := github_web(url):
            return web
    return ""


# -- applying ---------------------------------------------------------------------------
def run_bump(opts: BumpOptions) -> BumpResult:
    """Plan, then refresh + move every pin (or, dry run, try it on a copy).

    A real run that stops at a conflict raises :class:`BumpStopped` (state kept in
    ``opts.workdir``); any other refusal of the refresh (one already in progress there)
    is its PatchError as it is.
    """
    plan = plan_bump(opts)
    if not opts.dry_run:
        _clear_interrupted(opts.workdir, own=not opts.workdir_given)
    if plan.up_to_date:
        return BumpResult(plan=plan, dry_run=opts.dry_run)
    if opts.dry_run:
        return _dry_run(opts, plan)
    if not opts.patches:
        _move_pins(plan)
        return BumpResult(plan=plan, dry_run=False, moved=plan.recipes)
    had_state = refresh_in_progress(opts.workdir)
    try:
        result = refresh_start(_refresh_options(opts, plan, opts.patches_dir, opts.workdir))
    except PatchError as e:
        if had_state or not refresh_in_progress(opts.workdir):
            raise  # refused before it started: nothing of this bump to continue
        raise BumpStopped(e, BumpResult(plan=plan, dry_run=False, stopped=e.message)) from None
    return BumpResult(
        plan=plan, dry_run=False, refresh=result, moved=plan.recipes if result.pin_moved else ()
    )


def _clear_interrupted(workdir: Path, *, own: bool) -> None:
    """Remove what a killed bump's refresh left in ``workdir``, so that this bump starts
    again (saying so). A refresh stopped where a person is needed (its state names the stop)
    stays for ``refresh --continue`` / ``--abort``; one whose process died while it ran (no
    stop in its state: the patches and recipes were not written yet, or were written whole,
    core.fs writes them all or none) has nobody to continue it. A folder without a state
    (killed before the state was saved, or while the folder was being removed) is cleared
    only when it is bump's own folder in the cache (``own``, no --workdir) and holds nothing
    but what a refresh writes."""
    if not workdir.is_dir():
        return
    if (workdir / STATE_FILE).is_file():
        try:
            stopped = RefreshState.load(workdir).stop_kind
        except StateDamaged:
            return  # refresh_start says what is wrong with it
        if stopped:
            return
        refresh_abort(workdir)
    elif own:
        with cache_lock(workdir, f"patchkit bump in {workdir}"):
            names = sorted(p.name for p in workdir.iterdir())
            if names == ["lock", "lock.owner"] or first_foreign(
                workdir, names, files=OWNED_FILES.__contains__, dirs=dict.fromkeys(OWNED_DIRS)
            ):
                return  # empty; or not a refresh's: refresh_start names the foreign entry
            for name in names:
                if name not in ("lock", "lock.owner"):
                    entry = workdir / name
                    if entry.is_dir():
                        rmtree(entry)
                    else:
                        entry.unlink()
    else:
        return
    log.warning(
        f"{workdir}: an interrupted refresh (its bump was killed?) was left here: removed, starting again"
    )


def _refresh_options(
    opts: BumpOptions, plan: BumpPlan, patches_dir: Path, workdir: Path, *, move: bool = True
) -> RefreshOptions:
    paths = plan.recipe_paths if move else ()
    return RefreshOptions(
        repo=opts.repo,
        patches=opts.patches,
        patches_dir=patches_dir,
        onto=plan.new.sha,
        workdir=workdir,
        base=plan.old.sha,
        recipe_path=paths[0] if paths else None,
        move_pin=bool(paths),
        more_recipes=tuple(paths[1:]),
        drop_upstreamed=opts.drop_upstreamed,
        rerere=opts.rerere if move else None,
        independent=opts.independent,
    )


def _move_pins(plan: BumpPlan) -> None:
    writes = {}
    for path in plan.recipe_paths:
        text = path.read_text(encoding="utf-8")
        writes[path] = move_recipe_pin(text, plan.new.sha, where=str(path)).encode("utf-8")
    atomic_write_many(writes)


def _dry_run(opts: BumpOptions, plan: BumpPlan) -> BumpResult:
    for path in plan.recipe_paths:  # a recipe whose pin cannot move fails the dry run too
        move_recipe_pin(path.read_text(encoding="utf-8"), plan.new.sha, where=str(path))
    if not opts.patches:
        return BumpResult(plan=plan, dry_run=True, moved=plan.recipes)
    tmp = Path(tempfile.mkdtemp(prefix="patchkit-bump-"))
    try:
        patches_copy = tmp / "patches"
        patches_copy.mkdir()
        shutil.copyfile(opts.patches_dir / "series", patches_copy / "series")
        for p in opts.patches:
            shutil.copyfile(p.path, patches_copy / p.filename)
        try:
            result = refresh_start(_refresh_options(opts, plan, patches_copy, tmp / "work", move=False))
        except PatchError as e:
            return BumpResult(plan=plan, dry_run=True, stopped=e.message)
        return BumpResult(plan=plan, dry_run=True, refresh=result, moved=plan.recipes)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- the upstream's web address ---------------------------------------------------------------
_GITHUB = (
    re.compile(
        r"^(?:https?|git|ssh)://(?:[^/@]*@)?github\.com(?::\d+)?/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$"
    ),
    re.compile(r"^[A-Za-z0-9_.-]+@github\.com:([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$"),
)


def github_web(url: str) -> str:
    """``https://github.com/OWNER/REPO`` for a clone URL on GitHub (https, ssh, scp-like;
    credentials dropped), else ''."""
    for rx in _GITHUB:
        if m := rx.match(url.strip()):
            owner, repo = m.group(1), m.group(2)
            if owner not in (".", "..") and repo not in (".", ".."):
                return f"https://github.com/{owner}/{repo}"
    return ""
