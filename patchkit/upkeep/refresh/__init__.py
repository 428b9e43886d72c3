"""`patchkit refresh`: rebase the series onto a new upstream commit with 3-way merges,
stopping only where a person is needed.

The work happens in a scratch repository (``WORKDIR/tree``,
:mod:`~patchkit.upkeep.refresh.scratch`) that borrows the upstream's objects (nothing is
written into the upstream repository) and whose base commit holds only the files the
series touches. The series is first replayed on the files of its current base (the
recipe's pin), one commit per patch, each named after its patch file (the name a
conflict marker shows); the new commit's files then become a second root, and each
patch commit is cherry-picked onto it (:mod:`~patchkit.upkeep.refresh.merge`): a real
3-way merge whose merge base is the patch's parent, so it works for patch N on top of
1..N-1 and needs no ``index`` lines. A patch that does not apply on the old base (or when
no base is known) falls back to ``git apply --3way``.

Before anything is merged, the patches already upstream are found
(:mod:`patchkit.upkeep.upstreamed`: patch-id, cherry-pick, pull request, title); just
before each merge, whether its change is there already (it reverse-applies: the
``effect`` rule). With ``drop_upstreamed`` those are dropped on the way (no stop, no
restart); without it they are merged as usual and named in the result and at any stop
("proposed for dropping"), and one that merges to nothing stops (``--skip`` drops it).
A clean merge that adds lines upstream added meanwhile a second time stops too.

At a conflict the refresh stops (:class:`RefreshStopped`, made by
:mod:`~patchkit.upkeep.refresh.stop`): the patch, each conflicted file's blocks, the
upstream commits in ``old..new`` that last touched those lines and, for a patch written
on top of one that was dropped, that it is a cascade of it. Its progress is kept in
``WORKDIR/refresh-state.json`` (:mod:`~patchkit.upkeep.refresh.state`) for
``--continue`` (the person's resolution, checked as the series loader checks a patch,
is recorded: :mod:`~patchkit.upkeep.refresh.recorded` replays it when the same conflict
comes again), ``--skip`` / ``--drop PATCH`` and ``--abort``. One refresh at a time works
in a folder (a lock in it; a second gets LockBusy).

When every patch is in (:mod:`~patchkit.upkeep.refresh.finish`), each patch file's diff
is replaced (its header and message kept, git's diffstat), dropped patches leave the
series (their files are removed), the series' sha256 lines are updated, and (only when
asked) the recipe's ``upstream.commit`` moves. All files are written together or none.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from patchkit.core.errors import ConfigError, LockBusy, PatchError, SourceError
from patchkit.core.fs import first_foreign, sha256_bytes
from patchkit.core.lock import cache_lock
from patchkit.core.log import log
from patchkit.core.text import printable
from patchkit.git.repo import Git
from patchkit.spec.patchdoc import split_parts
from patchkit.spec.patchfile import parse_diff, refusals
from patchkit.spec.series import Patch
from patchkit.upkeep.check import in_when_range
from patchkit.upkeep.refresh import recorded
from patchkit.upkeep.refresh.finish import check_sources_unchanged, finish, move_recipe_pin
from patchkit.upkeep.refresh.merge import run
from patchkit.upkeep.refresh.options import Dropped, RefreshOptions, RefreshResult, RefreshStopped, Review
from patchkit.upkeep.refresh.problems import (
    DropAloneLater,
    DropRefreshedAlready,
    ForeignInWorkdir,
    MarkersLeft,
    NotStaged,
    RefreshBusy,
    RefreshInProgress,
    RefreshJustFinished,
    ResolutionRefused,
    StillUnmerged,
    TreeMoved,
    WorkdirNotEmpty,
)
from patchkit.upkeep.refresh.scratch import (
    OWNED_DIRS,
    OWNED_FILES,
    commit_staged,
    head,
    make_scratch,
    out,
    private_index,
    rmtree,
    scratch_git,
    unmerged,
)
from patchkit.upkeep.refresh.state import (
    STATE_FILE,
    NoRefresh,
    PatchState,
    RefreshState,
    StateDamaged,
    UpstreamRecord,
)
from patchkit.upkeep.upstreamed import Candidate, Upstreamed, find_upstreamed

__all__ = [
    "STATE_FILE",
    "Dropped",
    "NoRefresh",
    "RefreshOptions",
    "RefreshResult",
    "RefreshState",
    "RefreshStopped",
    "Review",
    "StateDamaged",
    "move_recipe_pin",
    "refresh_abort",
    "refresh_continue",
    "refresh_in_progress",
    "refresh_start",
]

_LOCK = "lock"


@contextlib.contextmanager
def _locked(workdir: Path) -> Iterator[None]:
    """One refresh at a time in ``workdir`` (created when missing: removed again when
    nothing of a refresh is left in it)."""
    created = not workdir.exists()
    held = False
    try:
        with cache_lock(workdir, f"patchkit refresh in {workdir}"):
            held = True
            if not (workdir / _LOCK).exists():  # the one holding it finished and removed it
                raise LockBusy(problem=RefreshJustFinished(workdir=workdir))
            yield
    except LockBusy as e:
        if held:
            raise
        raise LockBusy(problem=RefreshBusy(workdir=workdir)) from e
    finally:
        if (
            held
            and created
            and workdir.is_dir()
            and {p.name for p in workdir.iterdir()} <= {_LOCK, "lock.owner"}
        ):
            for name in (_LOCK, "lock.owner"):
                (workdir / name).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                workdir.rmdir()


def _resolve_names(patches: Sequence[PatchState], names: Sequence[str]) -> list[int]:
    """Indexes of the patches ``names`` (patch names or file names) designate."""
    found: list[int] = []
    for n in names:
        hits = [i for i, p in enumerate(patches) if n in (p.name, p.file)]
        if not hits:
            known = ", ".join(p.file for p in patches[:6]) + (" …" if len(patches) > 6 else "")
            raise ConfigError(f"--drop {n}: no such patch in this refresh (it has {known})")
        found.append(hits[0])
    return found


# -- start / continue / abort --------------------------------------------------------------
def refresh_in_progress(workdir: Path) -> bool:
    """Whether a refresh is in progress in ``workdir`` (stopped at a conflict, its state
    kept for ``--continue`` / ``--abort``)."""
    return (workdir / STATE_FILE).is_file()


def refresh_start(opts: RefreshOptions) -> RefreshResult:
    """Apply the series onto ``opts.onto``; RefreshStopped (state kept) at the first stop."""
    if (opts.workdir / STATE_FILE).exists():
        raise PatchError(problem=RefreshInProgress(workdir=opts.workdir))
    if not opts.patches:
        raise PatchError("no patches to refresh")
    with _locked(opts.workdir):
        if (opts.workdir / STATE_FILE).exists():
            raise PatchError(problem=RefreshInProgress(workdir=opts.workdir))
        return _start(opts)


def _start(opts: RefreshOptions) -> RefreshResult:
    git = Git(opts.repo)
    onto = git.resolve(opts.onto)
    datas = [p.read_verified() for p in opts.patches]
    outside = [not in_when_range(git, p, onto) for p in opts.patches]
    pstates = [
        PatchState(name=p.name, file=p.filename, sha256=sha256_bytes(d), outside_when=s)
        for p, d, s in zip(opts.patches, datas, outside, strict=True)
    ]
    to_drop = [pstates[i].file for i in _resolve_names(pstates, opts.drop)]
    paths: list[str] = []
    for data, s in zip(datas, outside, strict=True):
        if not s:
            files = parse_diff(data.decode("utf-8", "replace")).paths
            paths.extend(f for f in files if f not in paths)

    if any(p.name not in (_LOCK, "lock.owner") for p in opts.workdir.iterdir()):
        raise PatchError(problem=WorkdirNotEmpty(workdir=opts.workdir))
    base_sha = git.resolve(opts.base) if opts.base else None
    found: dict[str, Upstreamed] = {}
    if base_sha:
        with log.step("looking for patches already upstream"):
            found = find_upstreamed(
                git,
                base_sha,
                onto,
                [_candidate(p, d) for p, d, s in zip(opts.patches, datas, outside, strict=True) if not s],
            )
    tree = opts.workdir / "tree"
    tree.mkdir(parents=True)
    try:
        pdir = opts.workdir / "patches"
        pdir.mkdir()
        pfiles = []
        for i, data in enumerate(datas):
            pfiles.append(pdir / f"{i:04d}.patch")
            pfiles[-1].write_bytes(data)
        old_root, old_commits, loose = make_scratch(
            git,
            tree,
            onto,
            paths,
            base_sha,
            [None if s else f for f, s in zip(pfiles, outside, strict=True)],
            [p.filename for p in opts.patches],
            independent=opts.independent,
        )
    except BaseException:
        for name in ("tree", "patches"):
            rmtree(opts.workdir / name)
        raise
    state = RefreshState(
        repo=str(opts.repo),
        onto=onto,
        base=head(tree),
        old_root=old_root,
        upstream_base=base_sha or "",
        patches_dir=str(opts.patches_dir),
        recipe=str(opts.recipe_path) if opts.recipe_path else None,
        move_pin=opts.move_pin,
        more_recipes=[str(r) for r in opts.more_recipes],
        patches=pstates,
        old_commits=old_commits,
        drop_upstreamed=opts.drop_upstreamed,
        independent=opts.independent,
        to_drop=to_drop,
        found=[UpstreamRecord.of(found[p.file]) for p in pstates if p.file in found],
        rerere=str(opts.rerere) if opts.rerere else "",
    )
    for i, how in loose.items():
        log.warning(
            f"{pstates[i].file}: does not apply on its base {base_sha[:12] if base_sha else ''} as it is; "
            f"taken there with {how}, so that its 3-way merge has that base"
        )
    for p in pstates:
        if p.file in found and not opts.drop_upstreamed:
            log.warning(
                f"{p.file}: {printable(found[p.file].describe())}; proposed for dropping "
                "(--drop-upstreamed drops it, `--drop PATCH` drops one)"
            )
    state.save(opts.workdir)
    return run(opts.workdir, state, opts.rerere, finish)


def _candidate(p: Patch, data: bytes) -> Candidate:
    parts = split_parts(data)
    return Candidate(
        file=p.filename,
        subject=p.subject,
        header=(parts.head + parts.message).decode("utf-8", "replace"),
        diff=parts.diff,
        files=p.files,
    )


def refresh_continue(
    workdir: Path,
    *,
    drop_stopped: bool = False,
    drop: Sequence[str] = (),
    drop_only: bool = False,
    rerere: Path | None = None,
) -> RefreshResult:
    """Go on after a stop: commit the person's resolution of the stopped patch (record it
    in ``rerere``, the caller's store), or with ``drop_stopped`` (``--skip``) drop the
    stopped patch; ``drop`` names more patches (the stopped one: the same as
    ``drop_stopped``, later ones: left out when reached). ``drop_only`` (neither
    --continue nor --skip given): ``drop`` must name the stopped patch."""
    with _locked(workdir):
        return _continue(workdir, drop_stopped=drop_stopped, drop=drop, drop_only=drop_only, rerere=rerere)


def _continue(
    workdir: Path, *, drop_stopped: bool, drop: Sequence[str], drop_only: bool, rerere: Path | None
) -> RefreshResult:
    state = RefreshState.load(workdir)
    if state.done:  # only a run killed while writing the result leaves such a state
        log.warning(f"{workdir}: every patch was done; writing the refreshed series (again)")
        return finish(workdir, state, again=True)
    check_sources_unchanged(state, workdir)
    tree = workdir / "tree"
    tip = state.tip  # where the stopped patch was merged onto
    if not state.stop_kind:  # it was merging, not stopped, when its process was killed
        log.warning(
            f"{workdir}: the refresh was cut off at {state.current.file} (killed?), not stopped "
            "there; going on from the last patch done"
        )
        scratch_git(tree, "reset", "-q", "--hard", tip)
        scratch_git(tree, "clean", "-q", "-f", "-d")
        return run(workdir, state, rerere, finish)
    if head(tree) != tip and not drop and not drop_stopped:
        return _committed_already(workdir, state, tip, rerere)
    idxs = _resolve_names(state.patches, drop)
    named_current = state.next_index in idxs
    if drop_only and not named_current:
        raise ConfigError(problem=DropAloneLater(current=state.current.file, name=drop[0]))
    for i in idxs:
        if i < state.next_index:
            raise ConfigError(
                problem=DropRefreshedAlready(
                    file=state.patches[i].file, name=state.patches[i].name, current=state.current.file
                )
            )
        if i == state.next_index:
            drop_stopped = True
        elif state.patches[i].file not in state.to_drop:
            state.to_drop.append(state.patches[i].file)
    patch = state.current
    if drop_stopped:
        scratch_git(tree, "reset", "-q", "--hard", "HEAD")
        scratch_git(tree, "clean", "-q", "-f", "-d")
        state.drop_current("--drop" if named_current else "skipped at a stop")
        log.info(f"dropped {patch.file} (it leaves the series)")
        recorded.clear_stop(state, workdir)
        state.save(workdir)
        return run(workdir, state, rerere, finish)
    left = unmerged(tree)
    if left:
        raise PatchError(problem=StillUnmerged(patch=patch.file, files=tuple(left), tree=tree))
    unstaged = out(tree, "diff", "--name-only").split()
    if unstaged:
        raise PatchError(problem=NotStaged(patch=patch.file, files=tuple(unstaged), tree=tree))
    markers = [
        ln
        for ln in scratch_git(tree, "diff", "--cached", "--check", check=False).stdout.splitlines()
        if "conflict marker" in ln
    ]
    if markers:
        raise PatchError(problem=MarkersLeft(patch=patch.file, file=markers[0].split(":")[0], tree=tree))
    _check_staged(tree, patch.file)
    _graft(workdir, state)
    recorded.learn(state, workdir, rerere)
    commit_staged(tree, patch.name)
    state.advance(head(tree))
    state.stop_kind, state.conflicts = "", []
    state.save(workdir)
    recorded.clear_stop(state, workdir)  # the kept conflicts go once the state no longer names them
    return run(workdir, state, rerere, finish)


def _committed_already(workdir: Path, state: RefreshState, tip: str, rerere: Path | None) -> RefreshResult:
    """A ``--continue`` killed after it committed the resolution, before it saved that: the
    commit on top of the last patch done is the stopped patch's."""
    tree = workdir / "tree"
    now = head(tree)
    if out(tree, "rev-parse", f"{now}^").strip() != tip or out(tree, "diff", "--name-only", "HEAD").strip():
        raise PatchError(problem=TreeMoved(workdir=workdir, patch=state.current.file))
    log.warning(f"{workdir}: {state.current.file} was committed by a --continue that was cut off; going on")
    state.advance(now)
    state.stop_kind, state.conflicts = "", []
    state.save(workdir)
    recorded.clear_stop(state, workdir)
    return run(workdir, state, rerere, finish)


