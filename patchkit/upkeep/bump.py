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
3. **Summary** (:func:`render_summary`): markdown for a pull-request body.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from patchkit.core.errors import PatchError, RecipeError, SourceError
from patchkit.core.fs import atomic_write_many
from patchkit.core.redact import redact_url
from patchkit.core.text import printable
from patchkit.git.repo import CommitInfo, Git
from patchkit.spec.patchfile import parse_diff
from patchkit.spec.recipe import Recipe
from patchkit.spec.rpcproto import RPC_HEADER, ProtoVersion, judge, parse_rpc_header
from patchkit.spec.series import Patch
from patchkit.upkeep.check import check_series
from patchkit.upkeep.refresh import (
    RefreshOptions,
    RefreshResult,
    move_recipe_pin,
    refresh_in_progress,
    refresh_start,
)
from patchkit.upkeep.scratch import PatchVerdict, Status

__all__ = [
    "BumpOptions",
    "BumpPlan",
    "BumpResult",
    "BumpStopped",
    "CompileError",
    "PatchErrors",
    "Touching",
    "compile_errors",
    "default_target",
    "github_web",
    "md_code",
    "plan_bump",
    "render_summary",
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
    command: str = ""  # how refresh's hints name this refresh (`patchkit refresh NAME`)
    hint_workdir: bool = True  # refresh's hints say --workdir (bump was given one)
    rerere: Path | None = None  # recorded conflict resolutions (refresh's)


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
        super().__init__(error.message, detail=error.detail, hint=error.hint)
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
        verdicts = check_series(opts.repo, opts.patches, [new_sha]).refs[0].results
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
        command=opts.command if move else "",
        hint_workdir=opts.hint_workdir,
        rerere=opts.rerere if move else None,
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
        pdir = tmp / "patches"
        pdir.mkdir()
        shutil.copyfile(opts.patches_dir / "series", pdir / "series")
        for p in opts.patches:
            shutil.copyfile(p.path, pdir / p.filename)
        try:
            result = refresh_start(_refresh_options(opts, plan, pdir, tmp / "work", move=False))
        except PatchError as e:
            return BumpResult(plan=plan, dry_run=True, stopped=e.message)
        return BumpResult(plan=plan, dry_run=True, refresh=result, moved=plan.recipes)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- the summary --------------------------------------------------------------------------
def _verdict_cell(v: PatchVerdict) -> tuple[str, str]:
    if v.status is Status.OFFSET:
        by_file: dict[str, list[str]] = {}
        for o in v.offsets:
            by_file.setdefault(o.file, []).append(f"#{o.hunk} {o.lines:+d}")
        return v.status.value, "; ".join(f"{f}: {', '.join(h)}" for f, h in by_file.items())
    if v.status is Status.CONFLICTS:
        return v.status.value, ", ".join(c.where for c in v.conflicts) or "-"
    return v.status.value, "-"


_GITHUB = (
    re.compile(
        r"^(?:https?|git|ssh)://(?:[^/@]*@)?github\.com(?::\d+)?/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$"
    ),
    re.compile(r"^[A-Za-z0-9_.-]+@github\.com:([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$"),
)
_PR = re.compile(r"\s*\(#(\d{1,9})\)")


def github_web(url: str) -> str:
    """``https://github.com/OWNER/REPO`` for a clone URL on GitHub (https, ssh, scp-like;
    credentials dropped), else ''."""
    for rx in _GITHUB:
        if m := rx.match(url.strip()):
            owner, repo = m.group(1), m.group(2)
            if owner not in (".", "..") and repo not in (".", ".."):
                return f"https://github.com/{owner}/{repo}"
    return ""


def md_code(text: str, *, cell: bool = False) -> str:
    """Text from outside (upstream's subjects, refs and URLs; patch and file names; messages)
    as a markdown code span: shown as it is, never markup (no link, image or HTML), and
    GitHub makes no @mention, #reference or autolink of it. Control characters are escaped
    (core.text.printable); a backtick, which would end the span, becomes '; ``cell``: in a
    table cell, where ``|`` must be escaped even inside a span."""
    body = printable(text).replace("`", "'").strip() or "-"
    if cell:
        body = body.replace("|", "\\|")
    return f"`{body}`"


def _subject(subject: str, web: str, *, cell: bool = False) -> str:
    """A commit subject: a code span, its ``(#N)`` pull-request references as links to the
    upstream's pull request on GitHub (on GitHub itself ``#N`` would name the *project's*
    issue N), or kept in the span as plain text when the upstream is not on GitHub."""
    if not web:
        return md_code(subject, cell=cell)
    prs = _PR.findall(subject)
    rest = _PR.sub("", subject)
    links = "".join(f" ([#{n}]({web}/pull/{n}))" for n in prs)
    return md_code(rest, cell=cell) + links


def _commit(c: CommitInfo, web: str, *, full: bool = False) -> str:
    label = f"`{c.sha if full else c.short}`"
    return f"[{label}]({web}/commit/{c.sha})" if web and re.fullmatch(r"[0-9a-f]{40}", c.sha) else label


# -- compile errors in patched code ------------------------------------------------------
_DIAG = re.compile(
    r"^(?P<file>[^\s:][^:\n]*?):(?P<line>\d+):(?:(?P<col>\d+):)? (?:fatal )?error: (?P<msg>.*)$"
)
_MAX_ERRORS = 50  # per patch, in the summary


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompileError:
    file: str  # relative to the source tree
    line: int
    col: int | None
    message: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class PatchErrors:
    patch: str
    errors: tuple[CompileError, ...]


def _moved(line: int, hunks: Sequence[tuple[int, int, int, int]]) -> int:
    """Where line ``line`` of a file is after hunks (old start, count, new start, count)."""
    delta = 0
    for os_, oc, ns, nc in hunks:
        if line >= os_ + oc:
            delta = (ns + nc) - (os_ + oc)
        elif line >= os_:
            return min(ns + (line - os_), ns + max(nc - 1, 0))
        else:
            break
    return line + delta


def _owned_lines(patches: Sequence[Patch]) -> dict[str, list[tuple[str, int, int]]]:
    """Per file, the line ranges (first, last, in the tree after every patch) that each
    patch's hunks cover (their post-image: context and added lines), moved by the later
    patches' hunks. The series is refreshed: each hunk sits where its header says."""
    owned: dict[str, list[tuple[str, int, int]]] = {}
    for p in patches:
        parsed = parse_diff(p.read_verified().decode("utf-8", "replace"))
        for f in parsed.files:
            hunks = [(h.old_start, h.old_count, h.new_start, h.new_count) for h in f.hunks]
            if f.old_path != f.new_path and f.old_path in owned:
                owned[f.new_path] = owned.pop(f.old_path)
            ranges = owned.setdefault(f.new_path, [])
            ranges[:] = [(name, _moved(a, hunks), _moved(b, hunks)) for name, a, b in ranges]
            ranges += [(p.name, ns, ns + nc - 1) for _os, _oc, ns, nc in hunks if nc > 0]
    return owned


def compile_errors(
    log: str, patches: Sequence[Patch], *, src: Path, build: Path | None = None
) -> tuple[PatchErrors, ...]:
    """The compiler errors (``FILE:LINE:COL: error: ...``, GCC's and Clang's form) of a
    failed build's ``log`` that point into a line a patch's hunk covers, per patch (series
    order). FILE is taken relative to ``src`` (the source tree; a relative FILE is read
    from ``build``, where the compiler ran)."""
    owned = _owned_lines(patches)
    found: dict[str, list[CompileError]] = {}
    seen: set[tuple[str, int, int | None, str]] = set()
    for raw in log.splitlines():
        m = _DIAG.match(raw.strip())
        if m is None:
            continue
        rel = _relative(m.group("file"), src, build)
        if rel is None or rel not in owned:
            continue
        line = int(m.group("line"))
        col = int(m.group("col")) if m.group("col") else None
        key = (rel, line, col, m.group("msg"))
        if key in seen:
            continue
        seen.add(key)
        err = CompileError(file=rel, line=line, col=col, message=m.group("msg").strip())
        for name in dict.fromkeys(n for n, a, b in owned[rel] if a <= line <= b):
            found.setdefault(name, []).append(err)
    return tuple(PatchErrors(patch=p.name, errors=tuple(found[p.name])) for p in patches if p.name in found)


def _relative(file: str, src: Path, build: Path | None) -> str | None:
    """``file`` relative to the source tree, or None when it lies outside."""
    path = Path(file)
    if not path.is_absolute():
        if build is None:
            return Path(os.path.normpath(path)).as_posix()
        path = build / path
    try:
        return Path(os.path.normpath(path)).relative_to(Path(os.path.normpath(src))).as_posix()
    except ValueError:
        return None


def _upstreamed_lines(result: BumpResult, web: str) -> list[str]:
    """The patches the refresh dropped (already upstream, ``--skip``, ``--drop``) and those
    found upstream but kept (proposed for dropping), each with the upstream commit that
    has it: a reviewer sees why the series got shorter."""
    r = result.refresh
    if r is None or not (r.dropped or r.upstream):
        return []
    out = ["", "### Patches dropped or found upstream", ""]
    for d in r.dropped:
        at = f" {_commit(d.commit, web)} {_subject(d.commit.subject, web)}" if d.commit else ""
        out.append(f"- {md_code(d.file)} dropped: {md_code(d.reason)}{at}")
    for u in r.upstream:
        rule = u.rule + (f" {u.detail}" if u.detail else "")
        at = f" {_commit(u.commit, web)} {_subject(u.commit.subject, web)}" if u.commit else ""
        out.append(
            f"- {md_code(u.file)} kept, though upstream has it ({md_code(rule)}):{at}; "
            "`--drop-upstreamed` drops it"
        )
    return out


def render_summary(
    result: BumpResult, *, build_lines: Sequence[str] = (), errors: Sequence[PatchErrors] = ()
) -> str:
    """Markdown for a pull-request body: what moved, what changed upstream, the verdicts;
    ``errors``: a failed build's compile errors in patched code, per patch.

    Every text from outside is a code span (:func:`md_code`): an upstream subject cannot
    mention, link, embed or break the table; upstream's ``(#N)`` is a link to *its* pull
    request when it is on GitHub; the upstream URL is shown without credentials."""
    p = result.plan
    old, new = p.old, p.new
    web = p.web
    lines = [f"## Bump llama.cpp {old.short} (build {p.old_build}) → {new.short} (build {p.new_build})", ""]
    if p.up_to_date:
        return "\n".join([*lines, f"Already at the newest commit of {md_code(p.target)}: nothing to do.", ""])
    state = (
        "dry run: nothing was written"
        if result.dry_run
        else "stopped at a conflict: nothing was written yet"
        if result.stopped
        else "patches refreshed and every pin moved"
    )
    lines += [
        "| | commit | date | build | RPC protocol |",
        "|---|---|---|---|---|",
        f"| old | {_commit(old, web, full=True)} | {old.date[:10]} | {p.old_build} | {p.rpc_old or '-'} |",
        f"| new | {_commit(new, web, full=True)} | {new.date[:10]} | {p.new_build} | {p.rpc_new or '-'} |",
        "",
        f"Target: {md_code(p.target)} of {md_code(redact_url(p.upstream))}: {_subject(new.subject, web)}. "
        f"{p.commits} commits in between ({p.first_parent} first-parent). Status: {state}.",
    ]
    if p.rpc_old and p.rpc_new and p.rpc_old != p.rpc_new:
        fwd, back = judge(p.rpc_new, p.rpc_old), judge(p.rpc_old, p.rpc_new)
        lines += [
            "",
            f"**RPC protocol {p.rpc_old} → {p.rpc_new}.** New clients with old "
            f"servers: {'ok' if fwd.ok else 'refused'}; old clients with new servers: "
            f"{'ok' if back.ok else 'refused'}. Rebuild every RPC node of a rig "
            "from the same pin.",
        ]
    lines += [
        "",
        "### Patches at the new commit",
        "",
        "| patch | verdict | offsets / conflicts | refresh |",
        "|---|---|---|---|",
    ]
    refreshed: dict[str, str] = {}
    if result.refresh is not None:
        for f in result.refresh.updated:
            refreshed[f] = "rewritten"
        for f in result.refresh.unchanged:
            refreshed[f] = "unchanged"
        for f in result.refresh.skipped:
            refreshed[f] = "skipped (outside When)"
        for d in result.refresh.dropped:
            refreshed[d.file] = "dropped"
    files_of = dict(p.patch_files)
    for v in p.verdicts:
        verdict, where = _verdict_cell(v)
        how = refreshed.get(files_of.get(v.patch, ""), "stopped" if result.stopped else "-")
        if how == "rewritten" and v.status is Status.CONFLICTS:
            how = "rewritten (3-way merge)"
        if result.dry_run and how.startswith(("rewritten", "unchanged")):
            how = f"would be {how}"
        lines.append(f"| {md_code(v.patch, cell=True)} | {verdict} | {md_code(where, cell=True)} | {how} |")
    if result.stopped:
        lines += ["", f"Refresh: {md_code(result.stopped)}"]
    lines += _upstreamed_lines(result, web)
    files = ", ".join(md_code(f) for f in p.files) or "-"
    lines += [
        "",
        f"### Upstream commits that touched the patched files ({p.touching_total})",
        "",
        f"Files: {files}",
        "",
    ]
    if not p.touching:
        lines.append("None.")
    for t in p.touching:
        where = ", ".join(md_code(f) for f in t.files)
        lines.append(
            f"- {_commit(t.commit, web)} {t.commit.date[:10]} {_subject(t.commit.subject, web)} ({where})"
        )
    if p.touching_total > len(p.touching):
        lines.append(f"- … and {p.touching_total - len(p.touching)} more")
    verb = "would move" if result.dry_run else "moved" if result.moved else "to move"
    lines += ["", f"### Recipes ({verb} together)", "", *(f"- {n}" for n in sorted(p.recipes))]
    if build_lines:
        lines += ["", "### Build", "", *build_lines]
    if errors:
        lines += ["", "### Compile errors in patched code", ""]
        for pe in errors:
            lines.append(f"- {md_code(pe.patch)}: {len(pe.errors)} error(s) in lines its hunks cover")
            for e in pe.errors[:_MAX_ERRORS]:
                at = f"{e.file}:{e.line}" + (f":{e.col}" if e.col else "")
                lines.append(f"  - {md_code(at)}: {md_code(e.message)}")
            if len(pe.errors) > _MAX_ERRORS:
                lines.append(f"  - … and {len(pe.errors) - _MAX_ERRORS} more (the build log has all)")
    return "\n".join(lines) + "\n"
