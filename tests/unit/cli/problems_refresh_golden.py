"""Golden words of a refresh's stop (patchkit/upkeep/refresh/options.py's RefreshStop): its one
line and its next steps, the actions as the placeholders cli/refresh.py writes as commands."""

from __future__ import annotations

from pathlib import Path

from patchkit.core.errors import ConfigError, FatalError, LockBusy, PatchError
from patchkit.git.repo import CommitInfo
from patchkit.upkeep.refresh.hints import action
from patchkit.upkeep.refresh.moved import Gone
from patchkit.upkeep.refresh.options import (
    CascadeOf,
    EarlierAdded,
    EarlierRemoved,
    FileGone,
    OwnContext,
    RefreshStop,
    RefreshStopped,
    StaleBefore,
    UpstreamTouched,
)
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
    SourceChanged,
    StillUnmerged,
    TreeMoved,
    WorkdirNotEmpty,
)
from patchkit.upkeep.refresh.state import NoRefresh, StateDamaged
from patchkit.upkeep.upstreamed import Upstreamed

__all__ = ["GOLDEN", "U1"]

W = Path("/w")
U1 = CommitInfo(sha="1" * 40, date="2026-01-01T00:00:00Z", subject="core: a helper (#7)")
CONT, SKIP, ABORT = action("--continue"), action("--skip"), action("--abort")
CONFLICT_HINT = f"fix them, `git -C /w/tree add` them, then `{CONT}`; `{SKIP}` drops 01.patch; `{ABORT}` stops the refresh"


def _stop(**kw: object) -> RefreshStopped:
    return RefreshStopped(RefreshStop(patch="01.patch", tree=W / "tree", onto="a" * 40, **kw), workdir=W)  # type: ignore[arg-type]


GOLDEN: list[tuple[FatalError, str, str]] = [
    (
        _stop(kind="conflict", files=("src/a.c",), reasons=(UpstreamTouched(commits=("111111111111",)),)),
        "refresh stopped at 01.patch: conflicts in src/a.c (upstream 111111111111)",
        CONFLICT_HINT,
    ),
    (
        _stop(
            kind="conflict",
            files=("src/a.c", "src/b.c"),
            reasons=(
                FileGone(path="src/b.c", gone=Gone(side="upstream", commit=U1)),
                EarlierAdded(patches=("00-x.patch",)),
            ),
        ),
        "refresh stopped at 01.patch: conflicts in src/a.c, src/b.c (src/b.c: deleted upstream by "
        "111111111111; lines from the earlier patch 00-x.patch)",
        CONFLICT_HINT,
    ),
    (
        _stop(
            kind="conflict",
            files=("src/a.c",),
            reasons=(EarlierRemoved(patches=("00-x.patch", "00-y.patch")),),
        ),
        "refresh stopped at 01.patch: conflicts in src/a.c (lines the earlier patch 00-x.patch, 00-y.patch removed)",
        CONFLICT_HINT,
    ),
    (
        _stop(kind="conflict", files=("src/a.c",), reasons=(OwnContext(old="", new="b" * 40),)),
        "refresh stopped at 01.patch: conflicts in src/a.c (no commit of the old base..bbbbbbbbbbbb and no "
        "earlier patch touched these lines: the patch's own context differs)",
        CONFLICT_HINT,
    ),
    (
        _stop(
            kind="apply",
            errors=("patch failed: src/a.c:3", "src/a.c: patch does not apply"),
            reasons=(StaleBefore(base="c" * 40), CascadeOf(files=("00-x.patch",))),
        ),
        "refresh stopped at 01.patch: it does not apply and cannot be 3-way merged (it does not apply on its "
        "own base cccccccccccc either, not even with reduced context: it was stale before this sync; patch "
        "failed: src/a.c:3) (a cascade of 00-x.patch)",
        f"apply it by hand in /w/tree, `git -C /w/tree add` the files, then `{CONT}`; `{SKIP}` drops 01.patch; "
        f"`{ABORT}` stops the refresh",
    ),
    (
        _stop(kind="empty", upstreamed=Upstreamed(file="01.patch", rule="effect", commit=U1)),
        "refresh stopped at 01.patch: merged onto aaaaaaaaaaaa it changes nothing: already upstream (effect): "
        "111111111111 core: a helper (#7)",
        f"`{SKIP}` drops it; `{CONT}` goes on (an empty patch leaves the series at the end); `{ABORT}` stops "
        "(a refresh started with --drop-upstreamed drops such patches without stopping)",
    ),
    (
        _stop(kind="duplicate", files=("t.c",)),
        "refresh stopped at 01.patch: the 3-way merge was clean but adds lines upstream added meanwhile a second time",
        f"remove the second copy, `git -C /w/tree add` the file, then `{CONT}`; `{SKIP}` drops 01.patch",
    ),
]

