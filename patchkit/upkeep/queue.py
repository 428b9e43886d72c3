"""Patch queues in: ``patchkit series import``.

Import takes ``git format-patch`` files and mboxes (a folder, files in order, or a quilt
``series`` file) or the commits of a fork's range (``git format-patch`` of each), keeps
every mail as it is (author, date, title, message, diff; a quoted-printable or base64
body decoded, as git am decodes it) and states only what the files cannot say: ``When``
``BASE..`` when the base is known, ``Upstream-Status: backport`` when an upstream commit
after the base has the same title or pull request number. The rest is derived when the
series is loaded. Every patch is checked as the series loader checks it before anything is
written; then the patch files and ``patches/series`` are written together
(core.fs.atomic_write_many), never over a series (or a file it does not list) without
``--replace``.

Export is :mod:`patchkit.upkeep.export`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path

from patchkit.core.errors import ConfigError, PatchError, SourceError
from patchkit.core.fs import atomic_write_many, read_capped, sha256_bytes
from patchkit.git.repo import Git, parse_range
from patchkit.git.runner import git_env, run_git
from patchkit.spec.mailfmt import PATCH_NAME_MAX, sanitized_subject
from patchkit.spec.patchdoc import (
    add_trailers,
    decode_transfer,
    derive_fields,
    read_doc,
    split_mbox,
)
from patchkit.spec.series import (
    INDEPENDENT_LINE,
    PATCH_MAX,
    SERIES_MAX,
    Patch,
    SeriesLine,
    parse_patch,
    patch_name_from_file,
    read_series_text,
    series_files,
)
from patchkit.upkeep.textapply import FileContent, prepare
from patchkit.upkeep.textapply import apply as apply_text

__all__ = [
    "IMPORT_MAX_BYTES",
    "IMPORT_MAX_PATCHES",
    "ImportResult",
    "Imported",
    "Source",
    "detect_independent",
    "import_patches",
    "source_subjects",
    "sources_from_paths",
    "sources_from_range",
    "upstream_matches",
]

IMPORT_MAX_PATCHES = 5000  # a queue is tens of patches; an mbox of a mailing list is not one
IMPORT_MAX_BYTES = 256 << 20  # all files read, together
_PATCH_SUFFIXES = (".patch", ".diff", ".mbox", ".eml")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+-]*$")
_PR = re.compile(r"\(#(\d+)\)\s*$")
_HEX = re.compile(r"^[0-9a-f]{7,40}$")
# git format-patch with everything a user's config could change said outright
_FORMAT_PATCH = (
    "format-patch",
    "--stdout",
    "--no-signature",
    "--no-numbered",
    "--no-attach",
    "--no-thread",
    "--no-cover-letter",
    "--no-color",
    "--no-notes",
    "--no-add-header",
    "--no-signoff",
    "--no-base",
    "--no-from",
    "--no-to",
    "--no-cc",
    "--no-relative",
    "--encoding=UTF-8",
    "--subject-prefix=PATCH",
    "--src-prefix=a/",
    "--dst-prefix=b/",
    "-M",
    "-U3",
    "--inter-hunk-context=0",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Source:
    filename: str  # the name it gets in patches/
    data: bytes
    label: str  # where it came from (a path, "path (mail N)", a commit)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Imported:
    file: str
    source: str
    patch: Patch
    added: dict[str, str]  # fields import stated (When from the base, Upstream-Status from upstream)
    derived: dict[str, str]  # fields derived when the series is read, with their values
    renamed: bool  # the file name was taken: a suffix was added


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImportResult:
    patches: tuple[Imported, ...]
    series: Path
    base: str | None
    dropped: tuple[str, ...]  # files the old series listed that the new one does not (left on disk)
    independent: bool = False  # written as a series of independent patches


# -- reading the sources ------------------------------------------------------------------------


class _Budget:
    def __init__(self) -> None:
        self.count = 0
        self.bytes = 0

    def read(self, path: Path) -> bytes:
        data = read_capped(path, limit=PATCH_MAX, error=PatchError, what=str(path))
        self.bytes += len(data)
        if self.bytes > IMPORT_MAX_BYTES:
            raise PatchError(
                f"the files to import hold more than {IMPORT_MAX_BYTES >> 20} MiB: not a patch queue",
                hint="import the queue's own folder or series file",
            )
        return data

    def take(self, n: int = 1) -> None:
        self.count += n
        if self.count > IMPORT_MAX_PATCHES:
            raise PatchError(f"more than {IMPORT_MAX_PATCHES} patches to import: not a patch queue")


def _file_name(name: str, mail: bytes | None, n: int) -> str:
    """A file name for patches/: the source's own when it is a plain name, else git's."""
    if _SAFE_NAME.match(name) and name.endswith((".patch", ".diff")):
        return name
    stem = name.rsplit(".", 1)[0] if "." in name else name
    if mail is not None:
        try:
            doc = read_doc(mail, name)
        except PatchError:
            doc = None
        if doc is not None and doc.mail is not None and doc.mail.subject:
            stem = sanitized_subject(doc.mail.subject)
    slug = sanitized_subject(stem) or "patch"
    return (f"{n:04d}-{slug}"[: 5 + PATCH_NAME_MAX]) + ".patch"


def _sources_of_file(path: Path, budget: _Budget, *, mboxrd: bool, index: int) -> list[Source]:
    """The patches in one file (an mbox: each of its mails); ``index``: the first one's
    place in the queue (for names made from a title)."""
    data = budget.read(path)
    mails = split_mbox(data, mboxrd=mboxrd) if data.startswith(b"From ") or mboxrd else [data]
    if not mails:
        raise PatchError(f"{path}: holds no patch")
    budget.take(len(mails))
    if len(mails) == 1:
        return [Source(filename=_file_name(path.name, mails[0], index), data=mails[0], label=str(path))]
    return [
        Source(filename=_file_name("", mail, index + i), data=mail, label=f"{path} (mail {i + 1})")
        for i, mail in enumerate(mails)
    ]


def _quilt_entries(series_file: Path, budget: _Budget) -> list[str]:
    """The patch files a quilt (or patchkit) series file lists, relative to its folder."""
    text = budget.read(series_file).decode("utf-8", "replace")
    names: list[str] = []
    for n, line in enumerate(read_series_text(text), 1):
        if not line.file:
            continue
        name = line.file
        for opt in line.options:
            if opt.startswith("sha256=") or opt == "-p1":
                continue
            raise PatchError(
                f"{series_file}:{n}: option {opt!r}: patchkit applies git diffs with -p1, forwards",
                hint="a reversed (-R) or -p0 patch has to be made again with git format-patch",
            )
        parts = name.split("/")
        if name.startswith(("/", "\\")) or "\\" in name or any(p in ("", ".", "..") for p in parts):
            raise PatchError(f"{series_file}:{n}: {name!r} is not a file below the series file's folder")
        names.append(name)
    return names


def sources_from_paths(
    paths: Sequence[Path], *, series_file: Path | None = None, mboxrd: bool = False
) -> list[Source]:
    """The patches of files, folders (their ``series`` file, else their patch files in
    sorted order) or a quilt ``series`` file, in order; an mbox gives each of its mails."""
    budget = _Budget()
    out: list[Source] = []

    def from_series(sfile: Path) -> None:
        folder = sfile.parent
        for name in _quilt_entries(sfile, budget):
            path = folder / name
            if not path.resolve().is_relative_to(folder.resolve()):
                raise PatchError(f"{sfile}: {name!r} leads out of {folder} (a link?): not reading it")
            out.extend(_sources_of_file(path, budget, mboxrd=mboxrd, index=len(out) + 1))

    if series_file is not None:
        from_series(series_file)
    for p in paths:
        if p.is_dir():
            if (p / "series").is_file():
                from_series(p / "series")
                continue
            files = sorted(f for f in p.iterdir() if f.name.endswith(_PATCH_SUFFIXES) and f.is_file())
            if not files:
                raise PatchError(
                    f"{p} holds no patch files ({', '.join('*' + s for s in _PATCH_SUFFIXES)}) and no series"
                )
            for f in files:
                out += _sources_of_file(f, budget, mboxrd=mboxrd, index=len(out) + 1)
        elif p.name == "series" and p.is_file():
            from_series(p)
        else:
            out += _sources_of_file(p, budget, mboxrd=mboxrd, index=len(out) + 1)
    if not out:
        raise ConfigError("nothing to import: name patch files, folders or a series file")
    return out


def sources_from_range(repo: Path, rng: str) -> tuple[str, list[Source]]:
    """The commits of ``BASE..BRANCH`` in ``repo`` as format-patch mails (oldest first), and
    BASE's sha. The range must be linear and BASE an ancestor of BRANCH."""
    old, new = parse_range(rng)
    git = Git(repo)
    base, tip = git.resolve(old), git.resolve(new)
    if not git.is_ancestor(base, tip):
        raise SourceError(
            f"{old} is not an ancestor of {new} in {repo}: a queue is the commits BASE..BRANCH on BASE",
            hint="BASE is the upstream commit the fork's branch starts from (git merge-base)",
        )
    merges = git.run("rev-list", "--merges", f"{base}..{tip}", "--").split()
    if merges:
        raise PatchError(
            f"{old}..{new} holds merge commit {merges[0][:12]}: a patch queue is a line of commits",
            hint="rebase the branch onto BASE first (git rebase BASE), then import it",
        )
    listing = git.run("log", "--reverse", "--topo-order", "--format=%H%x00%f", f"{base}..{tip}", "--")
    rows = [ln.split("\0", 1) for ln in listing.splitlines() if ln]
    if not rows:
        raise PatchError(f"{old}..{new} holds no commit: nothing to import")
    if len(rows) > IMPORT_MAX_PATCHES:
        raise PatchError(f"{old}..{new} holds {len(rows)} commits: not a patch queue")
    # one format-patch for the whole range: each mail starts with its commit's magic From line,
    # and git writes one newline between two mails (not part of either)
    stream = run_git(repo, *_FORMAT_PATCH, f"{base}..{tip}", "--", binary=True, env=git_env()).data
    starts: list[int] = []
    for sha, _ in rows:
        at = stream.find(
            b"From " + sha.encode("ascii") + b" Mon Sep 17 00:00:00 2001\n", starts[-1] if starts else 0
        )
        if at < 0:
            raise PatchError(
                f"commit {sha[:12]} of {old}..{new} changes nothing: git format-patch leaves it out"
            )
        starts.append(at)
    out: list[Source] = []
    for i, ((sha, slug), start, end) in enumerate(
        zip(rows, starts, [*(at - 1 for at in starts[1:]), len(stream)], strict=True), 1
    ):
        mail = stream[start:end]
        name = f"{i:04d}-{slug or 'patch'}"[: 5 + PATCH_NAME_MAX] + ".patch"
        out.append(Source(filename=name, data=mail, label=f"commit {sha[:12]}"))
    return base, out


