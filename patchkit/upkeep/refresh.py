"""`patchkit refresh`: rebase the series onto a new upstream commit with 3-way merges.

The work happens in a scratch repository (``WORKDIR/tree``) that borrows the
upstream's objects through ``objects/info/alternates`` (nothing is written into
the upstream repository) and whose base commit holds only the files the series
touches. The series is first replayed on the files of its current base (the
recipe's pin), one commit per patch; the new commit's files then become a second
root, and each patch commit is cherry-picked onto it: a real 3-way merge whose
merge base is the patch's parent, so it works for patch N on top of 1..N-1 and
needs no ``index`` lines. A patch that does not apply on the old base (or when no
base is known) falls back to ``git apply --3way``. On a real conflict the refresh stops, leaves
the tree for the user to fix, and records its progress in
``WORKDIR/refresh-state.json`` for ``--continue`` / ``--abort``.

When every patch is in, each patch file is rewritten as its original header plus
``git diff`` between consecutive commits, the series' sha256 lines are updated,
and (only when asked) the recipe's ``upstream.commit`` moves to the new commit.
All files are written to temp files first and then renamed into place, so an
error leaves patches/ as it was.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from patchkit.core.errors import PatchError, RecipeError
from patchkit.core.fs import atomic_write_json, atomic_write_many, sha256_bytes, sha256_file
from patchkit.core.proc import RunResult
from patchkit.core.record import RecordError, decode, encode, meta
from patchkit.git.repo import Git, TreeEntry
from patchkit.git.runner import run_git, scratch_env
from patchkit.spec.patchfile import parse_diff
from patchkit.spec.series import Patch
from patchkit.upkeep.check import in_when_range

__all__ = [
    "STATE_FILE",
    "RefreshOptions",
    "RefreshResult",
    "move_recipe_pin",
    "refresh_abort",
    "refresh_continue",
    "refresh_in_progress",
    "refresh_start",
]

STATE_FILE = "refresh-state.json"
_STATE_VERSION = 1


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class RefreshResult:
    onto: str
    updated: tuple[str, ...]  # patch files whose bytes changed
    unchanged: tuple[str, ...]
    skipped: tuple[str, ...]  # outside their When range at onto: left as they were
    pin_moved: bool


def _scratch_git(
    tree: Path, *args: str, check: bool = True, input: bytes | None = None, binary: bool = False
) -> RunResult:
    return run_git(
        tree,
        *args,
        check=check,
        input=input,
        binary=binary,
        env=scratch_env(tree.parent),
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


@dataclasses.dataclass(kw_only=True)
class RefreshState:
    """A refresh in progress (``WORKDIR/refresh-state.json``), advanced one patch at a time."""

    version: int = _STATE_VERSION  # another version's state is not read (load says so)
    repo: str
    onto: str
    base: str  # the scratch commit the patches are replayed onto
    patches_dir: str
    recipe: str | None = dataclasses.field(metadata=meta(absent=None))
    move_pin: bool
    patches: list[PatchState]
    next: int = dataclasses.field(default=0, metadata=meta(required=True))  # the patch to do next
    # one per patch done
    commits: list[str | None] = dataclasses.field(default_factory=list, metadata=meta(required=True))
    # on the old base
    old_commits: list[str | None] = dataclasses.field(default_factory=list, metadata=meta(required=True))
    # pins moved with recipe's; the key only when there are any
    more_recipes: list[str] = dataclasses.field(default_factory=list, metadata=meta(omit="empty"))

    @property
    def recipes(self) -> list[str]:
        return ([self.recipe] if self.recipe else []) + self.more_recipes

    def save(self, workdir: Path) -> None:
        atomic_write_json(workdir / STATE_FILE, encode(self))

    @classmethod
    def load(cls, workdir: Path) -> RefreshState:
        path = workdir / STATE_FILE
        if not path.is_file():
            raise PatchError(
                f"no refresh in progress in {workdir}", hint="start one with `patchkit refresh --onto COMMIT`"
            )
        try:
            if path.stat().st_size > _MAX_STATE:
                raise ValueError(f"larger than {_MAX_STATE >> 20} MiB")
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError, RecursionError) as e:
            raise PatchError(
                f"{path} is unreadable ({str(e)[:200] or type(e).__name__})", hint=_ABORT
            ) from None
        if not isinstance(data, dict) or data.get("version") != _STATE_VERSION:
            raise PatchError(f"{path} was written by another patchkit version", hint=_ABORT)
        try:
            state = decode(cls, data)
        except RecordError:
            raise PatchError(
                f"{path} is damaged (a field is missing or of the wrong type)", hint=_ABORT
            ) from None
        if (
            not (0 <= state.next <= len(state.patches))
            or len(state.commits) != state.next
            or len(state.old_commits) != len(state.patches)
        ):
            raise PatchError(f"{path} is damaged (its counters disagree)", hint=_ABORT)
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
        ):
            raise PatchError(
                f"{path} is damaged (it names files outside a patches/ folder or a recipe that is not there)",
                hint=_ABORT,
            )
        return state


_ABORT = "run `patchkit refresh --abort` and start again"
_MAX_STATE = 16 << 20


def _check_sources_unchanged(state: RefreshState) -> None:
    for p in state.patches:
        path = Path(state.patches_dir) / p.file
        if not path.is_file() or sha256_file(path) != p.sha256:
            raise PatchError(f"{path} changed since the refresh started", hint=_ABORT)


# -- start / continue / abort --------------------------------------------------------------
def refresh_in_progress(workdir: Path) -> bool:
    """Whether a refresh is in progress in ``workdir`` (stopped at a conflict, its state
    kept for ``--continue`` / ``--abort``)."""
    return (workdir / STATE_FILE).is_file()


def refresh_start(opts: RefreshOptions) -> RefreshResult:
    """Apply the series onto ``opts.onto``; PatchError (state kept) at the first conflict."""
    if (opts.workdir / STATE_FILE).exists():
        raise PatchError(
            f"a refresh is already in progress in {opts.workdir}",
            hint="finish it with `patchkit refresh --continue` or drop it with `patchkit refresh --abort`",
        )
    if not opts.patches:
        raise PatchError("no patches to refresh")
    git = Git(opts.repo)
    onto = git.resolve(opts.onto)
    datas = [p.read_verified() for p in opts.patches]
    skip = [not in_when_range(git, p, onto) for p in opts.patches]
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
    tree = opts.workdir / "tree"
    tree.mkdir(parents=True)
    try:
        pdir = opts.workdir / "patches"
        pdir.mkdir()
        pfiles = []
        for i, data in enumerate(datas):
            pfiles.append(pdir / f"{i:04d}.patch")
            pfiles[-1].write_bytes(data)
        base_sha = git.resolve(opts.base) if opts.base else None
        old_commits = _make_scratch(
            git, tree, onto, paths, base_sha, [None if s else f for f, s in zip(pfiles, skip)]
        )
    except BaseException:
        _rmtree(opts.workdir)
        raise
    state = RefreshState(
        repo=str(opts.repo),
        onto=onto,
        base=_out(tree, "rev-parse", "HEAD").strip(),
        patches_dir=str(opts.patches_dir),
        recipe=str(opts.recipe_path) if opts.recipe_path else None,
        move_pin=opts.move_pin,
        more_recipes=[str(r) for r in opts.more_recipes],
        patches=[
            PatchState(name=p.name, file=p.filename, sha256=sha256_bytes(d), skip=s)
            for p, d, s in zip(opts.patches, datas, skip)
        ],
        old_commits=old_commits,
    )
    state.save(opts.workdir)
    return _run(opts.workdir, state)


def refresh_continue(workdir: Path) -> RefreshResult:
    """Commit the user's resolution of the stopped patch and go on."""
    state = RefreshState.load(workdir)
    _check_sources_unchanged(state)
    tree = workdir / "tree"
    if state.next >= len(state.patches):
        raise PatchError(f"{workdir}: every patch is done; nothing to continue", hint=_ABORT)
    patch = state.patches[state.next]
    unmerged = sorted(
        {ln.split("\t", 1)[1] for ln in _out(tree, "ls-files", "-u").splitlines() if "\t" in ln}
    )
    if unmerged:
        raise PatchError(
            f"{patch.file}: still unmerged: {', '.join(unmerged)}",
            hint=f"fix them in {tree}, `git -C {tree} add` them, then --continue",
        )
    unstaged = _out(tree, "diff", "--name-only").split()
    if unstaged:
        raise PatchError(
            f"{patch.file}: changes not staged: {', '.join(unstaged)}",
            hint=f"`git -C {tree} add` them (or `git -C {tree} checkout` them away)",
        )
    markers = [
        ln
        for ln in _scratch_git(tree, "diff", "--cached", "--check", check=False).stdout.splitlines()
        if "conflict marker" in ln
    ]
    if markers:
        raise PatchError(
            f"{patch.file}: conflict markers left: {markers[0].split(':')[0]}",
            hint=f"edit the file in {tree}, `git add` it, then --continue",
        )
    _commit(tree, patch.name)
    state.commits.append(_out(tree, "rev-parse", "HEAD").strip())
    state.next += 1
    state.save(workdir)
    return _run(workdir, state)


