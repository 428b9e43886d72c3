"""What a smoke check runs in: one build output, its tools, a launcher (wine for a
Windows build on Linux), the environment its binaries need, a private work folder."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from patchkit.core.proc import RunResult, run
from patchkit.model.buildinfo import BuildInfo, read_build_info

__all__ = ["SmokeEnv"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SmokeEnv:
    out_dir: Path
    info: BuildInfo
    workdir: Path
    timeout: float
    launcher: tuple[str, ...] = ()  # e.g. the wine loader for Windows builds
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    tool_dirs: tuple[Path, ...] = ()  # where helper tools (test-llama-archs) may be
    reference: Path | None = None  # another build (e.g. Linux for a Windows one) to compare

    def reference_env(self) -> SmokeEnv | None:
        """The reference build, run natively (no launcher), sharing this workdir."""
        if self.reference is None:
            return None
        return dataclasses.replace(self, out_dir=self.reference,
                                   info=read_build_info(self.reference), launcher=(), env={},
                                   tool_dirs=(), reference=None)

    @property
    def windows(self) -> bool:
        return self.info.windows

    @property
    def patches(self) -> frozenset[str]:
        return self.info.in_build

    def exe(self, name: str) -> Path | None:
        suffix = ".exe" if self.windows else ""
        for d in (self.out_dir / "bin", *self.tool_dirs):
            p = d / f"{name}{suffix}"
            if p.is_file():
                return p
        return None

    def cmd(self, exe: Path, *args: str) -> list[str]:
        return [*self.launcher, str(exe), *args]

    def run(self, exe: Path, *args: str, timeout: float | None = None) -> RunResult:
        return run(self.cmd(exe, *args), timeout=timeout or self.timeout,
                   env={**os.environ, **self.env}, start_error="result")

    def executables(self) -> list[Path]:
        return [self.out_dir / a.path for a in self.info.artifacts if a.type == "EXECUTABLE"]