# -- upstream look-up -------------------------------------------------------------------------


def source_subjects(sources: Sequence[Source]) -> list[str]:
    """The title of each source ("" for one that is no mail)."""
    out: list[str] = []
    for src in sources:
        doc = read_doc(decode_transfer(src.data, src.label), src.label)
        out.append(doc.mail.subject if doc.mail is not None else (doc.native or {}).get("Subject", ""))
    return out


def upstream_matches(git: Git, base: str, ref: str, subjects: Sequence[str]) -> dict[int, tuple[str, str]]:
    """For each subject (by index) an upstream commit in ``base..ref`` with the same title,
    or the same pull request number ``(#N)`` at its end: (sha, why)."""
    tip = git.resolve(ref)
    listing = git.run("log", "--format=%H%x00%s", f"{base}..{tip}", "--")
    by_subject: dict[str, str] = {}
    by_pr: dict[str, str] = {}
    for line in listing.splitlines():
        sha, _, subject = line.partition("\0")
        by_subject.setdefault(subject.strip(), sha)
        m = _PR.search(subject)
        if m:
            by_pr.setdefault(m.group(1), sha)
    found: dict[int, tuple[str, str]] = {}
    for i, subject in enumerate(subjects):
        if subject.strip() in by_subject:
            found[i] = (by_subject[subject.strip()], "same title")
            continue
        m = _PR.search(subject)
        if m and m.group(1) in by_pr:
            found[i] = (by_pr[m.group(1)], f"same pull request #{m.group(1)}")
    return found


