"""Apply the recipe's patches to a worktree with ``git apply --index`` (no fuzz).

Each patch's sha256 is checked first. A patch that reverse-applies cleanly is
already present and is not applied again. On failure the worktree is reset to
the pinned commit and the error names the patch, the file and the hunk.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from pathlib import Path

from patchkit.errors import PatchError, SourceError
from patchkit.series import Patch
from patchkit.source import run_git

__all__ = ["Hunk", "PatchResult", "apply_series", "failed_hunks", "hunks"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Hunk:
    file: str
    number: int  # 1-based within its file
    header: str  # the @@ line
    old_start: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class PatchResult:
    patch: Patch
    result: str  # "applied" | "already-present"

    def summary(self) -> dict[str, object]:
        return {**self.patch.summary(), "result": self.result}


def hunks(text: str) -> list[Hunk]:
    out: list[Hunk] = []
    current = ""
    n = 0
    for line in text.splitlines():
        m = re.match(r"^diff --git a/\S+ b/(\S+)$", line)
        if m:
            current, n = m.group(1), 0
            continue
        m = re.match(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@.*$", line)
        if m and current:
            n += 1
            out.append(Hunk(file=current, number=n, header=line.strip(), old_start=int(m.group(1))))
    return out


def failed_hunks(patch_text: str, stderr: str) -> list[str]:
    """Turn git apply's complaints into 'file hunk #n (@@ ... @@)' descriptions."""
    found: list[str] = []
    all_hunks = hunks(patch_text)
    for m in re.finditer(r"patch failed: (\S+):(\d+)", stderr):
        file, line = m.group(1), int(m.group(2))
        match = [h for h in all_hunks if h.file == file and h.old_start == line]
        if match:
            h = match[0]
            found.append(f"{file} hunk #{h.number} ({h.header})")
        else:
            found.append(f"{file} at line {line}")
    for m in re.finditer(r"error: (\S+): (No such file or directory|does not exist in index)", stderr):
        found.append(f"{m.group(1)}: the file does not exist at this commit")
    for m in re.finditer(r"error: (\S+): already exists in (?:index|working directory)", stderr):
        found.append(f"{m.group(1)}: the file the patch creates already exists")
    return found or [stderr.strip().splitlines()[-1] if stderr.strip() else "git apply failed"]


def _git_apply(worktree: Path, patch_file: Path, *flags: str) -> tuple[bool, str]:
    try:
        run_git(worktree, "apply", *flags, str(patch_file))
    except SourceError as e:
        return False, e.detail or e.message
    return True, ""


def apply_series(worktree: Path, commit: str, patches: tuple[Patch, ...],
                 tmpdir: Path) -> list[PatchResult]:
    results: list[PatchResult] = []
    try:
        for patch in patches:
            data = patch.read_verified()
            with tempfile.NamedTemporaryFile(dir=tmpdir, suffix=".patch", delete=False) as f:
                f.write(data)
                pfile = Path(f.name)
            try:
                ok, err = _git_apply(worktree, pfile, "--index", "--check")
                if ok:
                    ok, err = _git_apply(worktree, pfile, "--index")
                    if not ok:  # pragma: no cover - --check said yes
                        raise PatchError(f"{patch.filename}: git apply failed after --check: {err}")
                    results.append(PatchResult(patch=patch, result="applied"))
                    continue
                back, _ = _git_apply(worktree, pfile, "--index", "--check", "--reverse")
                if back:
                    results.append(PatchResult(patch=patch, result="already-present"))
                    continue
                where = "; ".join(failed_hunks(data.decode("utf-8", "replace"), err))
                raise PatchError(
                    f"patch {patch.filename} does not apply at {commit[:12]}: {where}",
                    hint=(f"see it with: git -C {worktree} apply --check -v {patch.path}  "
                          "(or `patchkit check` to find the upstream commit that broke it)"),
                )
            finally:
                pfile.unlink(missing_ok=True)
    except BaseException:
        # leave the worktree at the pinned commit, never half-patched
        run_git(worktree, "reset", "--quiet", "--hard", commit)
        run_git(worktree, "clean", "-fdxq")
        raise
    return results
