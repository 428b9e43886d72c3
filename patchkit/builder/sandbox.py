"""The sandbox `patchkit rebuild` runs someone else's build in, and the defines it refuses.

A release carries its recipe and patches, and a rebuild configures and compiles them:
a carried patch can add ``execute_process(COMMAND ...)`` to a CMakeLists.txt, a carried
recipe can name a program as a compiler launcher. Rebuilding someone else's release is
exactly when that code must not reach this machine, so a rebuild runs CMake's configure
and build steps (everything the release's code can make run) under bubblewrap:

- no privileges, whoever starts it: its own user namespace with the unprivileged uid/gid
  65534 inside (``--unshare-user --uid 65534 --gid 65534``; the caller's own uid outside,
  so what it writes is the caller's, root's for root), every capability dropped
  (``--cap-drop ALL``: as root too), no new privileges (bwrap sets PR_SET_NO_NEW_PRIVS),
  no user namespaces of its own (``--disable-userns``; allowed only when the compilers run
  in a build root, whose wrappers start their own unprivileged bwrap);
- ``--unshare-all``: no network (only a loopback of its own), its own PID, IPC, UTS and
  cgroup namespaces, so it sees none of this host's processes and cannot signal them;
- an explicit view of the host, read-only: ``/usr``, ``/bin``, ``/sbin``, ``/lib*`` (as
  links where the host has links), the parts of ``/etc`` compilers and the loader read
  (:data:`ETC`), each program the build runs wherever it lives (:func:`program_paths`:
  cmake and its modules, ninja, the compile-cache launcher, a compiler's own prefix), and
  the folders it reads (the carried project, the rebuild's clone, a build root). Nothing
  else exists: not ``$HOME`` (``HOME`` is ``/tmp`` inside), not ``/root``, ``/home``,
  ``/run``, ``/var``, ``/mnt``, ``/opt``, ``/srv``, so no host Unix socket (user bus,
  docker.sock) is reachable. ``/tmp`` is an empty tmpfs, ``/dev`` and ``/proc`` its own;
- writable: only the rebuild's own folders (its work folder and compile cache);
- the caller's environment without what the build does not need (:data:`_KEEP_ENV` says
  what it keeps: PATH, locale, compiler and CMake settings; tokens, keys, sockets and
  the rest are unset);
- ``--die-with-parent``, ``--new-session``: it ends with patchkit and cannot push keys
  into the terminal (TIOCSTI).

What it does not stop (docs/hostile-input.md, "Rebuilding someone else's release"):
reading what the view shows (the system's files under /usr and the listed /etc files)
and putting that into the binaries it makes, using CPU, memory and the writable folders'
disk without limits, and exploiting a bug of the kernel or the compiler inside it; the
binaries it makes are the release's code (never run them: a rebuild runs no smoke check
unless ``--smoke``, which needs ``--no-sandbox``).

:func:`command_define` is the rule for carried recipes: a define CMake runs as a
program, includes as a CMake script or uses as a command-line rule is refused, and so
is a compiler flag that makes the compiler run or load another program, and any shell
metacharacter in a define CMake puts on a command line (ninja runs every rule through
``/bin/sh -c``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from patchkit.builder.problems import SandboxUnavailable
from patchkit.builder.sysroot import IN_SANDBOX
from patchkit.core.errors import ToolMissing
from patchkit.core.proc import RunResult, run

__all__ = [
    "ETC",
    "Sandbox",
    "command_define",
    "in_view",
    "prepare",
    "program_links",
    "program_paths",
    "toolchain_paths",
    "unset_env",
]

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


# Defines CMake pastes into command lines as they are (no quoting): the flags variables
# (CMAKE_C_FLAGS, CMAKE_CXX_FLAGS_RELEASE, CMAKE_EXE_LINKER_FLAGS_INIT, CMAKE_CUDA_FLAGS,
# CMAKE_STATIC_LINKER_FLAGS...), a compiler's first arguments, definitions and options
# lists, standard libraries and include folders. Ninja runs each of those command lines
# through ``/bin/sh -c``: in these even a ``;`` (a CMake list elsewhere) separates commands.
_COMMAND_LINE_DEFINES = re.compile(
    r"""^(?:
        CMAKE_\w*FLAGS\w*
      | CMAKE_\w+_COMPILER_ARG\d+
      | \w*DEFINITIONS\w*
      | CMAKE_\w+_(?:STANDARD_LIBRARIES|STANDARD_INCLUDE_DIRECTORIES)\w*
      | CMAKE_\w+_(?:COMPILE_OPTIONS|LINK_OPTIONS|LINK_FLAGS)\w*
      | CMAKE_\w*LINK_(?:OPTIONS|FLAGS|LIBRARIES|DEF_FILE_FLAG)\w*
      | \w*_(?:CFLAGS|CXXFLAGS|LDFLAGS|FLAGS|OPTIONS|ARGS)
    )$""",
    re.VERBOSE,
)
# What makes a shell run a command or write a file in any value: a command substitution
# (`` ` ``, ``$(``), a command separator or pipe (``|``, ``&``, a newline), a redirection
# (``<``, ``>``); also every other control character. ``;`` too in a command-line define.
_SHELL = re.compile(r"[`|&<>\x00-\x1f\x7f]|\$\(")
_SHELL_IN_COMMAND_LINE = re.compile(r"[`|&<>;\x00-\x1f\x7f]|\$\(")


def command_define(name: str, value: str) -> str:
    """Why a carried recipe may not set ``name = value`` ('' when it may): the value is a
    program, a script or a command line CMake would use, compiler flags that make the
    compiler run or load another program, or it holds what a shell runs (a define's value
    can reach ninja's ``/bin/sh -c`` command lines: every define's is checked, a
    command-line define's strictest, ``;`` included)."""
    if _COMMAND_DEFINES.match(name):
        return f"{name} names a program, script or command line that the build would run"
    flag = _COMMAND_FLAGS.search(value)
    if flag is not None:
        return f"{name} holds the compiler option {flag.group(0).strip()!r}, which can run or load a program"
    shell = (_SHELL_IN_COMMAND_LINE if _COMMAND_LINE_DEFINES.match(name) else _SHELL).search(value)
    if shell is not None:
        return (
            f"{name} holds {shell.group(0)!r}, which a shell runs as a command, pipe or redirection "
            "(the build's command lines run through /bin/sh)"
        )
    return ""


# Where the build's system view comes from, each read-only at its own path: the system's
# programs and libraries, and of /etc what compilers, the loader and `id` read (Debian's
# alternatives hold /usr/bin/cc and c++). A top-level link (/bin -> usr/bin on a merged
# /usr) is made as the same link.
SYSTEM = ("/usr",)
TOP_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC = (
    "alternatives",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "passwd",
    "group",
    "nsswitch.conf",
    "localtime",
    "timezone",
    "hosts",
    "os-release",
    "debian_version",
    "ccache.conf",
)
SANDBOX_UID = 65534  # nobody/nogroup: no file of the host is theirs to write
# The caller's environment variables the build sees; every other one is unset inside
# (tokens, keys, SSH_AUTH_SOCK, DBUS_SESSION_BUS_ADDRESS, XDG_RUNTIME_DIR, proxies...).
_KEEP_ENV = re.compile(
    r"""^(?:PATH|LANG|LANGUAGE|LC_\w+|TZ|TERM|COLUMNS|NO_COLOR|FORCE_COLOR|CLICOLOR\w*
      |SOURCE_DATE_EPOCH|CCACHE_\w+|CMAKE_\w+|NINJA_STATUS
      |CC|CXX|CPP|CFLAGS|CXXFLAGS|CPPFLAGS|LDFLAGS|CUDAFLAGS|CUDACXX|CUDAHOSTCXX|CUDA_\w+|NVCC_\w+
      |LD_LIBRARY_PATH|LIBRARY_PATH|CPATH|C_INCLUDE_PATH|CPLUS_INCLUDE_PATH|PKG_CONFIG_\w+
      |GGML_\w+|LLAMA_\w+)$""",
    re.VERBOSE,
)
# set inside whatever the caller's are
# (IN_SANDBOX: a build root's compiler wrappers run their bwrap as one nested in
# this one, builder.sysroot)
_FIXED_ENV = {
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "USER": "nobody",
    "LOGNAME": "nobody",
    IN_SANDBOX: "1",
}


def unset_env(env: Mapping[str, str]) -> tuple[str, ...]:
    """The variables of ``env`` the sandbox unsets: all but :data:`_KEEP_ENV`'s (and those
    it sets itself)."""
    return tuple(sorted(k for k in env if not _KEEP_ENV.match(k) and k not in _FIXED_ENV))


def in_view(path: Path) -> bool:
    """Whether the system view already shows ``path`` (under /usr, or a top-level link)."""
    p = str(path)
    return any(p == d or p.startswith(d + "/") for d in (*SYSTEM, *TOP_LINKS))


def program_paths(program: Path) -> list[Path]:
    """What a program needs to run in the sandbox where it lives: the real file (a link's
    target: :func:`program_links` makes the link), and for ``<prefix>/bin/NAME`` the data
    folders ``<prefix>/share/NAME`` and ``<prefix>/share/NAME-*`` (cmake's modules: its
    CMAKE_ROOT is found from the executable's real path). Paths the system view shows are
    left out."""
    out: list[Path] = []
    p = program.resolve()
    if in_view(p) or not p.exists():
        return out
    out.append(p)
    if p.parent.name == "bin":
        share = p.parent.parent / "share"
        if share.is_dir():
            out += sorted(
                d
                for d in share.iterdir()
                if d.is_dir() and (d.name == p.name or d.name.startswith(p.name + "-"))
            )
    return out


def program_links(program: Path) -> list[tuple[str, Path]]:
    """(target, link) for a program named by a link outside the system view: the same
    link inside, so the program sees its real path (a bind would not)."""
    given = Path(os.path.abspath(program))
    if in_view(given) or not given.is_symlink():
        return []
    return [(str(given.resolve()), given)]


def toolchain_paths(compiler: Path) -> list[Path]:
    """A compiler outside the system view needs its whole installation (its cc1, as, ld,
    headers and libraries): ``<prefix>`` of ``<prefix>/bin/NAME``, else its folder."""
    out: list[Path] = []
    for p in dict.fromkeys((Path(os.path.abspath(compiler)), compiler.resolve())):
        if in_view(p) or not p.exists():
            continue
        out.append(p.parent.parent if p.parent.name == "bin" else p.parent)
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sandbox:
    """bubblewrap: unprivileged, the system view read-only, ``readonly`` shown read-only
    and only ``writable`` folders writable (module docstring)."""

    program: Path
    writable: tuple[Path, ...]
    readonly: tuple[Path, ...] = ()  # folders and files shown read-only at their own paths
    links: tuple[tuple[str, Path], ...] = ()  # (target, path): links made inside, after the binds
    unset: tuple[str, ...] = ()  # the caller's environment variables the build does not get
    # may make user namespaces of its own: the compilers of a build root run under bwrap
    nested: bool = False
    host: Path = Path("/")  # where the system view is read from (tests)

    def _system(self) -> list[str]:
        args: list[str] = []
        for d in SYSTEM:
            if (self.host / d[1:]).is_dir():
                args += ["--ro-bind", d, d]
        for d in TOP_LINKS:
            here = self.host / d[1:]
            if here.is_symlink():
                args += ["--symlink", os.readlink(here), d]
            elif here.is_dir():
                args += ["--ro-bind", d, d]
        for name in ETC:
            if (self.host / "etc" / name).exists():
                args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
        return args

    def argv(self) -> list[str]:
        """The command prefix: put the command to run after it."""
        args = [
            str(self.program),
            "--unshare-all",  # network, PID, IPC, UTS, cgroup
            "--unshare-user",  # as root too: bwrap makes no user namespace for root unless asked
            "--uid",
            str(SANDBOX_UID),
            "--gid",
            str(SANDBOX_UID),
            "--cap-drop",
            "ALL",
            *(() if self.nested else ("--disable-userns",)),
            "--die-with-parent",
            "--new-session",
            *self._system(),
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
        ]
        for k, v in _FIXED_ENV.items():
            args += ["--setenv", k, v]
        for k in self.unset:
            args += ["--unsetenv", k]
        # parents before what lies under them (a writable work folder inside the read-only
        # cache); everything after the tmpfs, so a folder under /tmp shows through
        binds = [("--ro-bind", p) for p in self.readonly] + [("--bind", p) for p in self.writable]
        for flag, p in sorted(binds, key=lambda b: len(b[1].parts)):
            args += [flag, str(p), str(p)]
        for target, link in self.links:
            args += ["--symlink", target, str(link)]
        return [*args, "--"]

    def wrap(self, cmd: Sequence[str]) -> list[str]:
        return [*self.argv(), *cmd]


def _probe(res: RunResult) -> str:
    """What is wrong with the sandbox a probe ran in ('' when nothing): it must run with no
    capability, no new privileges, and not as root."""
    fields = dict(line.split(":", 1) for line in res.stdout.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    if fields.get("CapEff", "").strip("0") or "CapEff" not in fields:
        return f"it kept capabilities (CapEff {fields.get('CapEff', '?')})"
    if fields.get("NoNewPrivs") != "1":
        return "it did not set no-new-privileges"
    uid = fields.get("Uid", "").split()
    if not uid or "0" in uid:
        return f"it runs as uid {fields.get('Uid', '?')}"
    return ""


def _run_probe(box: Sandbox, env: Mapping[str, str]) -> RunResult:
    return run(
        box.wrap(["/bin/sh", "-c", "grep -E '^(Uid|CapEff|NoNewPrivs):' /proc/self/status"]),
        timeout=_PROBE_SECONDS,
        env=env,
        start_error="result",
    )


def prepare(
    writable: Sequence[Path],
    env: Mapping[str, str],
    *,
    readonly: Sequence[Path] = (),
    programs: Sequence[Path] = (),
    compilers: Sequence[Path] = (),
    nested: bool = False,
) -> Sandbox:
    """A sandbox that works here (bwrap found on ``env``'s PATH, it could start one, and the
    one it started runs unprivileged): ToolMissing (a :class:`SandboxUnavailable`), when
    not. ``programs`` (cmake, ninja, the launcher) and ``compilers`` are shown where they
    live (:func:`program_paths`, :func:`toolchain_paths`)."""
    found = shutil.which("bwrap", path=env.get("PATH"))
    if found is None:
        raise ToolMissing(problem=SandboxUnavailable(found="no-bwrap"))
    for folder in writable:
        folder.mkdir(parents=True, exist_ok=True)
    shown = [f.resolve() for f in readonly]
    links: list[tuple[str, Path]] = []
    for p in programs:
        shown += program_paths(p)
        links += program_links(p)
    for c in compilers:
        shown += toolchain_paths(c)
    box = Sandbox(
        program=Path(found),
        writable=tuple(f.resolve() for f in writable),
        readonly=tuple(dict.fromkeys(shown)),
        links=tuple(dict.fromkeys(links)),
        unset=unset_env(env),
        nested=nested,
    )
    res = _run_probe(box, env)
    if res.returncode != 0 and not nested and "disable-userns" in res.stderr:
        # bwrap before 0.8 has no --disable-userns: still unprivileged, nested namespaces
        # allowed (they cannot undo the read-only view; the probe still checks the rest)
        box = dataclasses.replace(box, nested=True)
        res = _run_probe(box, env)
    if res.returncode != 0:
        why = res.last_line() or ("did not finish" if res.returncode is None else f"exit {res.returncode}")
        raise ToolMissing(problem=SandboxUnavailable(found="cannot-start", bwrap=found, why=why))
    bad = _probe(res)
    if bad:
        raise ToolMissing(problem=SandboxUnavailable(found="leaky", bwrap=found, why=bad))
    return box