# -- import -------------------------------------------------------------------------------------


def _unique(filename: str, taken: set[str], names: dict[str, str]) -> str:
    """``filename``, or ``stem-N.suffix``: a file name not taken whose patch name (the
    file name's) is not taken either."""
    stem, dot, suffix = filename.rpartition(".")
    candidate, n = filename, 2
    while candidate in taken or patch_name_from_file(candidate) in names:
        candidate = f"{stem}-{n}{dot}{suffix}"
        n += 1
    return candidate


def detect_independent(git: Git, base: str, sources: Sequence[Source]) -> bool | None:
    """Whether the queue is one of independent patches, tried on ``base``: True when each
    applies to it alone and they do not all apply stacked, False when they apply
    stacked, None when it cannot tell (neither, or a patch this cannot model)."""
    texts = []
    for src in sources:
        text = prepare(decode_transfer(src.data, src.label))
        if text is None:
            return None
        texts.append(text)
    paths = sorted({f for t in texts for f in t.paths})
    (entries,) = git.tree_entries([base], paths)
    if any(e.mode not in ("100644", "100755") for e in entries.values()):
        return None
    blobs = git.read_blobs(e.oid for e in entries.values())
    files: dict[str, FileContent | None] = {
        p: FileContent(mode=e.mode, oid=e.oid, data=blobs.get(e.oid, b"")) for p, e in entries.items()
    }
    alone = all(apply_text(t, files).ok for t in texts)
    stacked = dict(files)
    for t in texts:
        res = apply_text(t, stacked)
        if not res.ok:
            return True if alone else None
        stacked.update(res.post)
    return False


