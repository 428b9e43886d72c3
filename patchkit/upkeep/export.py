"""Patch queues out: ``patchkit series export``.

Export writes the series as mails ``git am`` takes (patchkit's own form gets an author:
``--author`` or git's identity) with a fresh diffstat (or none), ``NNNN-name.patch`` and
a quilt ``series`` file; each is read back and must give the same fields. ``--to-branch``
makes a branch of commits on a recipe's pin with plumbing (:mod:`patchkit.git.commit`: a
private index, ``git apply --cached``, ``write-tree``, ``commit-tree``), no checkout:
author and date from the mail, committed by patchkit at the author's date (the same queue
gives the same commits).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import tempfile
from pathlib import Path

from patchkit.core.errors import ConfigError, PatchError
from patchkit.core.fs import atomic_write_many, first_foreign, sha256_bytes
from patchkit.core.text import printable
from patchkit.git.commit import PrivateIndex
from patchkit.git.repo import Git
from patchkit.git.runner import git_env, run_git
from patchkit.spec.mailfmt import sanitized_subject
from patchkit.spec.patchdoc import Ident, commit_of, derive_fields, read_doc, render_mail
from patchkit.spec.series import INDEPENDENT_LINE, Patch, Series, parse_patch, patch_name_from_file

__all__ = ["BranchExport", "Exported", "default_author", "export_branch", "export_folder", "parse_ident"]

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+-]*$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Exported:
    file: str
    name: str
    author: str
    date: str | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class BranchExport:
    name: str
    head: str
    repo: Path
    base: str
    commits: tuple[tuple[str, str], ...]  # (patch name, commit)


# -- export -------------------------------------------------------------------------------------


def parse_ident(text: str) -> Ident:
    """``Name <mail>`` (the form of --author); ConfigError otherwise."""
    m = re.match(r"^\s*([^<>\n]*?)\s*<([^<>\n]*)>\s*$", text)
    if not m or not m.group(1):
        raise ConfigError(
            f"--author {text!r} must be `Name <mail>`", hint='e.g. --author "Ann Smith <ann@example.org>"'
        )
    return Ident(name=m.group(1), email=m.group(2))


def default_author() -> Ident | None:
    """git's author identity here (``git var GIT_AUTHOR_IDENT``), or None without one."""
    r = run_git(None, "var", "GIT_AUTHOR_IDENT", check=False, env=git_env())
    m = re.match(r"^(.*?) <([^<>]*)> \d+ [+-]\d{4}$", r.stdout.strip())
    if not r.ok or not m or not m.group(1):
        return None
    return Ident(name=m.group(1), email=m.group(2))


def _export_name(patch: Patch) -> str:
    """The name part of an exported file: the patch's name, made safe for a file name
    (a name that changes so is stated in the mail as Patchkit-Name)."""
    return patch.name if _SAFE_NAME.match(patch.name) else (sanitized_subject(patch.name) or "patch")


def _render(patch: Patch, filename: str, author: Ident | None, *, with_diffstat: bool = True) -> bytes:
    """The patch as the mail ``filename`` of an export, checked to read back the same."""
    data = patch.read_verified()
    doc = read_doc(data, f"patches/{patch.filename}")
    fields = dataclasses.replace(derive_fields(doc, patch_name_from_file(patch.filename)), name=patch.name)
    if doc.mail is None and author is None:
        raise ConfigError(
            f"{patch.filename} is in patchkit's form and names no author, and git has no identity here",
            hint='pass --author "Name <mail>" (the author its mail says)',
        )
    mail = render_mail(
        doc, fields, name_from_file=patch_name_from_file(filename), author=author, with_diffstat=with_diffstat
    )
    _check_round_trip(patch, filename, mail)
    return mail


def _check_round_trip(patch: Patch, filename: str, mail: bytes) -> None:
    """The rendered mail must read back as the same patch (same fields, same diff)."""
    back = parse_patch(mail, Path(filename), sha256_bytes(mail), where=f"the export of {patch.filename}")
    for attr in ("name", "subject", "why", "when_from", "when_to", "default", "experimental", "files"):
        if getattr(back, attr) != getattr(patch, attr):
            raise PatchError(
                f"{patch.filename}: its mail would read back with another {attr} "
                f"({getattr(back, attr)!r}, not {getattr(patch, attr)!r})"
            )
    if back.upstream_status.split()[:1] != patch.upstream_status.split()[:1]:
        raise PatchError(f"{patch.filename}: its mail would read back with another Upstream-Status")


def _check_outdir(outdir: Path, project: Path, replace: bool) -> list[Path]:
    """The files of a previous export in ``outdir`` (replaced), after the refusals."""
    patches = (project / "patches").resolve()
    real = outdir.resolve()
    if real == patches or real.is_relative_to(patches) or patches.is_relative_to(real):
        raise ConfigError(f"{outdir} is (or holds) the project's patches/: export somewhere else")
    if not outdir.exists():
        return []
    if not outdir.is_dir() or outdir.is_symlink():
        raise ConfigError(f"{outdir} exists and is not a folder")
    entries = sorted(outdir.iterdir())
    if not entries:
        return []
    foreign = first_foreign(
        outdir,
        [e.name for e in entries],
        files=lambda name: Path(name).suffix == ".patch" or name == "series",
        dirs={},
    )
    if foreign is not None:
        raise ConfigError(
            f"{outdir} holds {printable(foreign.name)}, which an export does not write: not writing there",
            hint="export into an empty (or new) folder",
        )
    if not replace:
        raise ConfigError(
            f"{outdir} already holds {len(entries)} file(s): not replacing them",
            hint="pass --replace to replace its .patch files and series (a previous export)",
        )
    return entries