T = Path("/w/my tree")
GOLDEN += [
    (
        LockBusy(problem=RefreshJustFinished(workdir=W)),
        "another refresh just finished in /w",
        "run the command again",
    ),
    (
        LockBusy(problem=RefreshBusy(workdir=W)),
        "another patchkit refresh is working in /w",
        "wait for it to finish, or use another --workdir",
    ),
    (
        PatchError(problem=RefreshInProgress(workdir=W)),
        "a refresh is already in progress in /w",
        f"finish it with `{CONT}` or drop it with `{ABORT}`",
    ),
    (
        PatchError(problem=WorkdirNotEmpty(workdir=W)),
        "work folder /w is not empty",
        "remove it, or pass --workdir with an empty or new folder",
    ),
    (
        ConfigError(problem=DropAloneLater(current="01.patch", name="my patch")),
        "the refresh stands at 01.patch: --drop alone drops that one; a later patch goes with --continue or --skip",
        "e.g. `" + action("--continue --drop 'my patch'") + "`",
    ),
    (
        ConfigError(problem=DropRefreshedAlready(file="00-x.patch", name="x", current="01.patch")),
        "--drop 00-x.patch: it is refreshed already (the refresh stands at 01.patch)",
        f"`{ABORT}`, then start again with --drop x",
    ),
    (
        PatchError(problem=StillUnmerged(patch="01.patch", files=("a.c", "b.c"), tree=T)),
        "01.patch: still unmerged: a.c, b.c",
        f"fix them in /w/my tree, `git -C '/w/my tree' add` them, then `{CONT}` (or `{SKIP}` to drop 01.patch)",
    ),
    (
        PatchError(problem=NotStaged(patch="01.patch", files=("a.c",), tree=T)),
        "01.patch: changes not staged: a.c",
        f"`git -C '/w/my tree' add` them (or `git -C '/w/my tree' checkout` them away), then `{CONT}`",
    ),
    (
        PatchError(problem=MarkersLeft(patch="01.patch", file="a.c", tree=T)),
        "01.patch: conflict markers left: a.c",
        f"edit the file in /w/my tree, `git add` it, then `{CONT}`",
    ),
    (
        PatchError(problem=TreeMoved(workdir=W, patch="01.patch")),
        "/w: the scratch tree moved since the refresh stopped at 01.patch",
        f"drop the refresh with `{ABORT}` and start again",
    ),
    (
        PatchError(problem=ResolutionRefused(patch="01.patch", refusal="../x: outside\x1b", more=2, tree=T)),
        "01.patch: the staged resolution would be refused as a patch: ../x: outside\\x1b (and 2 more)",
        f"unstage it in /w/my tree (`git -C '/w/my tree' reset -q -- PATH`), then `{CONT}`",
    ),
    (
        PatchError(problem=ForeignInWorkdir(workdir=W, name="notes", link=True)),
        "/w holds notes (a link), which a refresh did not write: not removing it",
        "remove the folder by hand",
    ),
    (
        StateDamaged(W / "refresh-state.json", W, "is damaged: no patches"),
        "/w/refresh-state.json is damaged: no patches",
        f"run `{ABORT}` and start again",
    ),
    (
        NoRefresh(W),
        "no refresh in progress in /w",
        "start one with `patchkit refresh --onto COMMIT` (a refresh started with --workdir DIR is found "
        "with the same --workdir)",
    ),
    (
        PatchError(problem=SourceChanged(path=Path("/p/01.patch"), workdir=W)),
        "/p/01.patch changed since the refresh started",
        f"run `{ABORT}` and start again",
    ),
]
