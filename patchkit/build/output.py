"""The output dir: the built executables, the shared libraries they need, LICENSE
and build-info.json. Written to a temp dir and swapped in, so an interrupted
run never leaves a half-written output."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from patchkit.build.cmake import Artifact
from patchkit.core.errors import BuildError, ConfigError
from patchkit.core.fs import sha256_file
from patchkit.model.buildinfo import BUILD_INFO, ArtifactRecord, BuildInfo, PeEditRecord, write_build_info

__all__ = ["write_output"]


def _check_replaceable(out_dir: Path) -> None:
    if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / BUILD_INFO).is_file():
        raise ConfigError(f"{out_dir} exists and is not a patchkit output dir (no {BUILD_INFO})",
                          hint="pick another --out, or empty that folder")


def write_output(out_dir: Path, artifacts: list[Artifact], license_file: Path | None,
                 info: BuildInfo,
                 post: Callable[[Path], tuple[PeEditRecord, ...]] | None = None) -> BuildInfo:
    """Copy artifacts into ``out_dir/bin`` and write build-info.json; returns what it wrote.

    ``post(bin_dir)`` runs on the copies before they are hashed (PE header edits); the
    edits it returns are recorded.
    """
    _check_replaceable(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    entries: list[ArtifactRecord] = []
    try:
        (tmp / "bin").mkdir(parents=True)
        copied: list[tuple[Artifact, Path]] = []
        for a in artifacts:
            real = a.path.resolve()
            dest = tmp / "bin" / real.name
            if not dest.exists():
                shutil.copy2(real, dest)
                copied.append((a, dest))
        if post is not None:
            info = dataclasses.replace(info, pe_edits=post(tmp / "bin"))
        for a, dest in copied:
            entries.append(ArtifactRecord(target=a.target, type=a.type, path=f"bin/{dest.name}",
                                          sha256=sha256_file(dest), size=dest.stat().st_size))
        if license_file is not None and license_file.is_file():
            shutil.copy2(license_file, tmp / "LICENSE")
        entries.sort(key=lambda e: e.path)
        info = dataclasses.replace(info, artifacts=tuple(entries))
        write_build_info(tmp, info)
        _swap_in(tmp, out_dir, old)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return info


def _swap_in(tmp: Path, out_dir: Path, old: Path) -> None:
    """Put ``tmp`` in place of ``out_dir``; on failure the previous output stays."""
    try:
        if out_dir.exists():
            os.replace(out_dir, old)
        try:
            os.replace(tmp, out_dir)
        except OSError:
            if old.exists():
                os.replace(old, out_dir)  # put the previous output back
            raise
    except OSError as e:
        raise BuildError(f"cannot replace {out_dir}: {e.strerror or e}",
                         hint="is a program running from it, or a file in it open? "
                              "Stop it and build again (or pass another --out)") from None
    with contextlib.suppress(OSError):
        shutil.rmtree(old)