def export_folder(
    series: Series,
    outdir: Path,
    *,
    project: Path,
    author: Ident | None,
    with_diffstat: bool = True,
    replace: bool = False,
) -> list[Exported]:
    """Every patch of the series as a mail in ``outdir`` (``NNNN-name.patch``) and a
    ``series`` file listing them; all written or none. A plain diff goes out as it came
    (its file name and bytes: no author invented), with the series' independent line."""
    old = _check_outdir(outdir, project, replace)
    writes: dict[Path, bytes] = {}
    done: list[Exported] = []
    for n, patch in enumerate(series.patches, 1):
        if patch.kind == "plain":
            writes[outdir / patch.filename] = patch.read_verified()
            done.append(Exported(file=patch.filename, name=patch.name, author="", date=None))
            continue
        filename = f"{n:04d}-{_export_name(patch)}.patch"
        mail = _render(patch, filename, author, with_diffstat=with_diffstat)
        writes[outdir / filename] = mail
        who, date, _ = commit_of(mail, filename)
        done.append(Exported(file=filename, name=patch.name, author=str(who), date=date))
    head = INDEPENDENT_LINE + "\n" if series.independent else ""
    writes[outdir / "series"] = (head + "".join(e.file + "\n" for e in done)).encode("utf-8")
    outdir.mkdir(parents=True, exist_ok=True)
    atomic_write_many(writes)
    for stale in old:
        if stale not in writes:
            stale.unlink(missing_ok=True)
    return done


def _checked_out(repo: Path, ref: str) -> Path | None:
    """The worktree of ``repo`` that has ``ref`` checked out (None: none has)."""
    listing = run_git(repo, "worktree", "list", "--porcelain", check=False, env=git_env())
    where: Path | None = None
    for line in listing.stdout.splitlines():
        if line.startswith("worktree "):
            where = Path(line.removeprefix("worktree "))
        elif line == f"branch {ref}":
            return where or repo
    head = run_git(repo, "symbolic-ref", "--quiet", "HEAD", check=False, env=git_env()).stdout.strip()
    return repo if head == ref else None


def _branch_ref(branch: str) -> str:
    """``refs/heads/BRANCH`` for a name git takes as a branch name (``git check-ref-format
    --branch``: not ``HEAD``, ``@``, ``-x``, ``@{-1}`` or anything that is not one)."""
    check = run_git(None, "check-ref-format", "--branch", branch, check=False, env=git_env())
    if (
        not check.ok
        or check.stdout.strip() != branch
        or branch.startswith("-")
        or branch in ("HEAD", "@")
        or "@{" in branch
        or not run_git(None, "check-ref-format", f"refs/heads/{branch}", check=False, env=git_env()).ok
    ):
        raise ConfigError(f"--to-branch {printable(branch)!r} is not a valid branch name")
    return f"refs/heads/{branch}"


def export_branch(
    series: Series,
    *,
    repo: Path,
    base: str,
    branch: str,
    author: Ident | None,
    force: bool = False,
) -> BranchExport:
    """The series as commits on ``base`` in ``repo``, on branch ``branch`` (moved only with
    ``force``, and never while it is checked out); nothing is written to the repository
    but objects until every patch is in."""
    ref = _branch_ref(branch)
    git = Git(repo)
    old = run_git(repo, "rev-parse", "--verify", "--quiet", ref, check=False).stdout.strip()
    if old and not force:
        raise ConfigError(
            f"branch {branch} already exists in {repo} (at {old[:12]}): not moving it",
            hint="pass --force to move it, or name another branch",
        )
    if old:
        at = _checked_out(repo, ref)
        if at is not None:  # git itself refuses this, even with -f: the work tree would not follow
            raise ConfigError(
                f"branch {branch} is checked out in {at}: not moving it, even with --force",
                hint="check out another branch there first, or name another branch",
            )
    base_date = git.run("show", "-s", "--format=%cD", base).strip()
    commits: list[tuple[str, str]] = []
    parent = base
    tmp = Path(tempfile.mkdtemp(prefix="patchkit-export-"))
    try:
        index = PrivateIndex(repo, tmp / "index", env=git_env())
        index.read_tree(base, what=f"reading {base[:12]}")
        for n, patch in enumerate(series.patches, 1):
            filename = f"{n:04d}-{_export_name(patch)}.patch"
            mail = _render(patch, filename, author)
            pfile = tmp / filename
            pfile.write_bytes(mail)
            applied = index.apply(pfile)
            if not applied.ok:
                reason = applied.stderr.strip().splitlines()
                raise PatchError(
                    f"patch {patch.filename} does not apply on {base[:12]} after the ones before it: "
                    + (reason[-1] if reason else "git apply failed"),
                    detail=applied.stderr,
                    hint="`patchkit check` says which patch no longer applies at the pin",
                )
            tree = index.write_tree()
            who, date, message = commit_of(mail, filename)
            when = date or base_date
            parent = index.commit(
                tree,
                parents=[parent],
                message=message,
                env={
                    "GIT_AUTHOR_NAME": who.name,
                    "GIT_AUTHOR_EMAIL": who.email,
                    "GIT_AUTHOR_DATE": when,
                    "GIT_COMMITTER_NAME": "patchkit",
                    "GIT_COMMITTER_EMAIL": "patchkit@localhost",
                    "GIT_COMMITTER_DATE": when,
                },
            )
            commits.append((patch.name, parent))
        run_git(repo, "update-ref", "-m", "patchkit series export", ref, parent, old or "0" * 40)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return BranchExport(name=branch, head=parent, repo=repo, base=base, commits=tuple(commits))
