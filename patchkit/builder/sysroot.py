"""Build roots: an older distribution patchkit prepares once, keeps in the cache and builds in,
so the binaries need no newer C library than that distribution's (a glibc floor).

A root is a minimal Debian made with ``debootstrap --variant=minbase`` from Debian's
archive, with ``build-essential cmake ninja-build git`` installed inside it (apt run in the
root through bubblewrap). It lives in the cache::

    <cache>/roots/<name>/tree/        the root's files
    <cache>/roots/<name>/root.json    what it is (RootRecord): suite, mirror, glibc, GCC,
                                      a digest of its installed packages (its id)

A build in a root (a recipe's ``[build] root = "debian11"``) runs the host's cmake and
ninja, and the compilers *inside* the root: ``cc``/``c++`` in the work folder are small
scripts that exec ``gcc``/``g++`` of the root under ``bwrap`` (the root as ``/``, the work
folder bound at its own path, no network), so the compiler reads the root's headers and
links against the root's glibc and libstdc++. CMake's find_* look in the root only
(``CMAKE_FIND_ROOT_PATH``; the root is bound at its own path too, so what they find is
there for the compiler). ``PATCHKIT_BUILD_ROOT = name@id`` goes into the defines, so
build-info and the manifest say which root built it, and a re-prepared root reconfigures.

Why not ``zig cc`` (a compiler that targets an older glibc): tried at the pin, its
llama-cli aborts with ``free(): invalid pointer`` (zig's libc++ and C++ objects crossing
DSO boundaries); a root gives exactly Debian's GCC 10 toolchain, which Debian builds its
own C++ packages with.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from patchkit.builder.problems import (
    ProgramMissing,
    RootDamaged,
    RootNeedsPrivilege,
    RootNotPrepared,
    RootPlantedLink,
    RootUnknown,
)
from patchkit.core.errors import BuildError, ConfigError, ToolMissing
from patchkit.core.fs import atomic_write_text, read_capped
from patchkit.core.log import log
from patchkit.core.proc import run, run_streaming
from patchkit.core.record import Record, RecordError, canonical_json, decode

__all__ = [
    "KINDS",
    "ROOT_PACKAGES",
    "RootKind",
    "RootRecord",
    "bwrap_argv",
    "compiler_defines",
    "find_root",
    "make_mount_points",
    "prepare_root",
    "read_dpkg_status",
    "require_root",
    "root_dir",
    "write_wrappers",
]

ROOT_PACKAGES = ("build-essential", "cmake", "ninja-build", "git")
DPKG_STATUS_MAX = 64 << 20  # a minbase root's status file is ~100 KiB; a full desktop's ~5 MiB
RECORD_MAX = 1 << 20
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
_UNPRIVILEGED = "65534"  # nobody/nogroup inside a build root's sandbox
IN_SANDBOX = "PATCHKIT_SANDBOXED"  # set inside a rebuild's sandbox (builder.sandbox)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RootKind:
    """A root patchkit knows how to prepare: a Debian suite and the floor it gives."""

    name: str
    suite: str
    mirror: str
    glibc: str  # the floor its binaries get
    glibcxx: str  # the newest GLIBCXX_ version of its libstdc++
    gcc: str  # its default GCC major


KINDS: Mapping[str, RootKind] = {
    "debian11": RootKind(
        name="debian11",
        suite="bullseye",
        mirror="http://deb.debian.org/debian",
        glibc="2.31",
        glibcxx="3.4.28",
        gcc="10",
    ),
    "debian12": RootKind(
        name="debian12",
        suite="bookworm",
        mirror="http://deb.debian.org/debian",
        glibc="2.36",
        glibcxx="3.4.30",
        gcc="12",
    ),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RootRecord(Record):
    """``root.json``: what a prepared root is."""

    name: str  # the root's name (debian11)
    suite: str  # the Debian suite it was made from (bullseye)
    mirror: str  # the Debian archive it was made from
    prepared: str  # ISO time it was made
    glibc: str  # libc6's upstream version in the root (2.31)
    gcc: str  # gcc's version in the root (10.2.1-6)
    cmake: str  # cmake's version in the root
    packages: int  # installed packages
    packages_sha256: str  # of the sorted "name=version" lines: the root's id
    debootstrap: str | None = None  # the debootstrap version that made it; null: not known

    @property
    def id(self) -> str:
        return self.packages_sha256[:12]

    @property
    def label(self) -> str:
        return f"{self.name}@{self.id}"


def root_dir(cache: Path, name: str) -> Path:
    return cache / "roots" / name


def _kind(name: str) -> RootKind:
    if name not in KINDS:
        raise ConfigError(problem=RootUnknown(name=name, known=tuple(KINDS)))
    return KINDS[name]


def read_dpkg_status(data: bytes) -> dict[str, str]:
    """{package: version} of the installed packages in a dpkg status file's bytes."""
    out: dict[str, str] = {}
    for stanza in data.decode("utf-8", "replace").split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        pkg, version, status = fields.get("package"), fields.get("version"), fields.get("status", "")
        if pkg and version and status.endswith(" installed"):
            arch = fields.get("architecture", "")
            out[pkg if arch in ("", "all", "amd64") else f"{pkg}:{arch}"] = version
    return out


