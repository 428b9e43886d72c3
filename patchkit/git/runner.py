"""The one way patchkit runs git: on :mod:`patchkit.core.proc`, with one environment.

git runs untranslated (``LC_ALL=C``: the messages patchkit parses, such as ``git apply
-v``, stay English), without a pager or a credential prompt (a wrong URL fails in one
line instead of hanging), and for scratch repositories without the user's config or a
repository above them. A failure is one line with git's own reason (its ``fatal:`` /
``error:`` line) and git's whole stderr as detail, every URL in them redacted
(``core.redact``: git hides a URL's password in most messages, never a token in its query).

Every git run ignores the configuration that makes git start a program of the repository's
choosing (:data:`SAFE_CONFIG`, given with ``-c``, which beats every config file): no
fsmonitor hook (``core.fsmonitor``, run by ``update-index --refresh``, ``status``,
``diff``...), no hooks (``core.hooksPath`` is ``/dev/null``), no untracked cache, no
``ext::`` transport (a URL that is a command line); ``GIT_EXTERNAL_DIFF`` is unset. Filters,
diff and merge drivers, ``core.sshCommand`` and credential helpers are named in config
files only: a worktree another program could have written is checked to be the one
patchkit made before git runs in it (git.cache.own_worktree), so its config is the
cache clone's.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from patchkit.core.errors import FatalError, SourceError, ToolMissing
from patchkit.core.proc import RunResult, run
from patchkit.core.redact import redact_text

__all__ = ["IDENTITY", "SAFE_CONFIG", "git_env", "git_exe", "git_out", "run_git", "scratch_env"]

# what commits in scratch repositories are made as (never the user's identity or signing)
IDENTITY = (
    "-c",
    "user.name=patchkit",
    "-c",
    "user.email=patchkit@localhost",
    "-c",
    "commit.gpgsign=false",
    "-c",
    "core.autocrlf=false",
)
_REPO_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY")
SAFE_CONFIG = (
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.untrackedCache=false",
    "-c",
    "protocol.ext.allow=never",
)
_PROGRAM_VARS = ("GIT_EXTERNAL_DIFF",)


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment git runs with: untranslated messages, no pager, no prompts."""
    env = dict(os.environ)
    env.update({"LC_ALL": "C", "LANGUAGE": "C", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"})
    if extra:
        env.update(extra)
    return env


def scratch_env(root: Path) -> dict[str, str]:
    """For a private repository under ``root``: git never looks above it, and no
    inherited GIT_DIR & co. point it elsewhere."""
    env = git_env({"GIT_CEILING_DIRECTORIES": str(root)})
    for k in _REPO_VARS:
        env.pop(k, None)
    return env


def git_exe() -> str:
    exe = shutil.which("git")
    if exe is None:
        raise ToolMissing(
            "git is not installed or not on PATH", hint="install git (2.30 or newer, https://git-scm.com)"
        )
    return exe


def _reason(stderr: str) -> str:
    for line in stderr.splitlines():
        line = line.strip()
        if line.startswith(("fatal:", "error:")):
            return line.split(":", 1)[1].strip()
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return lines[0] if lines else ""


def run_git(
    cwd: Path | None,
    *args: str,
    input: bytes | None = None,
    check: bool = True,
    binary: bool = False,
    env: Mapping[str, str] | None = None,
    error: type[FatalError] = SourceError,
    what: str = "",
    identity: bool = False,
) -> RunResult:
    """``git -C cwd ARGS``; with ``check`` a non-zero exit raises ``error`` (one line)."""
    argv: list[str] = [git_exe(), *SAFE_CONFIG, *(IDENTITY if identity else ())]
    if identity:  # the user's GIT_AUTHOR_*/GIT_COMMITTER_* would win over -c user.*
        env = {
            k: v
            for k, v in (git_env() if env is None else env).items()
            if not k.startswith(("GIT_AUTHOR_", "GIT_COMMITTER_"))
        }
    if cwd is not None:
        argv += ["-C", str(cwd)]
    argv += list(args)
    try:
        run_env = {k: v for k, v in (git_env() if env is None else env).items() if k not in _PROGRAM_VARS}
        r = run(argv, input=input, binary=binary, env=run_env)
    except OSError as e:
        raise ToolMissing(f"cannot run git: {e.strerror or e}", hint="install git") from None
    if check and not r.ok:
        stderr = r.stderr.strip()
        reason = _reason(stderr) or f"exit {r.returncode}"
        label = what or f"git {' '.join(args[:2])}" + (f" in {cwd}" if cwd is not None else "")
        raise error(redact_text(f"{label} failed: {reason}"), detail=redact_text(stderr))
    return r


def git_out(cwd: Path | None, *args: str, **kw: object) -> str:
    """stdout of a checked git call, without its trailing newline."""
    out = run_git(cwd, *args, **kw).stdout  # type: ignore[arg-type]
    return out[:-1] if out.endswith("\n") else out
