"""Is a patch already upstream? Found before merging, with the upstream commit that has it.

Rules, strongest first (:func:`find_upstreamed`, one pass over the upstream commits in
``old..new`` that touched a file of the series):

- ``patch-id``: the patch's ``git patch-id --stable`` equals an upstream commit's (its
  diff limited to the series' files; whitespace and line numbers do not count);
- ``cherry-pick``: the message says ``cherry picked from commit SHA`` and SHA is in the range;
- ``pull-request``: the patch's title ends in ``(#N)`` or its message links llama.cpp's
  pull request N, and an upstream commit's title ends in ``(#N)``;
- ``subject``: the same title (case, ``[PATCH]`` and a trailing ``(#N)`` aside; at least
  :data:`MIN_SUBJECT` characters), or the same words in another order (at least
  :data:`MIN_WORDS` of them: "Nemotron Nano 3" / "Nemotron 3 Nano"), as an upstream commit
  that touched one of its files.

The fifth rule, ``effect`` (the change is there: the patch reverse-applies on the new
tree, or merges to nothing), needs the tree as the patches before it left it, so the
refresh tests it just before it merges the patch (:mod:`patchkit.upkeep.refresh`).

What a rule proves (:attr:`Upstreamed.proven`): ``patch-id``, ``cherry-pick`` (the
authors say the patch is that commit, and it is in the range) and ``effect`` prove the
change is upstream; ``pull-request`` and ``subject`` only suggest it (a message saying
"similar to …/pull/N, though …" names a pull request the patch is not). A suggestion is
proposed, never dropped, until the effect is there too: its lines in the new tree where
its hunks are (``present``, :func:`change_present`, tested here), or it reverse-applies
or merges to nothing (``effect``, :func:`confirmed`); then the drop names both, the
suggesting rule and the evidence.

:func:`duplicated_runs` catches what a clean 3-way merge gets wrong: lines the patch
adds that upstream added meanwhile, merged in a second time.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

from patchkit.core.errors import SourceError
from patchkit.git.repo import CommitInfo, Git
from patchkit.spec.patchfile import parse_diff
from patchkit.upkeep.conflict import added_runs, find_run

__all__ = [
    "MIN_SUBJECT",
    "PROVING_RULES",
    "Candidate",
    "Upstreamed",
    "change_present",
    "confirmed",
    "duplicated_runs",
    "find_upstreamed",
    "normalise_subject",
]

MIN_SUBJECT = 12  # shorter titles ("fix build") match too much to mean anything
MIN_WORDS = 5  # words of a title matched in any order
_PR_IN_TITLE = re.compile(r"\(#(\d+)\)\s*$")
_PR_URL = re.compile(r"github\.com/(?:ggml-org|ggerganov)/llama\.cpp/pull/(\d+)", re.IGNORECASE)
PROVING_RULES = frozenset({"patch-id", "cherry-pick", "effect", "present"})
MIN_PRESENT = 3  # significant added lines a change needs before its presence means anything
_NEAR = 60  # lines: the runs of one hunk's added lines stand this close together
_EVIDENCE = {
    "present": "every line it adds is in the new tree where its hunks are, what it removes is not",
    "patch-id": "the same patch-id",
    "cherry-pick": "its message names the commit it was picked from",
    "pull-request": "only its pull request number matches, its change is not all there",
    "subject": "only its title matches, its change is not all there",
}
_CHERRY = re.compile(r"cherry[- ]picked from commit ([0-9a-f]{7,40})", re.IGNORECASE)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Candidate:
    """A patch as the rules see it."""

    file: str
    subject: str
    header: str  # everything before its diff (mail headers, message, trailers)
    diff: bytes
    files: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Upstreamed:
    file: str  # the patch file
    rule: str  # patch-id | cherry-pick | pull-request | subject | effect
    commit: CommitInfo | None  # the upstream commit that has it (None: not found)
    detail: str = ""  # e.g. "#16769"; for effect, the suggesting rule it confirms

    @property
    def proven(self) -> bool:
        """Whether the rule proves the change is upstream (else it only suggests it)."""
        return self.rule in PROVING_RULES

    @property
    def evidence(self) -> str:
        if self.rule == "effect":
            return "its change is there (it reverse-applies, or merges to nothing)"
        return _EVIDENCE.get(self.rule, "")

    def describe(self) -> str:
        what = f"{self.commit.short} {self.commit.subject[:90]}" if self.commit else "no single commit found"
        why = f"{self.rule}{' ' + self.detail if self.detail else ''}"
        if self.proven:
            return f"already upstream ({why}): {what}"
        return f"perhaps upstream ({why}; {self.evidence}): {what}"

    def to_json(self) -> dict[str, object]:
        return {
            "patch": self.file,
            "rule": self.rule,
            "detail": self.detail,
            "commit": None
            if self.commit is None
            else {"sha": self.commit.sha, "date": self.commit.date, "subject": self.commit.subject},
        }


def confirmed(suggested: Upstreamed, effect: Upstreamed) -> Upstreamed:
    """A suggestion whose change is there too: proven by ``effect``, naming the suggesting
    rule and, where the effect found none, its commit."""
    why = f"{suggested.rule} {suggested.detail}".strip()
    return Upstreamed(
        file=suggested.file, rule="effect", commit=suggested.commit or effect.commit, detail=f"and {why}"
    )


def normalise_subject(text: str) -> str:
    s = re.sub(r"^\s*(\[[^\]]*\]\s*)+", "", text)
    s = _PR_IN_TITLE.sub("", s)
    return re.sub(r"\s+", " ", s).strip().rstrip(".").lower()


def _words(subject: str) -> tuple[str, ...]:
    return tuple(sorted(re.findall(r"[a-z0-9_]+", normalise_subject(subject))))


def _range_commits(git: Git, old: str, new: str, files: Sequence[str]) -> list[tuple[CommitInfo, set[str]]]:
    out = git.run(
        "log",
        "--no-show-signature",
        "--no-renames",
        "--format=%x1e%H%x1f%cI%x1f%s",
        "--name-only",
        f"{old}..{new}",
        "--",
        *files,
    )
    found: list[tuple[CommitInfo, set[str]]] = []
    for block in out.split("\x1e"):
        lines = [ln for ln in block.splitlines() if ln.strip()]
        if not lines:
            continue
        sha, date, subject = ([*lines[0].split("\x1f"), "", ""])[:3]
        found.append((CommitInfo(sha=sha, date=date, subject=subject), set(lines[1:])))
    return found


def _patch_ids(git: Git, data: bytes) -> list[tuple[str, str]]:
    """(patch-id, commit) pairs ``git patch-id --stable`` reads from ``data``."""
    if not data.strip():
        return []
    out = git.run("patch-id", "--stable", input=data)
    pairs = []
    for line in out.splitlines():
        f = line.split()
        if len(f) == 2:
            pairs.append((f[0], f[1]))
    return pairs


def find_upstreamed(git: Git, old: str, new: str, patches: Sequence[Candidate]) -> dict[str, Upstreamed]:
    """Each patch the rules find upstream in ``old..new``, by file name."""
    files = sorted({f for p in patches for f in p.files})
    if not files or not patches:
        return {}
    try:
        commits = _range_commits(git, old, new, files)
    except SourceError:
        return {}
    if not commits:
        return {}
    by_sha = {c.sha: c for c, _ in commits}
    # patch-ids of the upstream commits, their diffs limited to the series' files
    ids: dict[str, CommitInfo] = {}
    try:
        logp = git.run(
            "log",
            "-p",
            "--no-color",
            "--no-renames",
            "--no-ext-diff",
            "--no-textconv",
            "--format=commit %H",
            f"{old}..{new}",
            "--",
            *files,
        ).encode("utf-8", "surrogateescape")
        for pid, sha in _patch_ids(git, logp):
            if sha in by_sha:
                ids.setdefault(pid, by_sha[sha])
    except SourceError:
        pass
    by_pr: dict[str, CommitInfo] = {}
    by_subject: dict[str, list[tuple[CommitInfo, set[str]]]] = {}
    by_words: dict[tuple[str, ...], list[tuple[CommitInfo, set[str]]]] = {}
    for c, touched in commits:
        m = _PR_IN_TITLE.search(c.subject)
        if m:
            by_pr.setdefault(m.group(1), c)
        by_subject.setdefault(normalise_subject(c.subject), []).append((c, touched))
        by_words.setdefault(_words(c.subject), []).append((c, touched))

    found: dict[str, Upstreamed] = {}
    for p in patches:
        hit = _match(git, p, ids, by_sha, by_pr, by_subject, by_words)
        if hit is not None and not hit.proven and _present_at(git, new, p):
            why = f"{hit.rule} {hit.detail}".strip()
            hit = Upstreamed(file=p.file, rule="present", commit=hit.commit, detail=f"and {why}")
        if hit is not None:
            found[p.file] = hit
    return found


def _present_at(git: Git, commit: str, p: Candidate) -> bool:
    """Whether ``p``'s change is in ``commit``'s files (:func:`change_present`)."""
    try:
        (entries,) = git.tree_entries([commit], p.files)
        blobs = git.read_blobs(e.oid for e in entries.values())
    except SourceError:
        return False
    files = {f: blobs[e.oid].decode("utf-8", "replace") for f, e in entries.items() if e.oid in blobs}
    return change_present(p.diff.decode("utf-8", "replace"), files)


def _squash(line: str) -> str:
    """A line as presence compares it: its whitespace runs one blank (a reformat aside)."""
    return " ".join(line.split())


def _runs(lines: Sequence[str]) -> list[list[str]]:
    """The runs of consecutive ``+`` lines of a hunk, stripped, blank lines left out."""
    runs: list[list[str]] = []
    cur: list[str] = []
    for ln in lines:
        if ln.startswith("+"):
            if ln[1:].strip():
                cur.append(_squash(ln[1:]))
        elif ln.startswith(("-", " ")) or not ln:
            if cur:
                runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    return runs


def _starts(have: Sequence[str], run: Sequence[str]) -> list[int]:
    n = len(run)
    return [i for i in range(len(have) - n + 1) if have[i] == run[0] and list(have[i : i + n]) == list(run)]


def change_present(diff: str, files: Mapping[str, str]) -> bool:
    """Whether the change of ``diff`` is in ``files`` (path -> text) already: per hunk,
    every run of lines it adds is there (blank lines and whitespace runs aside), the runs
    within :data:`_NEAR` lines of each other, and none of the lines it removes (but
    those it adds again) is among them; a file it deletes is absent. At least
    :data:`MIN_PRESENT` significant lines added, else nothing is told."""
    parsed = parse_diff(diff)
    if not parsed.files:
        return False
    told = 0
    for f in parsed.files:
        text = files.get(f.new_path)
        if f.status == "D":
            if text is not None:
                return False
            continue
        if text is None or f.binary:
            return False
        have = [_squash(ln) for ln in text.splitlines() if ln.strip()]
        for h in f.hunks:
            runs = _runs(h.lines)
            added = {x for r in runs for x in r}
            gone = {_squash(ln[1:]) for ln in h.lines if ln.startswith("-")}
            gone = {x for x in gone if len(x) >= 4 and x not in added}
            if not runs:
                return False  # a pure removal: where it was cannot be told
            told += sum(1 for x in added if len(x) >= 4)
            spans = [_starts(have, r) for r in runs]
            if any(not s for s in spans):
                return False
            ok = False
            for at in spans[0]:
                lo, hi = at - _NEAR, at + _NEAR + sum(len(r) for r in runs)
                if all(any(lo <= x <= hi for x in s) for s in spans[1:]):
                    window = have[max(0, lo) : hi]
                    if not gone & set(window):
                        ok = True
                        break
            if not ok:
                return False
    return told >= MIN_PRESENT


def _match(
    git: Git,
    p: Candidate,
    ids: dict[str, CommitInfo],
    by_sha: dict[str, CommitInfo],
    by_pr: dict[str, CommitInfo],
    by_subject: dict[str, list[tuple[CommitInfo, set[str]]]],
    by_words: dict[tuple[str, ...], list[tuple[CommitInfo, set[str]]]],
) -> Upstreamed | None:
    try:
        own = _patch_ids(git, p.diff)
    except SourceError:
        own = []
    for pid, _ in own:
        if pid in ids:
            return Upstreamed(file=p.file, rule="patch-id", commit=ids[pid], detail=pid[:12])
    for m in _CHERRY.finditer(p.header):
        sha = m.group(1).lower()
        hits = [c for s, c in by_sha.items() if s.startswith(sha)]
        if len(hits) == 1:
            return Upstreamed(file=p.file, rule="cherry-pick", commit=hits[0], detail=sha[:12])
    prs = []
    t = _PR_IN_TITLE.search(p.subject)
    if t:
        prs.append(t.group(1))
    prs += [m.group(1) for m in _PR_URL.finditer(p.header)]
    for pr in dict.fromkeys(prs):
        if pr in by_pr:
            return Upstreamed(file=p.file, rule="pull-request", commit=by_pr[pr], detail=f"#{pr}")
    subj = normalise_subject(p.subject)
    if len(subj) >= MIN_SUBJECT:
        for c, touched in by_subject.get(subj, []):
            if touched & set(p.files):
                return Upstreamed(file=p.file, rule="subject", commit=c)
    words = _words(p.subject)
    if len(words) >= MIN_WORDS:
        for c, touched in by_words.get(words, []):
            if touched & set(p.files):
                return Upstreamed(file=p.file, rule="subject", commit=c, detail="same words")
    return None


# -- the duplicated-hunk case -------------------------------------------------------------------
def _significant(run: Sequence[str]) -> bool:
    body = [ln.strip() for ln in run if ln.strip()]
    return len(body) >= 2 or any(len(ln) >= 20 for ln in body)


def duplicated_runs(
    diff: str, path: str, *, before: str, upstream: str, merged: str
) -> list[tuple[list[int], list[str]]]:
    """Runs of lines the patch adds to ``path`` that a merge put in twice: absent (or fewer)
    where the patch was made (``before``), added meanwhile (``upstream``: the file the merge
    started from), and one more time in ``merged``. (1-based lines of every copy in
    ``merged``, the run)."""
    b, u, m = (t.splitlines() for t in (before, upstream, merged))
    out: list[tuple[list[int], list[str]]] = []
    for run in added_runs(diff, path):
        if not _significant(run):
            continue
        n_before, n_up, hits = len(find_run(b, run)), len(find_run(u, run)), find_run(m, run)
        if n_up > n_before and len(hits) > n_up:
            out.append(([h + 1 for h in hits], run))
    return out
