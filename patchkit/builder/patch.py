"""Apply the recipe's patches to a worktree with ``git apply --index`` (no fuzz).

Each patch's sha256 is checked first. A patch that reverse-applies cleanly is
already present and is not applied again. On failure the worktree is reset to
the pinned commit and the error names the patch, the file and the hunk.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

from patchkit.core.errors import PatchError, SourceError
from patchkit.git.runner import git_out
from patchkit.spec.buildinfo import ApplyResult, PatchRecord
from patchkit.spec.patchfile import parse_apply_output, parse_diff
from patchkit.spec.series import Patch

__all__ = ["AppliedPatch", "apply_series", "check_links", "failed_hunks"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class AppliedPatch:
    """A patch of the series and what happened to it in the worktree."""

    patch: Patch
    result: ApplyResult

    def record(self) -> PatchRecord:
        p = self.patch
        return PatchRecord(
            name=p.name,
            file=p.filename,
            sha256=p.sha256,
            upstream_status=p.upstream_status,
            when=p.when,
            experimental=p.experimental,
            result=self.result,
        )


def failed_hunks(patch_text: str, stderr: str) -> list[str]:
    """Turn git apply's complaints into 'file hunk #n (@@ ... @@)' descriptions."""
    all_hunks = parse_diff(patch_text).hunks
    _, conflicts = parse_apply_output(stderr, all_hunks)
    found: list[str] = []
    for c in conflicts:
        if c.hunk is not None:
            found.append(f"{c.file} hunk #{c.hunk} ({c.header})")
        elif c.header:
            found.append(f"{c.file} at {c.header}")
        elif "No such file" in c.reason or "does not exist" in c.reason:
            found.append(f"{c.file}: the file does not exist at this commit")
        elif "already exists" in c.reason:
            found.append(f"{c.file}: the file the patch creates already exists")
        else:
            found.append(f"{c.file}: {c.reason}")
    return found or [stderr.strip().splitlines()[-1] if stderr.strip() else "git apply failed"]


def check_links(worktree: Path, paths: tuple[str, ...], patch_name: str) -> None:
    """After a patch is in: each path it wrote (and every folder above it) that is a
    symlink must resolve inside the worktree. The series loader already refuses a patch
    that states such a link; this catches what it cannot see (a patch that rewrites the
    content of a link upstream already has, or moves one to another folder)."""
    root = Path(os.path.realpath(worktree))
    for rel in paths:
        p = worktree
        for part in rel.split("/"):
            p = p / part
            if not p.is_symlink():
                continue
            real = Path(os.path.realpath(p))
            if not real.is_relative_to(root):
                raise PatchError(
                    f"patch {patch_name} makes {p.relative_to(worktree).as_posix()} a symlink "
                    f"to {os.readlink(p)!r}, which resolves outside the worktree ({real}): "
                    "refused, the worktree is reset",
                    hint="patches are data: a symlink a patch writes must stay inside the source tree",
                )


def _git_apply(worktree: Path, patch_file: Path, *flags: str) -> tuple[bool, str]:
    try:
        git_out(worktree, "apply", *flags, str(patch_file))
    except SourceError as e:
        return False, e.detail or e.message
    return True, ""


def apply_series(worktree: Path, commit: str, patches: tuple[Patch, ...], tmpdir: Path) -> list[AppliedPatch]:
    results: list[AppliedPatch] = []
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
                    parsed = parse_diff(data.decode("utf-8", "replace"))
                    check_links(
                        worktree,
                        tuple(dict.fromkeys(p for f in parsed.files for p in (f.new_path, *f.names))),
                        patch.filename,
                    )
                    results.append(AppliedPatch(patch=patch, result=ApplyResult.APPLIED))
                    continue
                back, _ = _git_apply(worktree, pfile, "--index", "--check", "--reverse")
                if back:
                    results.append(AppliedPatch(patch=patch, result=ApplyResult.ALREADY_PRESENT))
                    continue
                where = "; ".join(failed_hunks(data.decode("utf-8", "replace"), err))
                raise PatchError(
                    f"patch {patch.filename} does not apply at {commit[:12]}: {where}",
                    hint=(
                        f"see it with: git -C {worktree} apply --check -v {patch.path}  "
                        "(or `patchkit check` to find the upstream commit that broke it)"
                    ),
                )
            finally:
                pfile.unlink(missing_ok=True)
    except BaseException:
        # leave the worktree at the pinned commit, never half-patched
        git_out(worktree, "reset", "--quiet", "--hard", commit)
        git_out(worktree, "clean", "-fdxq")
        raise
    return results