_OURS = {STATE_FILE, "tree", "patches"}


def refresh_abort(workdir: Path) -> None:
    """Drop a refresh in progress: its work folder goes, patches/ was never touched.

    Works on a damaged state file too; a folder that holds anything but what a refresh
    writes there is never removed.
    """
    if not (workdir / STATE_FILE).is_file():
        raise PatchError(
            f"no refresh in progress in {workdir}", hint="start one with `patchkit refresh --onto COMMIT`"
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
    git: Git, tree: Path, onto: str, paths: Sequence[str], base: str | None, pfiles: Sequence[Path | None]
) -> list[str | None]:
    """Set up the scratch repo; returns the patch commits made on ``base`` (None: not made)."""
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
    if base:
        _load_root(tree, paths, all_entries[0], f"upstream {base[:12]} (the series' base)")
        for i, pfile in enumerate(pfiles):
            if pfile is None:
                continue
            proc = _scratch_git(tree, "apply", "--index", "--whitespace=nowarn", str(pfile), check=False)
            if proc.ok:
                _commit(tree, f"patch {i}")
                old_commits[i] = _out(tree, "rev-parse", "HEAD").strip()
        _scratch_git(tree, "update-ref", "refs/patchkit/old", "HEAD")
    _load_root(tree, paths, all_entries[-1], f"upstream {onto[:12]}, the files the series touches")
    return old_commits


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


