"""The merge loop: each patch in turn, left out (outside its When range, ``--drop``,
found upstream with ``drop_upstreamed``), or merged onto the new base and committed;
a stop (:mod:`patchkit.upkeep.refresh.stop`) where a person is needed, the state saved
after every patch. A clean merge is looked over for what upstream's change may have
made wrong (:mod:`patchkit.upkeep.refresh.review`: "merged cleanly, review")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from patchkit.core.errors import SourceError
from patchkit.core.log import log
from patchkit.core.text import printable
from patchkit.git.repo import CommitInfo
from patchkit.spec.patchfile import parse_diff
from patchkit.upkeep.conflict import added_runs, find_run, last_touched
from patchkit.upkeep.refresh import recorded
from patchkit.upkeep.refresh.options import Duplicate, RefreshResult
from patchkit.upkeep.refresh.review import Finding, Upstream, review_patch
from patchkit.upkeep.refresh.scratch import commit_staged, head, out, scratch_git, show, unmerged
from patchkit.upkeep.refresh.state import RefreshState
from patchkit.upkeep.refresh.stop import duplicate_stop, empty_stop, merge_stop, patch_diff, upstream_git
from patchkit.upkeep.upstreamed import Upstreamed, confirmed, duplicated_runs

__all__ = ["run"]


class _MergedToNothing(Exception):
    """A patch merged to nothing with drop_upstreamed: :func:`run` drops it."""

    def __init__(self, upstreamed: Upstreamed) -> None:
        super().__init__(upstreamed.describe())
        self.upstreamed = upstreamed


def run(
    workdir: Path,
    state: RefreshState,
    rerere: Path | None,
    finish: Callable[[Path, RefreshState], RefreshResult],
) -> RefreshResult:
    """Merge the patches from the current one on, then ``finish``."""
    tree = workdir / "tree"
    reviewing: dict[str, Upstream] = {}
    while not state.done:
        i = state.next_index
        p = state.current
        upstreamed = state.upstreamed(p.file)
        if state.independent and not p.outside_when and head(tree) != state.base:
            # each independent patch is merged onto the new base alone
            scratch_git(tree, "reset", "-q", "--hard", state.base)
            scratch_git(tree, "clean", "-q", "-f", "-d")
        if p.outside_when:
            state.advance(None)
        elif p.file in state.to_drop:
            state.drop_current("--drop")
            log.info(f"dropped {p.file} (--drop)")
        elif upstreamed is not None and upstreamed.proven and state.drop_upstreamed:
            state.drop_current(upstreamed.describe(), upstreamed)
            log.info(f"dropped {p.file}: {printable(upstreamed.describe())}")
        elif (effect := _effect(workdir, state, i)) is not None and state.drop_upstreamed:
            # a title or a pull request only suggests; the change being there proves
            proof = effect if upstreamed is None else confirmed(upstreamed, effect)
            state.note_upstream(effect)
            state.drop_current(proof.describe(), proof)
            log.info(f"dropped {p.file}: {printable(proof.describe())}")
        else:
            if effect is not None and upstreamed is None:
                state.note_upstream(effect)
                log.warning(f"{p.file}: {printable(effect.describe())}; proposed for dropping")
            elif upstreamed is not None and state.drop_upstreamed:
                log.warning(f"{p.file}: {printable(upstreamed.describe())}; proposed for dropping, merged")
            try:
                clean = _merge(workdir, state, i, rerere)
            except _MergedToNothing as d:
                state.note_upstream(d.upstreamed)
                state.drop_current(d.upstreamed.describe(), d.upstreamed)
                log.info(
                    f"dropped {p.file}: merged, it changes nothing: {printable(d.upstreamed.describe())}"
                )
            else:
                if clean:
                    _review(workdir, state, i, reviewing)
                commit_staged(tree, p.name)
                state.advance(head(tree))
        state.save(workdir)
    return finish(workdir, state)


def _review(
    workdir: Path, state: RefreshState, i: int, reviewing: dict[str, Upstream], skip: set[str] | None = None
) -> list[Finding]:
    """Patch ``i`` merged cleanly (but for the files in ``skip``, which conflicted): what of
    it to review, kept in the state (upstream's side read once per run, in ``reviewing``)."""
    git = upstream_git(state)
    if git is None:
        return []
    up = reviewing.setdefault("up", Upstream(git, state.upstream_base, state.onto))
    findings = [
        f
        for f in review_patch(up, patch_diff(workdir, state, i).decode("utf-8", "replace"))
        if f.path not in (skip or set())
    ]
    if findings:
        state.note_review(state.patches[i].file, findings)
    return findings


def _merge(workdir: Path, state: RefreshState, i: int, rerere: Path | None) -> bool:
    """Merge patch ``i`` into the tree (staged), replaying recorded resolutions; a
    RefreshStopped (state kept) where a person is needed. True when the merge was clean
    (no conflict, nothing replayed)."""
    tree = workdir / "tree"
    p = state.patches[i]
    old = state.old_commits[i]
    if old:
        proc = scratch_git(tree, "cherry-pick", "--no-commit", old, check=False)
    else:
        pfile = workdir / "patches" / f"{i:04d}.patch"
        proc = scratch_git(tree, "apply", "--3way", "--whitespace=nowarn", str(pfile), check=False)
    if not proc.ok:
        files = unmerged(tree)
        if files:
            files = recorded.replay(workdir, state, files, rerere)
            if not files:
                return False
        state.stop_kind = "conflict" if files else "apply"
        # the files that did merge cleanly are the person's to review too: said at the stop
        reviewed = _review(workdir, state, i, {}, skip=set(files)) if files else []
        state.save(workdir)
        merge_stop(workdir, state, i, proc, files, review=reviewed)
    if not out(tree, "diff", "--cached", "--name-only", "HEAD").strip():
        effect = Upstreamed(
            file=p.file,
            rule="effect",
            commit=_blame_added(state, patch_diff(workdir, state, i).decode("utf-8", "replace")),
        )
        found = state.upstreamed(p.file)
        upstreamed = effect if found is None else found if found.proven else confirmed(found, effect)
        if state.drop_upstreamed:
            scratch_git(tree, "reset", "-q", "--hard", "HEAD")
            raise _MergedToNothing(upstreamed)
        state.stop_kind = "empty"
        state.save(workdir)
        empty_stop(workdir, state, i, upstreamed)
    dups = _duplicates(workdir, state, i)
    if dups:
        state.stop_kind = "duplicate"
        state.save(workdir)
        duplicate_stop(workdir, state, i, dups)
    return proc.ok


def _effect(workdir: Path, state: RefreshState, i: int) -> Upstreamed | None:
    """The ``effect`` rule: patch ``i``'s change is in the tree already (it reverse-applies);
    the upstream commit that last touched the lines it adds, when there is one."""
    tree = workdir / "tree"
    diff = patch_diff(workdir, state, i)
    if not diff.strip():
        return None
    pfile = workdir / "effect.patch"
    pfile.write_bytes(diff)
    proc = scratch_git(tree, "apply", "-R", "--check", "--whitespace=nowarn", str(pfile), check=False)
    pfile.unlink(missing_ok=True)
    if not proc.ok or not _modes_there(tree, diff.decode("utf-8", "replace")):
        return None
    p = state.patches[i]
    commit = _blame_added(state, diff.decode("utf-8", "replace"))
    return Upstreamed(file=p.file, rule="effect", commit=commit)


def _modes_there(tree: Path, diff: str) -> bool:
    """Every mode the diff gives a file (``new mode``, a new file's mode) is the file's in
    the tree: ``git apply -R --check`` only warns about a mode, so a patch that makes a
    file executable would otherwise read as already there."""
    wanted = {f.new_path: f.new_mode for f in parse_diff(diff).files if f.new_mode and not f.deleted}
    if not wanted:
        return True
    listing = out(tree, "ls-files", "-s", "--", *wanted)
    have = {ln.split("\t", 1)[1]: ln.split(" ", 1)[0] for ln in listing.splitlines() if "\t" in ln}
    return all(have.get(path) == mode for path, mode in wanted.items())


def _blame_added(state: RefreshState, diff: str) -> CommitInfo | None:
    """The upstream commit in base..onto that last touched the longest run of lines the
    diff adds (in upstream's new file)."""
    git = upstream_git(state)
    if git is None:
        return None
    best: tuple[int, str, list[str]] | None = None
    for path in parse_diff(diff).paths:
        for lines in added_runs(diff, path):
            if best is None or len(lines) > best[0]:
                best = (len(lines), path, lines)
    if best is None:
        return None
    _, path, lines = best
    try:
        text = git.run("cat-file", "blob", f"{state.onto}:{path}")
    except SourceError:  # not there: no commit to name
        return None
    hits = find_run(text.splitlines(), lines)
    if not hits:
        return None
    culprits = last_touched(git, state.upstream_base, state.onto, path, hits[0] + 1, len(lines))
    return culprits[0].commit if culprits else None


def _duplicates(workdir: Path, state: RefreshState, i: int) -> list[Duplicate]:
    """Lines of the stopped patch's files that the clean merge put in a second time."""
    tree = workdir / "tree"
    old = state.old_commits[i]
    diff = patch_diff(workdir, state, i).decode("utf-8", "replace")
    found: list[Duplicate] = []
    for path in parse_diff(diff).paths:
        if not added_runs(diff, path):
            continue
        before = show(tree, f"{old}^:{path}") if old else ""
        upstream = show(tree, f"HEAD:{path}")
        merged = show(tree, f":{path}")
        if upstream is None or merged is None:
            continue
        for at, lines in duplicated_runs(diff, path, before=before or "", upstream=upstream, merged=merged):
            commit = _blame_added(state, _as_diff(path, lines))
            found.append(Duplicate(path=path, at=tuple(at), lines=tuple(lines), commit=commit))
    return found


def _as_diff(path: str, lines: Sequence[str]) -> str:
    body = "".join(f"+{r}\n" for r in lines)
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n{body}"
