"""The sandbox `patchkit rebuild` runs someone else's build in, and the defines it refuses.

A release carries its recipe and patches, and a rebuild configures and compiles them:
a carried patch can add ``execute_process(COMMAND ...)`` to a CMakeLists.txt, a carried
recipe can name a program as a compiler launcher. Rebuilding someone else's release is
exactly when that code must not reach this machine, so a rebuild runs CMake's configure
and build steps (everything the release's code can make run) under bubblewrap:

- ``--unshare-all``: no network (only a loopback of its own), its own PID, IPC and UTS
  namespaces, so it sees none of this host's processes and cannot signal them;
- ``--ro-bind / /``: the host is read-only; only the rebuild's own folders (its cache:
  clone, worktree, build dir, compile cache) are bound writable, ``/tmp`` is an empty
  tmpfs, ``/dev`` and ``/proc`` are the sandbox's own;
- ``--die-with-parent``, ``--new-session``: it ends with patchkit and cannot push keys
  into the terminal (TIOCSTI).

What it does not stop (docs/hostile-input.md, "Rebuilding someone else's release"): it
can read what this user can read on the host (and put it into the binaries it makes),
use CPU, memory and the writable folders' disk without limits, and exploit a bug of the
kernel or the compiler inside it; the binaries it makes are the release's code (never
run them: a rebuild runs no smoke check unless ``--smoke``, which needs ``--no-sandbox``).

:func:`command_define` is the rule for carried recipes: a define CMake runs as a
program, includes as a CMake script or uses as a command-line rule is refused, and so
is a compiler flag that makes the compiler run or load another program.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from patchkit.core.errors import ToolMissing
from patchkit.core.proc import run

__all__ = ["NO_SANDBOX", "Sandbox", "command_define", "prepare"]

NO_SANDBOX = "--no-sandbox"
_PROBE_SECONDS = 30.0

# Defines whose value CMake runs as a program (compilers, launchers, linters, binutils,
# the emulator try_run uses), includes as a script (toolchain, project includes, rule
# overrides, module and package search paths) or expands into a command line (rule
# variables): a carried recipe may not set them. Matched on the name, case-sensitive as
# CMake is; `<LANG>`/`<NAME>` parts are any word.
_COMMAND_DEFINES = re.compile(
    r"""^(?:
        CMAKE_\w*COMPILER(?:_LAUNCHER|_AR|_RANLIB|_EXTERNAL_TOOLCHAIN)?  # + CUDA_HOST_COMPILER
      | CMAKE_\w+_LINKER_LAUNCHER
      | CMAKE_(?:\w+_)?LINKER(?:_TYPE)?
      | CMAKE_(?:AR|RANLIB|NM|OBJCOPY|OBJDUMP|STRIP|ADDR2LINE|READELF|DLLTOOL|MT|TAPI|MAKE_PROGRAM)
      | CMAKE_CROSSCOMPILING_EMULATOR
      | CMAKE_\w+_(?:CLANG_TIDY|CPPCHECK|CPPLINT|INCLUDE_WHAT_YOU_USE|ICSTAT)
      | CMAKE_LINK_WHAT_YOU_USE_CHECK
      | CMAKE_TOOLCHAIN_FILE
      | CMAKE_PROJECT_\w*INCLUDE\w*                         # _INCLUDE, _INCLUDE_BEFORE, TOP_LEVEL_INCLUDES
      | CMAKE_USER_MAKE_RULES_OVERRIDE\w*
      | CMAKE_(?:MODULE|PREFIX|PROGRAM|FIND_ROOT|SYSROOT|IGNORE)_PATH
      | CMAKE_SYSROOT(?:_COMPILE|_LINK)?
      | CMAKE_\w+_(?:COMPILE_OBJECT|LINK_EXECUTABLE|CREATE_\w+|ARCHIVE_\w+|DEPFILE_\w+|COMPILER_WRAPPER\w*)
      | \w+_(?:DIR|ROOT|EXECUTABLE|COMMAND|PROGRAM)  # Foo_DIR: a *Config.cmake script
      | CUDAToolkit_\w+
    )$""",
    re.VERBOSE,
)
# Compiler-driver options that run or load another program: gcc's -wrapper, -fplugin, -B
# (where it finds cc1, as, ld), -specs (a spec file can run commands); clang's -fuse-ld=/
# --ld-path= a path, -Xclang -load; nvcc's -ccbin; an @file of more options (the patches
# can write one into the build dir). Checked in every define's value (flags).
_COMMAND_FLAGS = re.compile(
    r"(?:^|[\s;])(?:-wrapper|-f(?:pass-)?plugin\S*|--?specs\S*|-B\S*|--ld-path\S*|-fuse-ld=\S*/\S*"
    r"|-load|-ccbin|--compiler-bindir\S*|-Xclang|-Xlinker|-Wl,\S*-plugin\S*|@\S+)(?=$|[\s;])"
)


def command_define(name: str, value: str) -> str:
    """Why a carried recipe may not set ``name = value`` ('' when it may): the value is a
    program, a script or a command line CMake would use, or compiler flags that make the
    compiler run or load another program."""
    if _COMMAND_DEFINES.match(name):
        return f"{name} names a program, script or command line that the build would run"
    flag = _COMMAND_FLAGS.search(value)
    if flag is not None:
        return f"{name} holds the compiler option {flag.group(0).strip()!r}, which can run or load a program"
    return ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sandbox:
    """bubblewrap with the host read-only and only ``writable`` folders bound writable."""

    program: Path
    writable: tuple[Path, ...]
    readonly: tuple[Path, ...] = ()  # under /tmp (hidden by its tmpfs): shown read-only

    def argv(self) -> list[str]:
        """The command prefix: put the command to run after it."""
        args = [
            str(self.program),
            "--unshare-all",  # network, PID, IPC, UTS, cgroup (and user, where it can)
            "--die-with-parent",
            "--new-session",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
            "--setenv",
            "TMPDIR",
            "/tmp",
        ]
        for folder in self.readonly:  # after the tmpfs: a folder under /tmp shows through
            args += ["--ro-bind", str(folder), str(folder)]
        for folder in self.writable:
            args += ["--bind", str(folder), str(folder)]
        return [*args, "--"]

    def wrap(self, cmd: Sequence[str]) -> list[str]:
        return [*self.argv(), *cmd]


def prepare(writable: Sequence[Path], env: Mapping[str, str], *, readonly: Sequence[Path] = ()) -> Sandbox:
    """A sandbox that works here (bwrap found on ``env``'s PATH, and it could start one):
    ToolMissing, one line naming ``--no-sandbox``, when not."""
    found = shutil.which("bwrap", path=env.get("PATH"))
    hint = (
        f"install bubblewrap (apt install bubblewrap), or pass {NO_SANDBOX} if you trust "
        "this release enough to run its build code unconfined"
    )
    if found is None:
        raise ToolMissing("the rebuild's sandbox needs bubblewrap (bwrap), which is not on PATH", hint=hint)
    for folder in writable:
        folder.mkdir(parents=True, exist_ok=True)
    box = Sandbox(
        program=Path(found),
        writable=tuple(f.resolve() for f in writable),
        readonly=tuple(f.resolve() for f in readonly),
    )
    res = run(box.wrap(["true"]), timeout=_PROBE_SECONDS, env=env, start_error="result")
    if res.returncode != 0:
        why = res.last_line() or ("did not finish" if res.returncode is None else f"exit {res.returncode}")
        raise ToolMissing(
            f"the rebuild's sandbox cannot start here (bwrap: {why}): user namespaces may be off "
            "in this container",
            hint=hint,
        )
    return box
