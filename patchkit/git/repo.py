"""Read-only git plumbing for `check` and `refresh`, batched to few processes.

Every call here reads the repository; nothing writes into it except the lazy
blob fetches a partial (blobless) clone does on its own. Git runs with
``LC_ALL=C`` so that the messages we parse (``git apply -v``) are not translated.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Sequence
from pathlib import Path

from patchkit.core.errors import ConfigError, SourceError
from patchkit.core.proc import RunResult
from patchkit.git.problems import BadRange, NotARepository, UnknownRef
from patchkit.git.runner import git_env, run_git

__all__ = [
    "CommitInfo",
    "Git",
    "TreeEntry",
    "parse_range",
]

_NULL_OID = "0" * 40


@dataclasses.dataclass(frozen=True, kw_only=True)
class CommitInfo:
    sha: str
    date: str  # committer date, ISO 8601
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:12]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TreeEntry:
    mode: str  # "100644", "100755", "120000", ...
    oid: str


def parse_range(text: str) -> tuple[str, str]:
    """``OLD..NEW`` -> (old, new); both ends are required."""
    old, sep, new = text.partition("..")
    if not sep or not old.strip() or not new.strip() or new.startswith("."):
        raise ConfigError(problem=BadRange(text=text))
    return old.strip(), new.strip()


class Git:
    """A local repository (bare or not, partial clones included), used read-only."""

    def __init__(self, repo: Path) -> None:
        self.repo = Path(repo)
        if not self.repo.exists():
            raise SourceError(f"repository {self.repo} does not exist")
        out = self._run(["rev-parse", "--git-dir"], check=False)
        if not out.ok:
            raise SourceError(problem=NotARepository(shown=str(self.repo), option="repo", found="not-git"))
        self._commit_cache: dict[str, CommitInfo] = {}
        self._anc_cache: dict[tuple[str, str], bool] = {}

    # -- running ---------------------------------------------------------------
    def _run(self, args: Sequence[str], *, input: bytes | None = None, check: bool = True) -> RunResult:
        """git in this repository; stdout as bytes (``.data``)."""
        return run_git(self.repo, *args, input=input, check=check, binary=True, env=git_env())

    def run(self, *args: str, input: bytes | None = None) -> str:
        return self._run(args, input=input).data.decode("utf-8", "replace")

    def config(self, key: str) -> str:
        """A config value ('' when unset)."""
        return self._run(["config", "--get", key], check=False).data.decode().strip()

    # -- refs and commits --------------------------------------------------------
    def resolve(self, ref: str) -> str:
        """The full sha of the commit ``ref`` names; SourceError if there is none."""
        if not ref or ref.startswith("-"):
            raise SourceError(f"unknown ref {ref!r} in {self.repo}: not a valid name")
        proc = self._run(
            ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"], check=False
        )
        sha = proc.data.decode().strip()
        if not proc.ok or len(sha) != 40:
            raise SourceError(problem=UnknownRef(ref=ref, repo=str(self.repo)))
        return sha

    def first_parent_range(self, old: str, new: str) -> list[CommitInfo]:
        """Commits of ``old..new`` along new's first-parent chain, oldest first."""
        out = self.run(
            "log",
            "--first-parent",
            "--reverse",
            "--no-show-signature",
            "--format=%H%x1f%cI%x1f%s",
            f"{old}..{new}",
            "--",
        )
        commits = [self._remember(line) for line in out.splitlines() if line]
        return commits

    def commit_infos(self, shas: Iterable[str]) -> dict[str, CommitInfo]:
        want = [s for s in dict.fromkeys(shas) if s not in self._commit_cache]
        if want:
            out = self.run(
                "log",
                "--no-walk=unsorted",
                "--stdin",
                "--no-show-signature",
                "--format=%H%x1f%cI%x1f%s",
                input=("\n".join(want) + "\n").encode(),
            )
            for line in out.splitlines():
                if line:
                    self._remember(line)
        return {s: self._commit_cache[s] for s in shas}

    def _remember(self, line: str) -> CommitInfo:
        sha, date, subject = ([*line.split("\x1f"), "", ""])[:3]
        info = CommitInfo(sha=sha, date=date, subject=subject)
        self._commit_cache[sha] = info
        return info

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        """True when ``ancestor`` is ``descendant`` or one of its ancestors."""
        key = (ancestor, descendant)
        if key not in self._anc_cache:
            proc = self._run(["merge-base", "--is-ancestor", ancestor, descendant], check=False)
            if proc.returncode not in (0, 1):
                raise SourceError(f"git merge-base failed in {self.repo}: " + proc.stderr.strip())
            self._anc_cache[key] = proc.returncode == 0
        return self._anc_cache[key]

    # -- trees and blobs -----------------------------------------------------------
    def tree_entries(self, commits: Sequence[str], paths: Sequence[str]) -> list[dict[str, TreeEntry]]:
        """For each commit, the entries of ``paths`` it has (absent paths left out).

        Two processes whatever the number of commits: ``ls-tree`` of the first,
        then one ``diff-tree --stdin`` chaining each commit to the previous one.
        Only trees are read, so a blobless clone fetches nothing here.
        """
        if not commits:
            return []
        if not paths:
            return [{} for _ in commits]
        out = self._run(["ls-tree", "-z", "--full-tree", commits[0], "--", *paths]).data
        state: dict[str, TreeEntry] = {}
        for rec in out.split(b"\0"):
            if not rec:
                continue
            meta, _, name = rec.partition(b"\t")
            mode, _typ, oid = meta.decode().split()
            state[name.decode("utf-8", "surrogateescape")] = TreeEntry(mode=mode, oid=oid)
        result = [dict(state)]
        if len(commits) == 1:
            return result
        feed = "".join(f"{cur} {prev}\n" for prev, cur in itertools.pairwise(commits))
        raw = self._run(
            ["diff-tree", "--stdin", "--always", "-r", "-z", "--no-abbrev", "--no-renames", "--", *paths],
            input=feed.encode(),
        ).data
        fields = raw.split(b"\0")
        i = 0
        seen = 0
        while i < len(fields):
            f = fields[i]
            if not f:
                i += 1
                continue
            if f.startswith(b":"):
                _om, nm, _oo, no, _st = f[1:].decode().split()
                path = fields[i + 1].decode("utf-8", "surrogateescape")
                if no == _NULL_OID:
                    state.pop(path, None)
                else:
                    state[path] = TreeEntry(mode=nm, oid=no)
                i += 2
                continue
            # a header (the commit sha, possibly followed by a newline): a new commit starts
            if seen:
                result.append(dict(state))
            seen += 1
            i += 1
        if seen:
            result.append(dict(state))
        if len(result) != len(commits):
            raise SourceError(
                f"git diff-tree gave {len(result)} trees for {len(commits)} commits in {self.repo}"
            )
        return result

    def read_blobs(self, oids: Iterable[str]) -> dict[str, bytes]:
        """Blob contents by id, in one ``cat-file --batch`` (lazily fetched in a partial clone)."""
        want = list(dict.fromkeys(oids))
        if not want:
            return {}
        out = self._run(["cat-file", "--batch"], input=("\n".join(want) + "\n").encode()).data
        blobs: dict[str, bytes] = {}
        pos = 0
        for oid in want:
            nl = out.index(b"\n", pos)
            header = out[pos:nl].decode().split()
            if len(header) < 3:
                raise SourceError(
                    f"blob {oid} is missing from {self.repo}", hint="the clone may be incomplete: fetch again"
                )
            size = int(header[2])
            blobs[oid] = out[nl + 1 : nl + 1 + size]
            pos = nl + 1 + size + 1
        return blobs

    def changed_paths(self, parent: str, commit: str, paths: Sequence[str]) -> list[str]:
        """Which of ``paths`` differ between two commits."""
        out = self._run(
            ["diff-tree", "-r", "-z", "--name-only", "--no-renames", parent, commit, "--", *paths]
        ).data
        return [p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p]

    # -- content -----------------------------------------------------------------
    def grep_fixed(
        self, commit: str, patterns: Sequence[str], paths: Sequence[str] = (), *, words: bool = False
    ) -> list[tuple[str, int, str]]:
        """(path, line, text) of every line of ``commit``'s files (under ``paths``) that
        holds one of ``patterns`` as plain text; [] when none does (or git cannot read
        the tree: a partial clone's absent blobs); ``words``: each whole word found (its
        text is the word)."""
        pats = [p for p in patterns if p and "\n" not in p and "\0" not in p]
        if not pats:
            return []
        args = ["grep", "-F", "-n", "-I", "--no-color", "-z"]
        if words:
            args += ["-w", "-o"]
        for p in pats:
            args += ["-e", p]
        proc = self._run([*args, commit, "--", *paths], check=False)
        if not proc.ok:
            return []
        found: list[tuple[str, int, str]] = []
        prefix = f"{commit}:".encode()
        for raw in proc.data.split(b"\n"):
            bits = raw.split(b"\0", 2)
            if len(bits) != 3 or not bits[1].isdigit():
                continue
            path = bits[0].removeprefix(prefix).decode("utf-8", "surrogateescape")
            found.append((path, int(bits[1]), bits[2].decode("utf-8", "replace")))
        return found

    def path_exists(self, commit: str, path: str) -> bool:
        return self._run(["cat-file", "-e", f"{commit}:{path}"], check=False).ok

    def deleted_in(self, old: str, new: str, path: str) -> tuple[CommitInfo, str | None, list[str]] | None:
        """The last commit of ``old..new`` that deleted or renamed ``path``: (it, the path it
        renamed it to or None, the files that commit added), None when none did."""
        sha = self.run(
            "log", "--no-show-signature", "--diff-filter=DR", "--format=%H", "-1", f"{old}..{new}", "--", path
        ).strip()
        if not sha:
            return None
        info = self.commit_infos([sha])[sha]
        out = self._run(
            ["diff-tree", "-r", "-z", "-M", "--name-status", "--no-commit-id", "--root", sha, "--"]
        ).data.decode("utf-8", "surrogateescape")
        bits = out.split("\0")
        renamed: str | None = None
        added: list[str] = []
        k = 0
        while k < len(bits) and bits[k]:
            status = bits[k]
            if status.startswith(("R", "C")) and k + 2 < len(bits):
                if bits[k + 1] == path and status.startswith("R"):
                    renamed = bits[k + 2]
                k += 3
                continue
            if status == "A" and k + 1 < len(bits):
                added.append(bits[k + 1])
            k += 2
        return info, renamed, added

    def objects_dir(self) -> Path:
        out = self.run("rev-parse", "--git-path", "objects").strip()
        p = Path(out)
        return p if p.is_absolute() else (self.repo / p).resolve()