def _upstream_version(debian: str) -> str:
    """2.31-13+deb11u11 -> 2.31; 4:10.2.1-1 -> 10.2.1."""
    v = debian.split(":", 1)[-1]
    return v.rsplit("-", 1)[0] if "-" in v else v


def _record_for(kind: RootKind, tree: Path, debootstrap: str | None) -> RootRecord:
    data = read_capped(
        tree / "var" / "lib" / "dpkg" / "status", limit=DPKG_STATUS_MAX, error=BuildError, what="dpkg status"
    )
    pkgs = read_dpkg_status(data)
    if "libc6" not in pkgs:
        raise BuildError(problem=RootDamaged(tree=tree, found="no-libc"))
    lines = "".join(f"{k}={pkgs[k]}\n" for k in sorted(pkgs))
    gcc = pkgs.get(f"gcc-{kind.gcc}") or pkgs.get("gcc") or ""
    return RootRecord(
        name=kind.name,
        suite=kind.suite,
        mirror=kind.mirror,
        prepared=dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
        glibc=_upstream_version(pkgs["libc6"]),
        gcc=_upstream_version(gcc) if gcc else "",
        cmake=_upstream_version(pkgs.get("cmake", "")) if pkgs.get("cmake") else "",
        packages=len(pkgs),
        packages_sha256=hashlib.sha256(lines.encode()).hexdigest(),
        debootstrap=debootstrap,
    )


_ENTRIES = ("tree", "tree.new", "tree.old", "root.json", "prepare.log")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _planted_link(cache: Path, name: str) -> Path | None:
    """The first of ``<cache>/roots``, ``roots/<name>`` and what patchkit keeps in it that
    is a link (someone else's: patchkit makes none there), or None."""
    base = root_dir(cache, name)
    for p in (base.parent, base, *(base / e for e in _ENTRIES)):
        if p.is_symlink():
            return p
    return None


def find_root(cache: Path, name: str) -> RootRecord | None:
    """The record of the prepared root ``name`` in the cache, or None (not prepared, a link
    planted in its place, or its record unreadable or not what patchkit writes: ``prepare``
    makes it again)."""
    base = root_dir(cache, name)
    rec = base / "root.json"
    if _planted_link(cache, name) is not None or not (base / "tree").is_dir() or not rec.is_file():
        return None
    try:
        raw = read_capped(rec, limit=RECORD_MAX, error=BuildError, what="root.json")
        import json

        found = decode(RootRecord, json.loads(raw.decode("utf-8")))
    except (BuildError, RecordError, ValueError, UnicodeDecodeError):
        return None
    if found.name != name or not _SHA256.fullmatch(found.packages_sha256):
        return None
    return found