def _check_staged(tree: Path, file: str) -> None:
    """What the person staged becomes the patch: refuse it as the series loader would
    (a path outside the worktree, a symlink leading out of it), before anything is
    committed; the stop stays where it is."""
    diff = scratch_git(
        tree,
        "diff",
        "--cached",
        "--no-color",
        "--no-ext-diff",
        "--no-renames",
        "--binary",
        "HEAD",
        binary=True,
    ).data
    refused = refusals(parse_diff(diff.decode("utf-8", "replace")))
    if refused:
        raise PatchError(
            problem=ResolutionRefused(patch=file, refusal=refused[0], more=len(refused) - 1, tree=tree)
        )


def _graft(workdir: Path, state: RefreshState) -> None:
    """Files the person staged that the scratch tree lacked but upstream has at ``onto``
    (a resolution that reaches beyond the series' files, e.g. a CMakeLists.txt): put
    upstream's version of them into the new base and every commit since, so that the
    patch's diff edits them instead of creating them."""
    tree = workdir / "tree"
    added = [
        ln.split("\t", 1)[1]
        for ln in out(tree, "diff", "--cached", "--name-status", "--no-renames", "HEAD").splitlines()
        if ln.startswith("A\t")
    ]
    if not added:
        return
    try:
        entries = Git(Path(state.repo)).tree_entries([state.onto], added)[0]
    except SourceError:
        return
    if not entries:
        return
    index = private_index(tree, workdir / "graft.index")
    chain = [state.base, *(c for c in state.commits if c)]
    remap: dict[str, str] = {}
    parent = ""
    try:
        for c in chain:
            index.read_tree(c)
            index.set_entries(entries)
            tid = index.write_tree()
            msg = out(tree, "log", "-1", "--format=%B", c)
            # independent patches each sit on the new base, stacked ones on the one before
            on = remap[state.base] if state.independent and c != state.base else parent
            remap[c] = index.commit(tid, parents=[on] if on else [], message=(msg.strip() or "graft") + "\n")
            parent = remap[c]
    finally:
        index.index.unlink(missing_ok=True)
    tip = state.tip
    state.remap_commits(remap)
    scratch_git(tree, "reset", "-q", "--soft", remap[tip])
    log.info(f"took upstream's {', '.join(sorted(entries))} into the refresh (the resolution edits them)")


def refresh_abort(workdir: Path) -> None:
    """Drop a refresh in progress: its work folder goes, patches/ was never touched.

    Works on a damaged state file too; a folder that holds anything but what a refresh
    writes there is never removed. Resolutions recorded at earlier ``--continue`` s stay
    in the cache: a new refresh replays them.
    """
    if not (workdir / STATE_FILE).is_file():
        raise NoRefresh(workdir)
    with _locked(workdir):
        foreign = first_foreign(
            workdir,
            sorted(p.name for p in workdir.iterdir()),
            files=OWNED_FILES.__contains__,
            dirs=dict.fromkeys(OWNED_DIRS),
        )
        if foreign is not None:
            raise PatchError(problem=ForeignInWorkdir(workdir=workdir, name=foreign.name, link=foreign.link))
        rmtree(workdir)
