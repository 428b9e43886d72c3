"""The layers of a release image (:mod:`patchkit.release.image` assembles them): the files
each one holds, found and staged, before :mod:`patchkit.release.oci` writes them.

- the **system** layer: the system libraries a release imports and what they import in
  turn, the dynamic loader, found in a root's library folders the way glibc's loader
  searches them (no ld.so.cache, links followed only inside that root), and the user
  ``llama``'s ``/etc/passwd`` / ``/etc/group`` lines, ``/tmp`` and its home;
- the **CUDA runtime** layer: the runtime archive's ``bin/`` under ``/opt/llama``, with
  that archive's own mtime;
- the **release** layer: the archive's ``bin/``, ``LICENSE`` and ``manifest.json`` under
  ``/opt/llama``;

and a released ``.tar.gz`` spooled into a staging folder as the members of those layers
(capped reads, plain files with safe names only).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from patchkit.binary.elf import ElfFormatError, read_dynamic
from patchkit.core.errors import ReleaseError
from patchkit.core.tarcap import NOT_A_TAR_GZ, TarRefused, capped_members, open_tar_gz
from patchkit.release.archive import Member, unsafe_member_name
from patchkit.release.imports import LINUX_DRIVER
from patchkit.release.oci import Dir, LayerSpec

__all__ = [
    "ARCHES",
    "HOME",
    "MAX_SYSTEM_BYTES",
    "MAX_SYSTEM_LIBS",
    "PREFIX",
    "RELEASE_LAYER",
    "RUNTIME_LAYER",
    "SYSTEM_LAYER",
    "USER",
    "release_layer",
    "resolve_within",
    "runtime_imports",
    "runtime_layer",
    "stage_archive",
    "system_files",
    "system_layer",
    "system_path_ok",
]

PREFIX = "opt/llama"
USER = (10001, 10001)
USER_NAME = "llama"
HOME = "home/llama"
MAX_SYSTEM_LIBS = 64
MAX_SYSTEM_BYTES = 256 << 20
SYSTEM_LAYER = "system libraries and the user llama"
RUNTIME_LAYER = "NVIDIA CUDA runtime"
RELEASE_LAYER = "release {name}"
_LIB = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
# where glibc's loader looks without an ld.so.cache, per architecture (multiarch first),
# and the loader's own path (PT_INTERP)
_LIB_DIRS = {
    "x86_64": ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib64", "usr/lib64", "lib", "usr/lib"),
    "aarch64": ("lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu", "lib64", "usr/lib64", "lib", "usr/lib"),
}
ARCHES = tuple(_LIB_DIRS)
_INTERP = {"x86_64": "lib64/ld-linux-x86-64.so.2", "aarch64": "lib/ld-linux-aarch64.so.1"}
_PASSWD = f"root:x:0:0:root:/root:/sbin/nologin\n{USER_NAME}:x:{USER[0]}:{USER[1]}::/{HOME}:/sbin/nologin\n"
_GROUP = f"root:x:0:\n{USER_NAME}:x:{USER[1]}:\n"
_ETC = ("etc/group", "etc/passwd")


_MAX_LINKS = 40  # what the kernel follows (ELOOP)


def resolve_within(root: Path, rel: str) -> Path | None:
    """``rel`` inside ``root`` with every link followed as it would be with ``root`` as
    ``/`` (a build root's ``/lib64/ld-linux-x86-64.so.2 -> /lib/x86_64-linux-gnu/...`` is
    the root's file, never this machine's); None when it is not there, loops, or leaves
    ``root``. ``root`` must already be resolved."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    done: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        here = root.joinpath(*done, part)
        if not os.path.lexists(here):
            return None
        if os.path.islink(here):
            hops += 1
            if hops > _MAX_LINKS:
                return None
            target = os.readlink(here)
            if target.startswith("/"):
                done = []
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
            continue
        done.append(part)
    real = root.joinpath(*done)
    return real if real.resolve().is_relative_to(root) else None


def system_files(needed: Iterable[str], *, root: Path, arch: str) -> list[tuple[str, Path]]:
    """(path in the image, file) of each system library ``needed`` names, what those
    import in turn, and the dynamic loader, found in ``root``'s library folders the way
    glibc's loader searches them (no ld.so.cache). A link is followed only within
    ``root``. ReleaseError naming the first library not found."""
    dirs = _LIB_DIRS[arch]
    interp = _INTERP[arch]
    loader = interp.rsplit("/", 1)[1]
    base = root.resolve()
    found: dict[str, tuple[str, Path]] = {}
    todo = sorted(set(needed) | {loader})
    total = 0
    while todo:
        name = todo.pop(0)
        if name in found:
            continue
        if not _LIB.match(name):
            raise ReleaseError(f"the release imports {name[:80]!r}, which is not a library name")
        if len(found) >= MAX_SYSTEM_LIBS:
            raise ReleaseError(f"more than {MAX_SYSTEM_LIBS} system libraries for the image")
        hit: tuple[str, Path] | None = None
        for d in dirs:
            real = resolve_within(base, f"{d}/{name}")
            if real is None or not real.is_file():
                continue
            hit = (interp if name == loader else f"{d}/{name}", real)
            break
        if hit is None:
            raise ReleaseError(
                f"{name}: not found in {root} ({', '.join('/' + d for d in dirs[:2])}, ...): "
                "the image's system layer needs it",
                hint="release on a machine (or with a build root) that has it",
            )
        found[name] = hit
        total += hit[1].stat().st_size
        if total > MAX_SYSTEM_BYTES:
            raise ReleaseError(f"the system libraries take more than {MAX_SYSTEM_BYTES >> 20} MiB")
        try:
            dyn = read_dynamic(hit[1], follow_symlinks=True)
        except (ElfFormatError, OSError) as e:
            raise ReleaseError(f"{hit[1]}: cannot read its ELF dynamic section ({e})") from None
        if dyn is not None:
            todo += [n for n in dyn.needed if n not in found]
    return sorted(found.values())