def _run(workdir: Path, state: RefreshState) -> RefreshResult:
    tree = workdir / "tree"
    while state.next < len(state.patches):
        i = state.next
        p = state.patches[i]
        if p.skip:
            state.commits.append(None)
        else:
            old = state.old_commits[i]
            if old:
                proc = _scratch_git(tree, "cherry-pick", "--no-commit", old, check=False)
            else:
                pfile = workdir / "patches" / f"{i:04d}.patch"
                proc = _scratch_git(tree, "apply", "--3way", "--whitespace=nowarn", str(pfile), check=False)
            if not proc.ok:
                state.save(workdir)
                _stop(tree, p, proc)
            _commit(tree, p.name)
            state.commits.append(_out(tree, "rev-parse", "HEAD").strip())
        state.next = i + 1
        state.save(workdir)
    return _finish(workdir, state)


def _stop(tree: Path, p: PatchState, proc: RunResult) -> None:
    text = proc.stdout + proc.stderr
    unmerged = sorted(
        {ln.split("\t", 1)[1] for ln in _out(tree, "ls-files", "-u").splitlines() if "\t" in ln}
    )
    if unmerged:
        raise PatchError(
            f"refresh stopped at {p.file}: conflicts in {', '.join(unmerged)}",
            detail=f"the files with conflict markers are in {tree}",
            hint=f"fix them, `git -C {tree} add` them, then `patchkit refresh --continue` "
            "(or `patchkit refresh --abort`)",
        )
    errors = [ln.removeprefix("error: ") for ln in text.splitlines() if ln.startswith("error: ")]
    raise PatchError(
        f"refresh stopped at {p.file}: it does not apply and cannot be 3-way merged"
        + (f" ({errors[0]})" if errors else ""),
        detail="\n".join(errors[1:]),
        hint=f"apply it by hand in {tree}, `git -C {tree} add` the files, then "
        "`patchkit refresh --continue` (or `patchkit refresh --abort`)",
    )


def _finish(workdir: Path, state: RefreshState) -> RefreshResult:
    _check_sources_unchanged(state)
    tree = workdir / "tree"
    pdir = Path(state.patches_dir)
    prev = state.base
    writes: dict[Path, bytes] = {}
    updated: list[str] = []
    unchanged: list[str] = []
    skipped: list[str] = []
    empty: list[str] = []
    new_hashes: dict[str, str] = {}
    for p, commit in zip(state.patches, state.commits):
        if commit is None:
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
            empty.append(p.file)
            continue
        old = (pdir / p.file).read_bytes()
        cut = re.search(rb"^diff --git ", old, re.MULTILINE)
        header = old[: cut.start()] if cut else old
        new = header + diff
        if new == old:
            unchanged.append(p.file)
        else:
            updated.append(p.file)
            writes[pdir / p.file] = new
            new_hashes[p.file] = sha256_bytes(new)
    if empty:
        raise PatchError(
            f"{', '.join(empty)}: empty on top of {state.onto[:12]}: upstream already has the change",
            hint="drop it from patches/series (nothing was written), then "
            "`patchkit refresh --abort` and start again",
        )
    if new_hashes:
        series = pdir / "series"
        writes[series] = _rewrite_series(series.read_text(encoding="utf-8"), new_hashes).encode("utf-8")
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
    _rmtree(workdir)
    return RefreshResult(
        onto=state.onto,
        updated=tuple(updated),
        unchanged=tuple(unchanged),
        skipped=tuple(skipped),
        pin_moved=pin_moved,
    )


# -- file rewriting ------------------------------------------------------------------------
def _rewrite_series(text: str, new_hashes: dict[str, str]) -> str:
    out: list[str] = []
    for raw in text.splitlines(keepends=True):
        body = raw.split("#", 1)[0]
        fields = body.split()
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