def require_root(cache: Path, name: str) -> RootRecord:
    """The prepared root ``name``; BuildError saying how to prepare it when it is not."""
    _kind(name)
    found = find_root(cache, name)
    if found is None:
        raise BuildError(problem=RootNotPrepared(name=name, cache=cache))
    return found


def _tool(name: str, env: Mapping[str, str], why: str) -> str:
    found = shutil.which(name, path=env.get("PATH"))
    if found is None:
        raise ToolMissing(problem=ProgramMissing(program=name, found=f"{name} not found on PATH ({why})"))
    return found


def bwrap_argv(
    bwrap: str,
    tree: Path,
    binds: Sequence[Path] = (),
    *,
    network: bool = False,
    cwd: Path | None = None,
    privileged: bool = False,
    nested: bool = False,
) -> list[str]:
    """bwrap's arguments to run a program in ``tree`` as ``/``: /dev, /proc, the root also
    at its own path, each of ``binds`` writable at its own path.

    A build's compilers run unprivileged (the default): the root read-only, an empty /tmp,
    their own user namespace with uid/gid 65534 inside (the caller's own outside, so what
    they write is the caller's), every capability dropped (as root too), no network, their
    own PID/IPC/UTS namespaces (bwrap sets no-new-privileges). (No ``--disable-userns``:
    bwrap before 0.8 lacks it, and a compiler is not the release's code; in a rebuild the
    outer sandbox is what holds that.) ``nested``: inside the rebuild's sandbox (builder.sandbox), which
    already has a PID namespace of its own and whose /proc an unprivileged bwrap may not
    mount again: the same, but in its PID namespace, with its /proc. ``privileged`` is for
    `root prepare` only: apt installs Debian's packages into the root, which needs it
    writable, root's capabilities and the network (``network``)."""
    if privileged:
        argv = [bwrap, "--bind", str(tree), "/", "--dev", "/dev", "--proc", "/proc"]
        argv += ["--bind", str(tree), str(tree)]
        for b in binds:
            argv += ["--bind", str(b), str(b)]
        if network:
            argv += ["--ro-bind", "/etc/resolv.conf", "/etc/resolv.conf"]
        else:
            argv.append("--unshare-net")
    else:
        spaces = ["--unshare-all"] if not nested else ["--unshare-ipc", "--unshare-net", "--unshare-uts"]
        argv = [
            bwrap,
            *spaces,
            "--unshare-user",
            "--uid",
            _UNPRIVILEGED,
            "--gid",
            _UNPRIVILEGED,
            "--cap-drop",
            "ALL",
            "--ro-bind",
            str(tree),
            "/",
            "--dev",
            "/dev",
            *(["--proc", "/proc"] if not nested else ["--ro-bind", "/proc", "/proc"]),
            "--tmpfs",
            "/tmp",
            "--ro-bind",
            str(tree),
            str(tree),
        ]
        for b in binds:
            argv += ["--bind", str(b), str(b)]
        argv += ["--setenv", "TMPDIR", "/tmp"]
    argv += ["--die-with-parent", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"]
    if cwd is not None:
        argv += ["--chdir", str(cwd)]
    return argv


def prepare_root(
    cache: Path, name: str, *, env: Mapping[str, str], again: bool = False, log_path: Path | None = None
) -> tuple[RootRecord, bool]:
    """Prepare the root ``name`` (or reuse it): (its record, whether it was made now).

    debootstrap minbase into ``tree.new``, apt-get install :data:`ROOT_PACKAGES` inside it
    (network on), then the record; only then is it moved to ``tree`` and its record written,
    so an interrupted preparation leaves nothing that reads as a root."""
    kind = _kind(name)
    found = find_root(cache, name)
    if found is not None and not again:
        return found, False
    if sys.platform != "linux":
        raise ConfigError("build roots are Debian roots for Linux builds", hint="prepare one on Linux")
    if os.geteuid() != 0:
        raise ConfigError(problem=RootNeedsPrivilege(name=name))
    debootstrap = _tool("debootstrap", env, "it makes the root")
    bwrap = _tool("bwrap", env, "apt runs inside the root")
    planted = _planted_link(cache, name)
    if planted is not None:  # a write through it would land in someone's folder
        raise BuildError(problem=RootPlantedLink(link=planted, name=name))
    base = root_dir(cache, name)
    base.mkdir(parents=True, exist_ok=True)
    new = base / "tree.new"
    for stale in (new, base / "tree.old"):  # an interrupted preparation's
        shutil.rmtree(stale, ignore_errors=True)
    try:
        return _prepare(kind, base, debootstrap, bwrap, env=env, log_path=log_path), True
    finally:  # made, or failed: no tree.new or tree.old is left
        shutil.rmtree(new, ignore_errors=True)
        shutil.rmtree(base / "tree.old", ignore_errors=True)
        (base / "root.json.old").unlink(missing_ok=True)


def _prepare(
    kind: RootKind,
    base: Path,
    debootstrap: str,
    bwrap: str,
    *,
    env: Mapping[str, str],
    log_path: Path | None,
) -> RootRecord:
    name = kind.name
    new = base / "tree.new"
    logf = log_path or base / "prepare.log"
    logf.write_text(f"patchkit root prepare {name}\n", encoding="utf-8")
    log.info(f"debootstrap --variant=minbase {kind.suite} ({kind.mirror}); log: {logf}")
    rc = run_streaming(
        [debootstrap, "--variant=minbase", kind.suite, str(new), kind.mirror], log_path=logf, env=env
    )
    if rc != 0:
        raise BuildError(f"debootstrap failed (exit {rc}); log: {logf}", hint="check the network and the log")
    inside = [*bwrap_argv(bwrap, new, network=True, privileged=True)]
    apt_env = {**env, "DEBIAN_FRONTEND": "noninteractive"}
    for step in (
        ["apt-get", "update"],
        ["apt-get", "install", "-y", "--no-install-recommends", *ROOT_PACKAGES],
        ["apt-get", "clean"],
    ):
        log.info(f"in the root: {' '.join(step)}")
        rc = run_streaming([*inside, *step], log_path=logf, env=apt_env)
        if rc != 0:
            raise BuildError(f"`{' '.join(step)}` in the root failed (exit {rc}); log: {logf}")
    version = run([debootstrap, "--version"], timeout=30)
    words = version.stdout.split() if version.ok else []
    record = _record_for(kind, new, words[-1] if words else None)
    fd, staged = tempfile.mkstemp(prefix=".root.json.", suffix=".tmp", dir=base)
    try:  # the record is on disk before anything moves: a full disk stops it here
        with os.fdopen(fd, "wb") as f:
            f.write(canonical_json(record))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(staged, 0o644)
        _swap_in(base, Path(staged))
    finally:
        Path(staged).unlink(missing_ok=True)
    return record


def _swap_in(base: Path, record: Path) -> None:
    """``tree.new`` becomes ``tree`` and ``record`` its ``root.json``, by renames that are
    undone when one fails (the previous root and its record are back); the previous tree is
    left as ``tree.old`` and its record as ``root.json.old`` for the caller to remove. Never
    a record beside a tree it is not."""
    tree, rec = base / "tree", base / "root.json"
    moved: list[tuple[Path, Path]] = []
    try:
        for src, dst in ((rec, base / "root.json.old"), (tree, base / "tree.old"), (base / "tree.new", tree)):
            if os.path.lexists(src):
                src.rename(dst)
                moved.append((dst, src))
        record.rename(rec)
    except BaseException:
        for dst, src in reversed(moved):
            dst.rename(src)
        raise


def compiler_defines(record: RootRecord, cache: Path, wrappers: Path) -> dict[str, str]:
    """The CMake defines of a build in the root: its compilers (the wrapper scripts), find_*
    inside the root only, the root's label (build-info and the configure id)."""
    tree = root_dir(cache, record.name) / "tree"
    return {
        "CMAKE_C_COMPILER": str(wrappers / "cc"),
        "CMAKE_CXX_COMPILER": str(wrappers / "c++"),
        "CMAKE_FIND_ROOT_PATH": str(tree),
        "CMAKE_FIND_ROOT_PATH_MODE_PROGRAM": "NEVER",
        "CMAKE_FIND_ROOT_PATH_MODE_LIBRARY": "ONLY",
        "CMAKE_FIND_ROOT_PATH_MODE_INCLUDE": "ONLY",
        "CMAKE_FIND_ROOT_PATH_MODE_PACKAGE": "ONLY",
        "PATCHKIT_BUILD_ROOT": record.label,
    }


def make_mount_points(tree: Path, paths: Sequence[Path]) -> None:
    """The folders in ``tree`` where :func:`bwrap_argv` mounts ``paths`` (the root itself and
    the work folder, at their own paths): the unprivileged bwrap mounts the root read-only
    as ``/`` and so cannot make them (``Can't mkdir …: Read-only file system``). Made here,
    by patchkit, before any compiler runs; a link on the way is refused rather than
    followed out of the root."""
    for path in paths:
        here = tree
        for part in path.relative_to(path.anchor).parts:
            here = here / part
            if here.is_symlink():
                raise BuildError(problem=RootDamaged(tree=tree, found="mount-link", at=here, mount=path))
            here.mkdir(exist_ok=True)


def _sed_replacement(text: str) -> str:
    """``text`` as the replacement of a sed ``s|…|…|`` expression."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("&", "\\&")


def write_wrappers(
    record: RootRecord, cache: Path, wrappers: Path, binds: Sequence[Path], env: Mapping[str, str]
) -> None:
    """``cc`` and ``c++`` in ``wrappers``: run the root's gcc/g++ under bwrap with
    ``binds`` (the work folder) at their own paths and the caller's current directory.

    The compiler inside names the root's headers as ``/usr/...`` in the dependency file
    (``-MF``) it writes, which ninja, on the host, would find missing (or the host's own)
    and rebuild everything every time: the wrapper rewrites them to the root's folder on
    the host, where they are."""
    bwrap = _tool("bwrap", env, "the compilers run inside the build root")
    tree = root_dir(cache, record.name) / "tree"
    wrappers.mkdir(parents=True, exist_ok=True)
    make_mount_points(tree, [tree, *binds])
    sed = shlex.quote(f"s| /usr/| {_sed_replacement(str(tree))}/usr/|g")
    for name, prog in (("cc", "/usr/bin/gcc"), ("c++", "/usr/bin/g++")):
        argv = bwrap_argv(bwrap, tree, binds)
        inside = bwrap_argv(bwrap, tree, binds, nested=True)
        text = (
            "#!/bin/sh\n"
            f"# patchkit: {prog} of the build root {record.label} ({record.suite}, glibc {record.glibc})\n"
            "mf= prev=\n"
            'for a in "$@"; do\n'
            '  case "$prev" in -MF) mf=$a;; esac\n'
            '  case "$a" in -MF?*) mf=${a#-MF};; esac\n'
            "  prev=$a\n"
            "done\n"
            f'if [ -z "${{{IN_SANDBOX}:-}}" ]; then\n'
            f'  {shlex.join(argv)} --chdir "$PWD" {prog} "$@" || exit $?\n'
            "else  # in a rebuild's sandbox: its PID namespace and /proc\n"
            f'  {shlex.join(inside)} --chdir "$PWD" {prog} "$@" || exit $?\n'
            "fi\n"
            f'if [ -n "$mf" ] && [ -f "$mf" ]; then sed -i -e {sed} "$mf"; fi\n'
        )
        atomic_write_text(wrappers / name, text, mode=0o755)
