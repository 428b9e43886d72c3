"""`patchkit refresh`: rebase the series onto a new upstream commit with 3-way merges,
stopping only where a person is needed.

The work happens in a scratch repository (``WORKDIR/tree``) that borrows the
upstream's objects through ``objects/info/alternates`` (nothing is written into
the upstream repository) and whose base commit holds only the files the series
touches. The series is first replayed on the files of its current base (the
recipe's pin), one commit per patch, each named after its patch file (the name a
conflict marker shows); the new commit's files then become a second root, and each
patch commit is cherry-picked onto it: a real 3-way merge whose merge base is the
patch's parent, so it works for patch N on top of 1..N-1 and needs no ``index``
lines. A patch that does not apply on the old base (or when no base is known) falls
back to ``git apply --3way``.

Before anything is merged, the patches already upstream are found
(:mod:`patchkit.upkeep.upstreamed`: patch-id, cherry-pick, pull request, title); just
before each merge, whether its change is there already (it reverse-applies: the
``effect`` rule). With ``drop_upstreamed`` those are dropped on the way (no stop, no
restart); without it they are merged as usual and named in the result and at any stop
("proposed for dropping"), and one that merges to nothing stops (``--skip`` drops it).
A clean merge that adds lines upstream added meanwhile a second time stops too.

At a conflict the refresh stops, names the patch, each conflicted file's blocks (lines,
the patch's hunk, a short excerpt), the upstream commits in ``old..new`` that last
touched those lines and, for a patch written on top of one that was dropped, that it is
a cascade of it; its progress is kept in ``WORKDIR/refresh-state.json`` for
``--continue`` (the person's resolution, which is recorded: :mod:`patchkit.upkeep.rerere`
replays it when the same conflict comes again), ``--skip`` / ``--drop PATCH`` and
``--abort``. The hint is the exact command (recipe, ``--workdir``) that goes on.

When every patch is in, each patch file's diff is replaced (its header, message and a
fresh diffstat kept: :func:`patchkit.spec.patchdoc.replace_diff`), dropped patches leave
the series (their files are removed), the series' sha256 lines are updated, and (only
when asked) the recipe's ``upstream.commit`` moves. All files are written to temp files
first and then renamed into place, so an error leaves patches/ as it was.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

from patchkit.core.errors import ConfigError, PatchError, RecipeError, SourceError
from patchkit.core.fs import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_many,
    sha256_bytes,
    sha256_file,
)
from patchkit.core.log import log
from patchkit.core.proc import RunResult
from patchkit.core.record import RecordError, decode, encode, meta
from patchkit.git.repo import CommitInfo, Git, TreeEntry
from patchkit.git.runner import run_git, scratch_env
from patchkit.spec.patchdoc import replace_diff, split_parts
from patchkit.spec.patchfile import parse_diff
from patchkit.spec.series import Patch
from patchkit.upkeep import rerere
from patchkit.upkeep.check import in_when_range
from patchkit.upkeep.conflict import added_runs, describe_file, find_run, last_touched
from patchkit.upkeep.upstreamed import Candidate, Upstreamed, duplicated_runs, find_upstreamed

__all__ = [
    "STATE_FILE",
    "Dropped",
    "RefreshOptions",
    "RefreshResult",
    "move_recipe_pin",
    "refresh_abort",
    "refresh_continue",
    "refresh_in_progress",
    "refresh_start",
]

STATE_FILE = "refresh-state.json"
_STATE_VERSION = 2
_CONFLICT_LIMIT = 8 << 20  # bytes of one conflicted file kept to learn its resolution from


@dataclasses.dataclass(frozen=True, kw_only=True)
class RefreshOptions:
    repo: Path  # the upstream repository (read-only)
    patches: tuple[Patch, ...]  # in series order
    patches_dir: Path
    onto: str
    workdir: Path
    base: str | None = None  # where the series applies today (the recipe pin); see module doc
    recipe_path: Path | None = None
    move_pin: bool = False
    # more recipes whose pin moves with recipe_path's (`patchkit bump`): all or none
    more_recipes: tuple[Path, ...] = ()
    drop_upstreamed: bool = False  # drop the patches found upstream instead of merging them
    drop: tuple[str, ...] = ()  # patches (names or files) to leave out from the start
    command: str = ""  # how hints name this refresh ("patchkit refresh NAME"; '' plain)
    hint_workdir: bool = True  # hints say --workdir (the user gave one)
    rerere: Path | None = None  # the recorded resolutions (None: none kept or replayed)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Dropped:
    file: str
    reason: str  # "already upstream (subject): abc123 ...", "--drop", "skipped at a stop", ...
    commit: CommitInfo | None = None  # the upstream commit that has it, when known

    def to_json(self) -> dict[str, object]:
        return {
            "patch": self.file,
            "reason": self.reason,
            "commit": None if self.commit is None else self.commit.sha,
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class RefreshResult:
    onto: str
    updated: tuple[str, ...]  # patch files whose bytes changed
    unchanged: tuple[str, ...]
    skipped: tuple[str, ...]  # outside their When range at onto: left as they were
    pin_moved: bool
    dropped: tuple[Dropped, ...] = ()  # left the series (upstream, --skip, --drop, empty)
    upstream: tuple[Upstreamed, ...] = ()  # found upstream but kept: proposed for dropping
    reused: int = 0  # conflict blocks resolved from recorded resolutions


def _scratch_git(
    tree: Path,
    *args: str,
    check: bool = True,
    input: bytes | None = None,
    binary: bool = False,
    index: Path | None = None,
) -> RunResult:
    env = scratch_env(tree.parent)
    env["GIT_CONFIG_GLOBAL"] = os.devnull  # the user's conflict style, hooks, rerere: not here
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)
    return run_git(
        tree,
        "-c",
        "merge.conflictStyle=diff3",
        "-c",
        "rerere.enabled=false",
        *args,
        check=check,
        input=input,
        binary=binary,
        env=env,
        error=PatchError,
        identity=True,
        what=f"git {args[0]} in {tree}",
    )


def _out(tree: Path, *args: str) -> str:
    return _scratch_git(tree, *args).stdout


# -- state ---------------------------------------------------------------------------------
# refresh-state.json is a RefreshState record (patchkit.core.record): its fields are the
# file format, one converter reads and writes it, and ``load`` adds what no type says (the
# counters agree, the files it will rewrite are a patches/ folder's and recipes).
@dataclasses.dataclass(frozen=True, kw_only=True)
class PatchState:
    name: str
    file: str
    sha256: str  # of the patch file when the refresh started
    skip: bool  # outside its When range at onto: left as it is


@dataclasses.dataclass(frozen=True, kw_only=True)
class FoundState:
    """A patch found upstream (a rule of upkeep.upstreamed, or ``effect``)."""

    file: str
    rule: str
    detail: str = ""
    sha: str = ""  # the upstream commit ('' when none was found)
    date: str = ""
    subject: str = ""

    def found(self) -> Upstreamed:
        commit = CommitInfo(sha=self.sha, date=self.date, subject=self.subject) if self.sha else None
        return Upstreamed(file=self.file, rule=self.rule, commit=commit, detail=self.detail)

    @classmethod
    def of(cls, u: Upstreamed) -> FoundState:
        c = u.commit
        return cls(
            file=u.file,
            rule=u.rule,
            detail=u.detail,
            sha=c.sha if c else "",
            date=c.date if c else "",
            subject=c.subject if c else "",
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class DropState:
    file: str
    reason: str
    sha: str = ""
    date: str = ""
    subject: str = ""

    def dropped(self) -> Dropped:
        commit = CommitInfo(sha=self.sha, date=self.date, subject=self.subject) if self.sha else None
        return Dropped(file=self.file, reason=self.reason, commit=commit)


@dataclasses.dataclass(kw_only=True)
class RefreshState:
    """A refresh in progress (``WORKDIR/refresh-state.json``), advanced one patch at a time."""

    version: int = _STATE_VERSION  # another version's state is not read (load says so)
    repo: str
    onto: str
    base: str  # the scratch commit the patches are replayed onto
    old_root: str = ""  # the scratch commit of the old base's files ('' without a base)
    upstream_base: str = ""  # the upstream commit the series applied on ('' unknown)
    patches_dir: str
    recipe: str | None = dataclasses.field(metadata=meta(absent=None))
    move_pin: bool
    patches: list[PatchState]
    next: int = dataclasses.field(default=0, metadata=meta(required=True))  # the patch to do next
    # one per patch done (None: not applied: outside When, dropped)
    commits: list[str | None] = dataclasses.field(default_factory=list, metadata=meta(required=True))
    # on the old base
    old_commits: list[str | None] = dataclasses.field(default_factory=list, metadata=meta(required=True))
    # pins moved with recipe's; the key only when there are any
    more_recipes: list[str] = dataclasses.field(default_factory=list, metadata=meta(omit="empty"))
    command: str = ""
    hint_workdir: bool = True
    drop_upstreamed: bool = False
    to_drop: list[str] = dataclasses.field(default_factory=list)  # files to drop when reached
    found: list[FoundState] = dataclasses.field(default_factory=list)
    dropped: list[DropState] = dataclasses.field(default_factory=list)
    rerere: str = ""  # the store's folder ('' none)
    reused: int = 0
    stop: str = ""  # why it stopped: conflict | apply | empty | duplicate ('' running)
    conflicts: list[str] = dataclasses.field(default_factory=list)  # files saved in conflicts/

    @property
    def recipes(self) -> list[str]:
        return ([self.recipe] if self.recipe else []) + self.more_recipes

    def finding(self, file: str) -> Upstreamed | None:
        return next((f.found() for f in self.found if f.file == file), None)

    def save(self, workdir: Path) -> None:
        atomic_write_json(workdir / STATE_FILE, encode(self))

    @classmethod
    def load(cls, workdir: Path) -> RefreshState:
        path = workdir / STATE_FILE
        if not path.is_file():
            raise PatchError(
                f"no refresh in progress in {workdir}",
                hint="start one with `patchkit refresh --onto COMMIT` (a refresh started with "
                "--workdir DIR is found with the same --workdir)",
            )
        try:
            if path.stat().st_size > _MAX_STATE:
                raise ValueError(f"larger than {_MAX_STATE >> 20} MiB")
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError, RecursionError) as e:
            raise PatchError(
                f"{path} is unreadable ({str(e)[:200] or type(e).__name__})", hint=_abort(workdir)
            ) from None
        if not isinstance(data, dict) or data.get("version") != _STATE_VERSION:
            raise PatchError(f"{path} was written by another patchkit version", hint=_abort(workdir))
        try:
            state = decode(cls, data)
        except RecordError:
            raise PatchError(
                f"{path} is damaged (a field is missing or of the wrong type)", hint=_abort(workdir)
            ) from None
        if (
            not (0 <= state.next <= len(state.patches))
            or len(state.commits) != state.next
            or len(state.old_commits) != len(state.patches)
        ):
            raise PatchError(f"{path} is damaged (its counters disagree)", hint=_abort(workdir))
        # what --continue will read and rewrite: patch files in patches/, the recipe file
        pdir = Path(state.patches_dir)
        bad = next(
            (
                p.file
                for p in state.patches
                if Path(p.file).name != p.file or p.file in ("", ".", "..") or "\\" in p.file
            ),
            None,
        )
        if (
            bad is not None
            or not (pdir.is_absolute() and (pdir / "series").is_file())
            or any(
                not (Path(r).is_absolute() and r.endswith(".toml") and Path(r).is_file())
                for r in state.recipes
            )
            or any(Path(c).name != c or not re.fullmatch(r"[0-9a-f]{64}\.txt", c) for c in state.conflicts)
            # a dropped patch's file is removed at the end: only ever one of the series'
            or any(
                f not in {p.file for p in state.patches}
                for f in [*state.to_drop, *(d.file for d in state.dropped)]
            )
        ):
            raise PatchError(
                f"{path} is damaged (it names files outside a patches/ folder or a recipe that is not there)",
                hint=_abort(workdir),
            )
        return state


def _command(of: RefreshState | RefreshOptions, workdir: Path) -> Callable[[str], str]:
    """The command line that does ``action`` to this refresh, as the user can type it: the
    prefix the CLI gave (``patchkit refresh NAME``), ``--workdir`` when one was given."""
    prefix = of.command or "patchkit refresh"
    where = f" --workdir {shlex.quote(str(workdir))}" if of.hint_workdir or not of.command else ""

    def cmd(action: str) -> str:
        return f"{prefix} {action}{where}"

    return cmd


def _abort(workdir: Path, of: RefreshState | None = None) -> str:
    action = (
        _command(of, workdir)("--abort")
        if of
        else f"patchkit refresh --abort --workdir {shlex.quote(str(workdir))}"
    )
    return f"run `{action}` and start again"


_MAX_STATE = 16 << 20


def _check_sources_unchanged(state: RefreshState, workdir: Path) -> None:
    for p in state.patches:
        if any(d.file == p.file for d in state.dropped):
            continue  # it leaves the series: its bytes do not matter
        path = Path(state.patches_dir) / p.file
        if not path.is_file() or sha256_file(path) != p.sha256:
            raise PatchError(f"{path} changed since the refresh started", hint=_abort(workdir, state))


def _resolve_names(patches: Sequence[PatchState], names: Sequence[str]) -> list[int]:
    """Indexes of the patches ``names`` (patch names or file names) designate."""
    out: list[int] = []
    for n in names:
        hits = [i for i, p in enumerate(patches) if n in (p.name, p.file)]
        if not hits:
            known = ", ".join(p.file for p in patches[:6]) + (" …" if len(patches) > 6 else "")
            raise ConfigError(f"--drop {n}: no such patch in this refresh (it has {known})")
        out.append(hits[0])
    return out


# -- start / continue / abort --------------------------------------------------------------
def refresh_in_progress(workdir: Path) -> bool:
    """Whether a refresh is in progress in ``workdir`` (stopped at a conflict, its state
    kept for ``--continue`` / ``--abort``)."""
    return (workdir / STATE_FILE).is_file()


def refresh_start(opts: RefreshOptions) -> RefreshResult:
    """Apply the series onto ``opts.onto``; PatchError (state kept) at the first stop."""
    cmd = _command(opts, opts.workdir)
    if (opts.workdir / STATE_FILE).exists():
        raise PatchError(
            f"a refresh is already in progress in {opts.workdir}",
            hint=f"finish it with `{cmd('--continue')}` or drop it with `{cmd('--abort')}`",
        )
    if not opts.patches:
        raise PatchError("no patches to refresh")
    git = Git(opts.repo)
    onto = git.resolve(opts.onto)
    datas = [p.read_verified() for p in opts.patches]
    skip = [not in_when_range(git, p, onto) for p in opts.patches]
    pstates = [
        PatchState(name=p.name, file=p.filename, sha256=sha256_bytes(d), skip=s)
        for p, d, s in zip(opts.patches, datas, skip)
    ]
    to_drop = [pstates[i].file for i in _resolve_names(pstates, opts.drop)]
    paths: list[str] = []
    for data, s in zip(datas, skip):
        if not s:
            files = parse_diff(data.decode("utf-8", "replace")).paths
            paths.extend(f for f in files if f not in paths)

    if opts.workdir.exists() and any(opts.workdir.iterdir()):
        raise PatchError(
            f"work folder {opts.workdir} is not empty",
            hint="remove it, or pass --workdir with an empty or new folder",
        )
    base_sha = git.resolve(opts.base) if opts.base else None
    found: dict[str, Upstreamed] = {}
    if base_sha:
        with log.step("looking for patches already upstream"):
            found = find_upstreamed(
                git, base_sha, onto, [_candidate(p, d) for p, d, s in zip(opts.patches, datas, skip) if not s]
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
        old_root, old_commits = _make_scratch(
            git,
            tree,
            onto,
            paths,
            base_sha,
            [None if s else f for f, s in zip(pfiles, skip)],
            [p.filename for p in opts.patches],
        )
    except BaseException:
        _rmtree(opts.workdir)
        raise
    state = RefreshState(
        repo=str(opts.repo),
        onto=onto,
        base=_out(tree, "rev-parse", "HEAD").strip(),
        old_root=old_root,
        upstream_base=base_sha or "",
        patches_dir=str(opts.patches_dir),
        recipe=str(opts.recipe_path) if opts.recipe_path else None,
        move_pin=opts.move_pin,
        more_recipes=[str(r) for r in opts.more_recipes],
        patches=pstates,
        old_commits=old_commits,
        command=opts.command,
        hint_workdir=opts.hint_workdir,
        drop_upstreamed=opts.drop_upstreamed,
        to_drop=to_drop,
        found=[FoundState.of(found[p.file]) for p in pstates if p.file in found],
        rerere=str(opts.rerere) if opts.rerere else "",
    )
    for p in pstates:
        if p.file in found and not opts.drop_upstreamed:
            log.warning(
                f"{p.file}: {found[p.file].describe()}; proposed for dropping "
                "(--drop-upstreamed drops it, `--drop PATCH` drops one)"
            )
    state.save(opts.workdir)
    return _run(opts.workdir, state)


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
    workdir: Path, *, skip: bool = False, drop: Sequence[str] = (), drop_only: bool = False
) -> RefreshResult:
    """Go on after a stop: commit the person's resolution of the stopped patch (record it),
    or with ``skip`` drop the stopped patch; ``drop`` names more patches (the stopped one:
    the same as ``skip``, later ones: left out when reached). ``drop_only`` (neither
    --continue nor --skip given): ``drop`` must name the stopped patch."""
    state = RefreshState.load(workdir)
    cmd = _command(state, workdir)
    _check_sources_unchanged(state, workdir)
    tree = workdir / "tree"
    if state.next >= len(state.patches):
        raise PatchError(f"{workdir}: every patch is done; nothing to continue", hint=_abort(workdir, state))
    idxs = _resolve_names(state.patches, drop)
    named_current = state.next in idxs
    if drop_only and not named_current:
        raise ConfigError(
            f"the refresh stands at {state.patches[state.next].file}: --drop alone drops that one; "
            "a later patch goes with --continue or --skip",
            hint=f"e.g. `{cmd('--continue --drop ' + shlex.quote(drop[0]))}`",
        )
    for i in idxs:
        if i < state.next:
            raise ConfigError(
                f"--drop {state.patches[i].file}: it is refreshed already (the refresh stands at "
                f"{state.patches[state.next].file})",
                hint=f"`{cmd('--abort')}`, then start again with --drop {state.patches[i].name}",
            )
        if i == state.next:
            skip = True
        elif state.patches[i].file not in state.to_drop:
            state.to_drop.append(state.patches[i].file)
    patch = state.patches[state.next]
    if skip:
        _scratch_git(tree, "reset", "-q", "--hard", "HEAD")
        _scratch_git(tree, "clean", "-q", "-f", "-d")
        _drop(state, state.next, "--drop" if named_current else "skipped at a stop")
        log.info(f"dropped {patch.file} (it leaves the series)")
        _clear_stop(state, workdir)
        state.next += 1
        state.save(workdir)
        return _run(workdir, state)
    unmerged = _unmerged(tree)
    if unmerged:
        raise PatchError(
            f"{patch.file}: still unmerged: {', '.join(unmerged)}",
            hint=f"fix them in {tree}, `git -C {shlex.quote(str(tree))} add` them, then "
            f"`{cmd('--continue')}` (or `{cmd('--skip')}` to drop {patch.file})",
        )
    unstaged = _out(tree, "diff", "--name-only").split()
    if unstaged:
        raise PatchError(
            f"{patch.file}: changes not staged: {', '.join(unstaged)}",
            hint=f"`git -C {shlex.quote(str(tree))} add` them (or `git -C {shlex.quote(str(tree))} checkout` "
            f"them away), then `{cmd('--continue')}`",
        )
    markers = [
        ln
        for ln in _scratch_git(tree, "diff", "--cached", "--check", check=False).stdout.splitlines()
        if "conflict marker" in ln
    ]
    if markers:
        raise PatchError(
            f"{patch.file}: conflict markers left: {markers[0].split(':')[0]}",
            hint=f"edit the file in {tree}, `git add` it, then `{cmd('--continue')}`",
        )
    _graft(workdir, state)
    _learn(state, workdir)
    _clear_stop(state, workdir)
    _commit(tree, patch.name)
    state.commits.append(_out(tree, "rev-parse", "HEAD").strip())
    state.next += 1
    state.save(workdir)
    return _run(workdir, state)


def _graft(workdir: Path, state: RefreshState) -> None:
    """Files the person staged that the scratch tree lacked but upstream has at ``onto``
    (a resolution that reaches beyond the series' files, e.g. a CMakeLists.txt): put
    upstream's version of them into the new base and every commit since, so that the
    patch's diff edits them instead of creating them."""
    tree = workdir / "tree"
    added = [
        ln.split("\t", 1)[1]
        for ln in _out(tree, "diff", "--cached", "--name-status", "--no-renames", "HEAD").splitlines()
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
    index = workdir / "graft.index"
    chain = [state.base, *(c for c in state.commits if c)]
    remap: dict[str, str] = {}
    parent = ""
    try:
        for c in chain:
            _scratch_git(tree, "read-tree", c, index=index)
            info = "".join(f"{e.mode} {e.oid}\t{p}\n" for p, e in entries.items())
            _scratch_git(tree, "update-index", "--index-info", input=info.encode("utf-8"), index=index)
            tid = _scratch_git(tree, "write-tree", index=index).stdout.strip()
            msg = _out(tree, "log", "-1", "--format=%B", c)
            args = ["commit-tree", tid, "-m", msg.strip() or "graft"]
            if parent:
                args[2:2] = ["-p", parent]
            parent = _scratch_git(tree, *args).stdout.strip()
            remap[c] = parent
    finally:
        index.unlink(missing_ok=True)
    state.base = remap[state.base]
    state.commits = [remap[c] if c else None for c in state.commits]
    _scratch_git(tree, "reset", "-q", "--soft", parent)
    log.info(f"took upstream's {', '.join(sorted(entries))} into the refresh (the resolution edits them)")


_OURS = {STATE_FILE, "tree", "patches", "conflicts", "cascade.index", "graft.index", "effect.patch"}


def refresh_abort(workdir: Path) -> None:
    """Drop a refresh in progress: its work folder goes, patches/ was never touched.

    Works on a damaged state file too; a folder that holds anything but what a refresh
    writes there is never removed. Resolutions recorded at earlier ``--continue`` s stay
    in the cache: a new refresh replays them.
    """
    if not (workdir / STATE_FILE).is_file():
        raise PatchError(
            f"no refresh in progress in {workdir}",
            hint="start one with `patchkit refresh --onto COMMIT` (a refresh started with "
            "--workdir DIR is found with the same --workdir)",
        )
    foreign = sorted(p.name for p in workdir.iterdir() if p.name not in _OURS)
    if foreign:
        raise PatchError(
            f"{workdir} holds {foreign[0]}, which a refresh did not write: not removing it",
            hint="remove the folder by hand",
        )
    _rmtree(workdir)


# -- the work --------------------------------------------------------------------------
def _make_scratch(
    git: Git,
    tree: Path,
    onto: str,
    paths: Sequence[str],
    base: str | None,
    pfiles: Sequence[Path | None],
    names: Sequence[str],
) -> tuple[str, list[str | None]]:
    """Set up the scratch repo; returns the old base's root commit ('' without a base) and
    the patch commits made on it (None: not made)."""
    commits = [base, onto] if base else [onto]
    all_entries = git.tree_entries(commits, paths)
    git.read_blobs(
        e.oid for ents in all_entries for e in ents.values() if e.mode != "160000"
    )  # fetches them once if the source is partial
    _scratch_git(tree, "init", "-q")
    alt = tree / ".git" / "objects" / "info" / "alternates"
    alt.write_text(str(git.objects_dir()) + "\n", encoding="utf-8")
    promisor = _promisor_url(git)
    if promisor:  # let the scratch repo fetch blobs lazily, like its source
        for key, value in (
            ("core.repositoryformatversion", "1"),
            ("extensions.partialClone", "origin"),
            ("remote.origin.url", promisor),
            ("remote.origin.promisor", "true"),
            ("remote.origin.partialclonefilter", "blob:none"),
        ):
            _scratch_git(tree, "config", key, value)
    old_commits: list[str | None] = [None] * len(pfiles)
    old_root = ""
    if base:
        _load_root(tree, paths, all_entries[0], f"upstream {base[:12]} (the series' base)")
        old_root = _out(tree, "rev-parse", "HEAD").strip()
        for i, pfile in enumerate(pfiles):
            if pfile is None:
                continue
            proc = _scratch_git(tree, "apply", "--index", "--whitespace=nowarn", str(pfile), check=False)
            if proc.ok:
                _commit(tree, names[i])  # the name a conflict marker shows
                old_commits[i] = _out(tree, "rev-parse", "HEAD").strip()
        _scratch_git(tree, "update-ref", "refs/patchkit/old", "HEAD")
    _load_root(tree, paths, all_entries[-1], f"upstream {onto[:12]}, the files the series touches")
    return old_root, old_commits


def _load_root(tree: Path, paths: Sequence[str], entries: dict[str, TreeEntry], msg: str) -> None:
    """Make HEAD a new root commit holding exactly ``entries``, and check it out."""
    for p in paths:
        (tree / p).unlink(missing_ok=True)
    _scratch_git(tree, "read-tree", "--empty")
    info = "".join(f"{e.mode} {e.oid}\t{p}\n" for p, e in entries.items())
    _scratch_git(tree, "update-index", "--index-info", input=info.encode("utf-8"))
    _scratch_git(tree, "checkout-index", "-a", "-f", "-u")
    tree_id = _out(tree, "write-tree").strip()
    commit = _out(tree, "commit-tree", tree_id, "-m", msg).strip()
    _scratch_git(tree, "update-ref", "HEAD", commit)


def _promisor_url(git: Git) -> str | None:
    remote = git.config("extensions.partialClone")
    if not remote:
        return None
    url = git.config(f"remote.{remote}.url")
    if url and not re.match(r"^[a-z][a-z0-9+.-]*://", url) and not Path(url).is_absolute():
        url = str((git.repo / url).resolve())
    return url or None


def _commit(tree: Path, name: str) -> None:
    _scratch_git(tree, "commit", "-q", "--allow-empty", "--no-verify", "-m", name)


def _unmerged(tree: Path) -> list[str]:
    return sorted({ln.split("\t", 1)[1] for ln in _out(tree, "ls-files", "-u").splitlines() if "\t" in ln})


def _drop(state: RefreshState, i: int, reason: str, found: Upstreamed | None = None) -> None:
    p = state.patches[i]
    c = found.commit if found else None
    state.dropped.append(
        DropState(
            file=p.file,
            reason=reason,
            sha=c.sha if c else "",
            date=c.date if c else "",
            subject=c.subject if c else "",
        )
    )
    state.commits.append(None)


def _patch_diff(workdir: Path, state: RefreshState, i: int) -> bytes:
    """Patch ``i``'s diff as it was made (on the old base), or its file's bytes."""
    tree = workdir / "tree"
    old = state.old_commits[i]
    if old:
        return _scratch_git(
            tree,
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--binary",
            "--no-renames",
            f"{old}^",
            old,
            binary=True,
        ).data
    return (workdir / "patches" / f"{i:04d}.patch").read_bytes()


def _upstream_git(state: RefreshState) -> Git | None:
    try:
        return Git(Path(state.repo)) if state.upstream_base else None
    except SourceError:
        return None


def _effect(workdir: Path, state: RefreshState, i: int) -> Upstreamed | None:
    """The ``effect`` rule: patch ``i``'s change is in the tree already (it reverse-applies);
    the upstream commit that last touched the lines it adds, when there is one."""
    tree = workdir / "tree"
    diff = _patch_diff(workdir, state, i)
    if not diff.strip():
        return None
    pfile = workdir / "effect.patch"
    pfile.write_bytes(diff)
    proc = _scratch_git(tree, "apply", "-R", "--check", "--whitespace=nowarn", str(pfile), check=False)
    pfile.unlink(missing_ok=True)
    if not proc.ok:
        return None
    p = state.patches[i]
    commit = _blame_added(state, diff.decode("utf-8", "replace"))
    return Upstreamed(file=p.file, rule="effect", commit=commit)


def _blame_added(state: RefreshState, diff: str) -> CommitInfo | None:
    """The upstream commit in base..onto that last touched the longest run of lines the
    diff adds (in upstream's new file)."""
    git = _upstream_git(state)
    if git is None:
        return None
    best: tuple[int, str, list[str]] | None = None
    for path in parse_diff(diff).paths:
        for run in added_runs(diff, path):
            if best is None or len(run) > best[0]:
                best = (len(run), path, run)
    if best is None:
        return None
    _, path, run = best
    try:
        text = git.run("cat-file", "blob", f"{state.onto}:{path}")
    except SourceError:  # not there: no commit to name
        return None
    hits = find_run(text.splitlines(), run)
    if not hits:
        return None
    culprits = last_touched(git, state.upstream_base, state.onto, path, hits[0] + 1, len(run))
    return culprits[0].commit if culprits else None


def _run(workdir: Path, state: RefreshState) -> RefreshResult:
    tree = workdir / "tree"
    while state.next < len(state.patches):
        i = state.next
        p = state.patches[i]
        found = state.finding(p.file)
        if p.skip:
            state.commits.append(None)
        elif p.file in state.to_drop:
            _drop(state, i, "--drop")
            log.info(f"dropped {p.file} (--drop)")
        elif found is not None and state.drop_upstreamed:
            _drop(state, i, found.describe(), found)
            log.info(f"dropped {p.file}: {found.describe()}")
        elif (effect := _effect(workdir, state, i)) is not None and state.drop_upstreamed:
            state.found.append(FoundState.of(effect))
            _drop(state, i, effect.describe(), effect)
            log.info(f"dropped {p.file}: {effect.describe()}")
        else:
            if effect is not None and found is None:
                state.found.append(FoundState.of(effect))
                log.warning(f"{p.file}: {effect.describe()}; proposed for dropping")
            try:
                _merge(workdir, state, i)
            except _Dropped as d:
                if state.finding(p.file) is None:
                    state.found.append(FoundState.of(d.found))
                _drop(state, i, d.found.describe(), d.found)
                log.info(f"dropped {p.file}: merged, it changes nothing: {d.found.describe()}")
            else:
                _commit(tree, p.name)
                state.commits.append(_out(tree, "rev-parse", "HEAD").strip())
        state.next = i + 1
        state.save(workdir)
    return _finish(workdir, state)


def _merge(workdir: Path, state: RefreshState, i: int) -> None:
    """Merge patch ``i`` into the tree (staged), replaying recorded resolutions; a
    PatchError (state kept) where a person is needed."""
    tree = workdir / "tree"
    p = state.patches[i]
    old = state.old_commits[i]
    if old:
        proc = _scratch_git(tree, "cherry-pick", "--no-commit", old, check=False)
    else:
        pfile = workdir / "patches" / f"{i:04d}.patch"
        proc = _scratch_git(tree, "apply", "--3way", "--whitespace=nowarn", str(pfile), check=False)
    if not proc.ok:
        unmerged = _unmerged(tree)
        if unmerged and _replay(workdir, state, i, unmerged):
            return
        state.stop = "conflict" if unmerged else "apply"
        state.save(workdir)
        _stop(workdir, state, i, proc, unmerged)
    if not _out(tree, "diff", "--cached", "--name-only", "HEAD").strip():
        found = state.finding(p.file) or Upstreamed(
            file=p.file,
            rule="effect",
            commit=_blame_added(state, _patch_diff(workdir, state, i).decode("utf-8", "replace")),
        )
        if state.drop_upstreamed:
            _scratch_git(tree, "reset", "-q", "--hard", "HEAD")
            raise _Dropped(found)
        state.stop = "empty"
        state.save(workdir)
        cmd = _command(state, workdir)
        raise PatchError(
            f"refresh stopped at {p.file}: merged onto {state.onto[:12]} it changes nothing: "
            f"{found.describe()}",
            hint=f"`{cmd('--skip')}` drops it; `{cmd('--continue')}` goes on (an empty patch leaves "
            f"the series at the end); `{cmd('--abort')}` stops (a refresh started with "
            "--drop-upstreamed drops such patches without stopping)",
        )
    dups = _duplicates(workdir, state, i)
    if dups:
        state.stop = "duplicate"
        state.save(workdir)
        known = state.finding(p.file)
        cmd = _command(state, workdir)
        detail = [*((f"{p.file} is {known.describe()}",) if known else ()), *dups]
        raise PatchError(
            f"refresh stopped at {p.file}: the 3-way merge was clean but adds lines upstream "
            "added meanwhile a second time",
            detail="\n".join([*detail, f"the merged files are in {tree} (staged)"]),
            hint=f"remove the second copy, `git -C {shlex.quote(str(tree))} add` the file, then "
            f"`{cmd('--continue')}`; `{cmd('--skip')}` drops {p.file}",
        )


class _Dropped(Exception):
    """Patch merged to nothing with drop_upstreamed: :func:`_run` drops it."""

    def __init__(self, found: Upstreamed) -> None:
        super().__init__(found.describe())
        self.found = found


def _duplicates(workdir: Path, state: RefreshState, i: int) -> list[str]:
    """Lines of the stopped patch's files that the clean merge put in a second time."""
    tree = workdir / "tree"
    old = state.old_commits[i]
    diff = _patch_diff(workdir, state, i).decode("utf-8", "replace")
    out: list[str] = []
    for path in parse_diff(diff).paths:
        if not added_runs(diff, path):
            continue
        before = _show(tree, f"{old}^:{path}") if old else ""
        upstream = _show(tree, f"HEAD:{path}")
        merged = _show(tree, f":{path}")
        if upstream is None or merged is None:
            continue
        for at, run in duplicated_runs(diff, path, before=before or "", upstream=upstream, merged=merged):
            commit = _blame_added(state, _as_diff(path, run))
            who = f" (upstream {commit.short} {commit.subject[:80]} added them)" if commit else ""
            where = ", ".join(str(n) for n in at)
            out.append(
                f"{path}:{at[0]}: {len(run)} lines the patch adds are there twice now (lines {where}){who}"
            )
            out += [f"    | {r.rstrip()[:160]}" for r in run[:6]]
    return out


def _as_diff(path: str, run: Sequence[str]) -> str:
    body = "".join(f"+{r}\n" for r in run)
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -0,0 +1,{len(run)} @@\n{body}"


def _show(tree: Path, spec: str) -> str | None:
    proc = _scratch_git(tree, "show", spec, check=False, binary=True)
    if not proc.ok or len(proc.data) > _CONFLICT_LIMIT:
        return None
    return proc.data.decode("utf-8", "surrogateescape")


# -- conflicts: recorded resolutions, what the stop says ------------------------------------------
def _store(state: RefreshState) -> rerere.Store | None:
    return rerere.Store(Path(state.rerere)) if state.rerere else None


def _read_text(path: Path) -> str | None:
    try:
        if not path.is_file() or path.stat().st_size > _CONFLICT_LIMIT:
            return None
        return path.read_bytes().decode("utf-8", "surrogateescape")
    except OSError:
        return None


def _replay(workdir: Path, state: RefreshState, i: int, unmerged: list[str]) -> bool:
    """Resolve the conflicts from recorded resolutions; True when every file was (then
    staged), else the known blocks are put in place and the rest left for the person."""
    store = _store(state)
    if store is None:
        return False
    tree = workdir / "tree"
    done: list[tuple[str, rerere.Replay]] = []
    saved: list[tuple[str, str]] = []
    for path in unmerged:
        text = _read_text(tree / path)
        if text is None:
            return False
        rep = rerere.replay(text, store)
        saved.append((path, text))
        done.append((path, rep))
    complete = all(rep.complete for _, rep in done)
    for path, rep in done:
        if rep.reused:
            (tree / path).write_bytes(rep.text.encode("utf-8", "surrogateescape"))
            state.reused += rep.reused
            log.info(
                f"{state.patches[i].file}: {path}: reused a recorded resolution for "
                f"{rep.reused} of {rep.blocks} conflict(s)"
            )
    if complete:
        for path, _ in done:
            _scratch_git(tree, "add", "--", path)
        return True
    _save_conflicts(workdir, state, saved)
    return False


def _save_conflicts(workdir: Path, state: RefreshState, files: Sequence[tuple[str, str]]) -> None:
    """Keep each conflicted file as the merge left it, to learn its resolution from at
    --continue (conflicts/<sha256 of the path>.txt: first line the path)."""
    cdir = workdir / "conflicts"
    cdir.mkdir(exist_ok=True)
    state.conflicts = []
    for path, text in files:
        name = hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest() + ".txt"
        atomic_write_bytes(cdir / name, (path + "\n" + text).encode("utf-8", "surrogateescape"))
        state.conflicts.append(name)


def _clear_stop(state: RefreshState, workdir: Path) -> None:
    state.stop = ""
    state.conflicts = []
    shutil.rmtree(workdir / "conflicts", ignore_errors=True)


def _learn(state: RefreshState, workdir: Path) -> None:
    """Record how the person resolved each saved conflict (from the staged files)."""
    store = _store(state)
    if store is None or not state.conflicts:
        return
    tree = workdir / "tree"
    learned = lost = 0
    for name in state.conflicts:
        raw = _read_text(workdir / "conflicts" / name)
        if raw is None or "\n" not in raw:
            continue
        path, conflicted = raw.split("\n", 1)
        resolved = _show(tree, f":{path}")
        if resolved is None:
            continue
        found, missed = rerere.learn(conflicted, resolved)
        lost += missed
        for block, lines in found:
            if store.put(block, lines):
                learned += 1
    if learned:
        log.info(f"recorded {learned} conflict resolution(s) in {store.root}")
    if lost:
        log.warning(f"{lost} conflict resolution(s) could not be recorded (the text around them changed)")


def _cascade(workdir: Path, state: RefreshState, i: int) -> list[str]:
    """The left-out patches (dropped, or outside When) patch ``i`` was written on top of and
    does not apply without: it conflicts because of them. [] when it applies on the old
    base without them (its conflicts are its own) or nothing is known."""
    if not state.old_root or not state.old_commits[i]:
        return []
    pdir = workdir / "patches"

    def files(j: int) -> set[str]:
        return set(parse_diff((pdir / f"{j:04d}.patch").read_bytes().decode("utf-8", "replace")).paths)

    mine = files(i)
    out_idx = [
        j
        for j in range(i)
        if state.commits[j] is None and state.old_commits[j] is not None and files(j) & mine
    ]
    if not out_idx:
        return []
    tree = workdir / "tree"
    index = workdir / "cascade.index"

    def applies_without(skip: set[int]) -> bool:
        _scratch_git(tree, "read-tree", state.old_root, index=index)
        for j in range(i):
            if state.old_commits[j] is None or j in skip:
                continue
            _scratch_git(
                tree,
                "apply",
                "--cached",
                "--whitespace=nowarn",
                str(pdir / f"{j:04d}.patch"),
                check=False,
                index=index,
            )
        proc = _scratch_git(
            tree,
            "apply",
            "--cached",
            "--check",
            "--whitespace=nowarn",
            str(pdir / f"{i:04d}.patch"),
            check=False,
            index=index,
        )
        return proc.ok

    try:
        if applies_without(set(out_idx)):
            return []
        culprits = [j for j in out_idx if applies_without(set(out_idx) - {j})]
        return [state.patches[j].file for j in (culprits or out_idx)]
    finally:
        index.unlink(missing_ok=True)


def _blame_head(workdir: Path, state: RefreshState, path: str, first: int, count: int) -> list[str]:
    """The patches of this refresh (their commits' names) that last touched those lines of
    ``path`` at the scratch HEAD, most lines first; the new base's lines are upstream's."""
    tree = workdir / "tree"
    proc = _scratch_git(
        tree, "blame", "--porcelain", "-L", f"{first},+{min(count, 400)}", "HEAD", "--", path, check=False
    )
    if not proc.ok:
        return []
    per: dict[str, int] = {}
    names: dict[str, str] = {}
    cur = ""
    for line in proc.stdout.splitlines():
        m = re.match(r"^([0-9a-f]{40}) \d+ \d+", line)
        if m:
            cur = m.group(1)
        elif line.startswith("summary ") and cur:
            names[cur] = line.removeprefix("summary ")
        elif line.startswith("\t") and cur:
            per[cur] = per.get(cur, 0) + 1
    files = {p.name: p.file for p in state.patches} | {p.file: p.file for p in state.patches}
    ranked = sorted((c for c in per if names.get(c) in files), key=lambda c: -per[c])
    return list(dict.fromkeys(files[names[c]] for c in ranked))


def _stop(workdir: Path, state: RefreshState, i: int, proc: RunResult, unmerged: list[str]) -> None:
    tree = workdir / "tree"
    p = state.patches[i]
    cmd = _command(state, workdir)
    qtree = shlex.quote(str(tree))
    lines: list[str] = []
    found = state.finding(p.file)
    if found is not None:
        lines.append(f"{p.file} is {found.describe()}: `{cmd('--skip')}` drops it")
    cascade = _cascade(workdir, state, i)
    if cascade:
        why = {d.file: d.reason for d in state.dropped}
        names = ", ".join(f"{c} ({why.get(c, 'outside its When range')})" for c in cascade)
        lines.append(
            f"a cascade: {p.file} was written on top of {names}, left out of this refresh; "
            "it does not apply without it on the old base either"
        )
    diff = _patch_diff(workdir, state, i).decode("utf-8", "replace")
    git = _upstream_git(state)
    named: list[str] = []
    if unmerged:
        for path in unmerged:
            text = _read_text(tree / path)
            if text is None:
                lines.append(f"{path}: too big or unreadable to show here: see {tree / path}")
                continue
            flines, commits = describe_file(
                git=git,
                old=state.upstream_base,
                new=state.onto,
                path=path,
                full_path=tree / path,
                text=text,
                new_text=_show(tree, f"{state.base}:{path}"),
                patch_diff=diff,
                head_text=_show(tree, f"HEAD:{path}"),
                blame_head=lambda path, first, count: _blame_head(workdir, state, path, first, count),
            )
            lines += flines
            for c in commits:
                if c.short not in named:
                    named.append(c.short)
        what = f"conflicts in {', '.join(unmerged)}"
        if cascade:
            what += f" (a cascade of {', '.join(cascade)})"
        elif named:
            what += f" (upstream {', '.join(named[:3])})"
        else:
            earlier = [
                ln.split("the earlier patch ", 1)[1].split(" did", 1)[0]
                for ln in lines
                if "the earlier patch " in ln
            ]
            if earlier:
                what += f" (lines from the earlier patch {earlier[0]})"
        lines.append(f"the files with conflict markers are in {tree}")
        raise PatchError(
            f"refresh stopped at {p.file}: {what}",
            detail="\n".join(lines),
            hint=f"fix them, `git -C {qtree} add` them, then `{cmd('--continue')}`; "
            f"`{cmd('--skip')}` drops {p.file}; `{cmd('--abort')}` stops the refresh",
        )
    text = proc.stdout + proc.stderr
    errors = [ln.removeprefix("error: ") for ln in text.splitlines() if ln.startswith("error: ")]
    raise PatchError(
        f"refresh stopped at {p.file}: it does not apply and cannot be 3-way merged"
        + (f" ({errors[0]})" if errors else "")
        + (f" (a cascade of {', '.join(cascade)})" if cascade else ""),
        detail="\n".join([*lines, *errors[1:]]),
        hint=f"apply it by hand in {tree}, `git -C {qtree} add` the files, then "
        f"`{cmd('--continue')}`; `{cmd('--skip')}` drops {p.file}; `{cmd('--abort')}` stops the refresh",
    )


def _finish(workdir: Path, state: RefreshState) -> RefreshResult:
    _check_sources_unchanged(state, workdir)
    tree = workdir / "tree"
    pdir = Path(state.patches_dir)
    prev = state.base
    writes: dict[Path, bytes] = {}
    updated: list[str] = []
    unchanged: list[str] = []
    skipped: list[str] = []
    new_hashes: dict[str, str] = {}
    dropped_files = {d.file for d in state.dropped}
    for p, commit in zip(state.patches, state.commits):
        if commit is None:
            if p.file not in dropped_files:
                skipped.append(p.file)
            continue
        diff = _scratch_git(
            tree,
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--no-renames",
            "--binary",
            "-U3",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            prev,
            commit,
            binary=True,
        ).data
        prev = commit
        if not diff.strip():
            found = state.finding(p.file)
            state.dropped.append(
                DropState(
                    file=p.file,
                    reason=f"empty on top of {state.onto[:12]}"
                    + (f": {found.describe()}" if found else ": upstream has the change"),
                    sha=found.commit.sha if found and found.commit else "",
                    date=found.commit.date if found and found.commit else "",
                    subject=found.commit.subject if found and found.commit else "",
                )
            )
            continue
        old = (pdir / p.file).read_bytes()
        new = replace_diff(old, diff)
        if new == old:
            unchanged.append(p.file)
        else:
            updated.append(p.file)
            writes[pdir / p.file] = new
            new_hashes[p.file] = sha256_bytes(new)
    dropped_files = {d.file for d in state.dropped}
    if new_hashes or dropped_files:
        series = pdir / "series"
        writes[series] = _rewrite_series(
            series.read_text(encoding="utf-8"), new_hashes, dropped_files
        ).encode("utf-8")
    pin_moved = False
    if state.move_pin:
        for recipe in state.recipes:  # every recipe's pin or none: one atomic_write_many
            rpath = Path(recipe)
            text = rpath.read_text(encoding="utf-8")
            new_text = move_recipe_pin(text, state.onto, where=str(rpath))
            if new_text != text:
                writes[rpath] = new_text.encode("utf-8")
                pin_moved = True
    atomic_write_many(writes)
    for f in sorted(dropped_files):  # out of the series now: their files go too
        (pdir / f).unlink(missing_ok=True)
    _rmtree(workdir)
    return RefreshResult(
        onto=state.onto,
        updated=tuple(updated),
        unchanged=tuple(unchanged),
        skipped=tuple(skipped),
        pin_moved=pin_moved,
        dropped=tuple(d.dropped() for d in state.dropped),
        upstream=tuple(f.found() for f in state.found if f.file not in dropped_files),
        reused=state.reused,
    )


# -- file rewriting ------------------------------------------------------------------------
def _rewrite_series(text: str, new_hashes: dict[str, str], dropped: set[str] | None = None) -> str:
    out: list[str] = []
    for raw in text.splitlines(keepends=True):
        body = raw.split("#", 1)[0]
        fields = body.split()
        if fields and dropped and fields[0] in dropped:
            continue
        if fields and fields[0] in new_hashes:
            raw = re.sub(r"sha256=[0-9a-fA-F]{64}", f"sha256={new_hashes[fields[0]]}", raw, count=1)
        out.append(raw)
    return "".join(out)


_TABLE = re.compile(r"^\s*\[\s*([A-Za-z0-9_.\"-]+)\s*\]")
_COMMIT_LINE = re.compile(r"^(\s*commit\s*=\s*[\"'])([0-9a-f]{40})([\"'].*)$", re.DOTALL)


def move_recipe_pin(text: str, commit: str, *, where: str = "recipe") -> str:
    """The recipe text with ``[upstream] commit`` set to ``commit``; every other byte kept."""
    lines = text.splitlines(keepends=True)
    table = None
    for n, line in enumerate(lines):
        m = _TABLE.match(line)
        if m:
            table = m.group(1).strip('"')
            continue
        if table == "upstream":
            c = _COMMIT_LINE.match(line)
            if c:
                lines[n] = c.group(1) + commit + c.group(3)
                return "".join(lines)
    raise RecipeError(f'{where}: no `commit = "<40 hex>"` line in [upstream] to move')


def _rmtree(path: Path) -> None:
    def onerror(func, p, _exc):  # type: ignore[no-untyped-def]  # read-only git objects on Windows
        os.chmod(p, stat.S_IWRITE)
        func(p)

    if path.exists():
        shutil.rmtree(path, onerror=onerror)