def system_layer(needed: Sequence[str], *, root: Path, arch: str, mtime: int) -> LayerSpec:
    libs = system_files(needed, root=root, arch=arch)
    files = [Member(name=rel, mode=0o755, source=src) for rel, src in libs]
    files += [
        Member(name="etc/group", mode=0o644, data=_GROUP.encode()),
        Member(name="etc/passwd", mode=0o644, data=_PASSWD.encode()),
    ]
    return LayerSpec(
        name=SYSTEM_LAYER,
        files=tuple(files),
        dirs=(
            Dir(path="tmp", mode=0o1777),
            Dir(path="home", mode=0o755),
            Dir(path=HOME, mode=0o755, uid=USER[0], gid=USER[1]),
        ),
        mtime=mtime,
    )


def runtime_imports(runtime: Sequence[Member], provided: Iterable[str]) -> list[str]:
    """The system libraries the CUDA runtime archive's libraries import (NVIDIA's cuBLAS
    needs ``librt.so.1``, ``libdl.so.2``, ...), which the release's own import record does
    not name: every ``DT_NEEDED`` of its ELF members that neither the runtime nor the
    release (``provided``) holds, and not the driver's (mounted in by NVIDIA's toolkit)."""
    have = set(provided) | {m.name.rsplit("/", 1)[-1] for m in runtime}
    needed: set[str] = set()
    for m in runtime:
        if m.source is None:
            continue
        try:
            dyn = read_dynamic(m.source)
        except (ElfFormatError, OSError) as e:
            raise ReleaseError(f"{m.name}: cannot read its ELF dynamic section ({e})") from None
        if dyn is not None:
            needed |= {n for n in dyn.needed if n not in have and n not in LINUX_DRIVER}
    return sorted(needed)


def runtime_layer(runtime: Sequence[Member], *, mtime: int) -> LayerSpec:
    """The CUDA runtime archive's ``bin/`` members under ``/opt/llama``, with its mtime."""
    return LayerSpec(
        name=RUNTIME_LAYER,
        files=tuple(
            Member(name=f"{PREFIX}/{m.name}", mode=m.mode, data=m.data, source=m.source) for m in runtime
        ),
        mtime=mtime,
    )


def release_layer(name: str, files: Sequence[Member], *, mtime: int) -> LayerSpec:
    """The release's own files (already named under ``/opt/llama``)."""
    return LayerSpec(name=RELEASE_LAYER.format(name=name), files=tuple(files), mtime=mtime)


# -- from a released archive --------------------------------------------------------------------

_STAGE_MAX = 32 << 30  # what an archive may unpack to for its image (a CUDA runtime is ~1.5 GB)


def stage_archive(archive: Path, stem: str, stage: Path) -> tuple[list[Member], bytes]:
    """The regular members of a release's ``.tar.gz`` (below its top folder ``stem``)
    spooled into ``stage``, as Members (names relative to the top folder), and its
    manifest.json's bytes. Capped reads (core.tarcap); a member that is not a plain file
    with a safe name below ``stem/`` is refused."""
    if not archive.name.endswith(".tar.gz"):
        raise ReleaseError(f"{archive.name}: a container image is made from a .tar.gz release")
    members: list[Member] = []
    manifest = b""
    total = 0
    try:
        with open_tar_gz(archive, seconds=None) as tar:
            for info in capped_members(tar, skipped=_STAGE_MAX):
                name = info.name
                why = unsafe_member_name(name) or (
                    "" if name.startswith(f"{stem}/") else f"not below {stem}/"
                )
                if why or not info.isreg():
                    raise ReleaseError(f"{archive.name}: {name[:200]!r}: {why or 'not a regular file'}")
                rel = name[len(stem) + 1 :]
                dest = stage / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(info)
                assert src is not None
                with dest.open("wb") as f:
                    for chunk in iter(functools.partial(src.read, 1 << 16), b""):
                        total += len(chunk)
                        if total > _STAGE_MAX:
                            raise ReleaseError(f"{archive.name}: unpacks past {_STAGE_MAX >> 30} GiB")
                        f.write(chunk)
                if rel == "manifest.json":
                    manifest = dest.read_bytes()
                else:
                    members.append(Member(name=rel, mode=0o755 if info.mode & 0o111 else 0o644, source=dest))
    except TarRefused as e:
        raise ReleaseError(f"{archive.name}: refused: {e}") from None
    except NOT_A_TAR_GZ as e:
        raise ReleaseError(f"{archive.name}: not a readable tar.gz ({str(e)[:200]})") from None
    if not manifest:
        raise ReleaseError(f"{archive.name}: has no {stem}/manifest.json")
    return members, manifest


def system_path_ok(rel: str) -> bool:
    """Whether ``rel`` may be in an image outside ``/opt/llama``: a library in a library
    folder, or the user's ``/etc`` lines."""
    if rel in _ETC:
        return True
    top = rel.split("/", 1)[0]
    if top in ("lib", "lib64") or rel.startswith(("usr/lib/", "usr/lib64/")):
        return "/" in rel and _LIB.match(rel.rsplit("/", 1)[1]) is not None
    return False