def import_patches(
    project: Path,
    sources: Sequence[Source],
    *,
    base: str | None = None,
    matches: dict[int, tuple[str, str]] | None = None,
    replace: bool = False,
    independent: bool = False,
) -> ImportResult:
    """Check every source as a patch of the series and write them all (with
    ``patches/series``) or nothing. ``base``: When becomes ``BASE..`` where a mail does not
    say; ``matches``: sources (by index) found upstream, stated ``backport``;
    ``independent``: the series says its patches apply alone (INDEPENDENT_LINE)."""
    if base is not None and not _HEX.match(base):
        raise ConfigError(f"--base {base!r} is not a commit sha (7-40 hex digits)")
    patches_dir = project / "patches"
    old = series_files(patches_dir)
    if old and not replace:
        raise ConfigError(
            f"{patches_dir / 'series'} already lists {len(old)} patch(es): not replacing the series",
            hint="pass --replace to write the imported queue in its place (the old files stay in patches/)",
        )
    taken: set[str] = {"series"}
    names: dict[str, str] = {}
    items: list[Imported] = []
    writes: dict[Path, bytes] = {}
    for i, src in enumerate(sources):
        data = decode_transfer(src.data, src.label)
        doc = read_doc(data, src.label)
        add: dict[str, str] = {}
        if doc.mail is not None and doc.native is None:
            if base is not None and "When" not in doc.stated:
                add["When"] = f"{base}.."
            hit = (matches or {}).get(i)
            if hit is not None and "Upstream-Status" not in doc.stated:
                add["Upstream-Status"] = f"backport {hit[0][:12]} ({hit[1]} upstream)"
            if add:
                data = add_trailers(data, add, src.label)
        filename = src.filename if src.filename not in taken else _unique(src.filename, taken, names)
        patch = parse_patch(data, patches_dir / filename, sha256_bytes(data), where=src.label)
        if patch.name in names:
            if (doc.native is not None and doc.native.get("Name")) or "Name" in doc.stated:
                raise PatchError(
                    f"{src.label}: patch name {patch.name!r} is {names[patch.name]}'s too",
                    hint="give one of them another Name",
                )
            filename = _unique(filename, taken, names)
            patch = parse_patch(data, patches_dir / filename, sha256_bytes(data), where=src.label)
        taken.add(filename)
        names[patch.name] = filename
        target = patches_dir / filename
        if (target.exists() or target.is_symlink()) and filename not in old:
            raise ConfigError(
                f"{target} exists and the series does not list it: not overwriting it",
                hint="move it away, or import into another project",
            )
        if target.is_dir():
            raise ConfigError(f"{target} is a folder: not overwriting it")
        writes[target] = data
        fields = derive_fields(read_doc(data, src.label), patch_name_from_file(filename))
        derived = {k: fields.get(k) or "" for k in fields.derived}
        items.append(
            Imported(
                file=filename,
                source=src.label,
                patch=patch,
                added=add,
                derived=derived,
                renamed=filename != src.filename,
            )
        )
    lines = [SeriesLine.make(it.file, it.patch.sha256).raw for it in items]
    keep: list[str] = []
    series_path = patches_dir / "series"
    if not old and series_path.is_file():  # comments of an empty series stay
        text = read_capped(series_path, limit=SERIES_MAX, error=PatchError).decode("utf-8", "replace")
        keep = [ln for ln in text.splitlines() if ln.strip() and ln.strip() != INDEPENDENT_LINE]
    if independent:
        keep.append(INDEPENDENT_LINE)
    writes[series_path] = ("\n".join([*keep, *lines]) + "\n").encode("utf-8")
    atomic_write_many(writes)
    new_files = {it.file for it in items}
    return ImportResult(
        patches=tuple(items),
        series=series_path,
        base=base,
        dropped=tuple(f for f in old if f not in new_files),
        independent=independent,
    )
