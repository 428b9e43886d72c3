"""What a smoke check runs in: one build output, its tools, a launcher (wine for a
Windows build on Linux, qemu for another CPU model), the environment its binaries need, a
private work folder."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from patchkit.core.errors import ServerStartError
from patchkit.core.net import LOOPBACK, free_port
from patchkit.core.proc import Processes, RunResult, run
from patchkit.smoke.emulate import Emulation
from patchkit.spec.buildinfo import BuildInfo, read_build_info

__all__ = ["SmokeEnv"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SmokeEnv:
    out_dir: Path
    info: BuildInfo
    workdir: Path
    timeout: float
    base_env: Mapping[str, str]  # the caller's environment (a snapshot): what every run starts from
    launcher: tuple[str, ...] = ()  # e.g. the wine loader for Windows builds, qemu -cpu MODEL
    emulation: Emulation | None = None  # the binaries run as another CPU model (--cpu)
    gpu: bool = False  # a CUDA build on a machine with NVIDIA's driver: its GPU setups run
    env: dict[str, str] = dataclasses.field(default_factory=dict)  # this build's, over base_env
    tool_dirs: tuple[Path, ...] = ()  # where helper tools (llama-perplexity) may be
    reference: Path | None = None  # another build (e.g. Linux for a Windows one) to compare
    model: Path | None = None  # a real GGUF model for the kld and speed checks
    model_label: str = ""  # "<file> sha256=<hex>", recorded with their results
    model_why: str = ""  # why there is none (what to run to get one)

    def reference_env(self) -> SmokeEnv | None:
        """The reference build, run natively (no launcher, no emulation), sharing this workdir."""
        if self.reference is None:
            return None
        info = read_build_info(self.reference)
        # its smoke-only tools (llama-perplexity) stay in its build dir
        tools = (Path(info.build_dir) / "bin",) if info.build_dir else ()
        return dataclasses.replace(
            self,
            out_dir=self.reference,
            info=info,
            launcher=(),
            emulation=None,
            gpu=False,
            env={},
            tool_dirs=tools,
            reference=None,
        )

    @property
    def run_env(self) -> dict[str, str]:
        """The environment this build's binaries run with."""
        return {**self.base_env, **self.env}

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
        return run(
            self.cmd(exe, *args),
            timeout=timeout or self.timeout,
            env=self.run_env,
            start_error="result",
        )

    def rpc_server(self, procs: Processes, name: str = "rpc") -> str:
        """Start this build's ggml-rpc-server (CPU, 127.0.0.1, a free port); its address."""
        server = self.exe("ggml-rpc-server")
        if server is None:
            raise ServerStartError("cannot start ggml-rpc-server: it is not in this build")
        port = free_port()
        procs.start_server(
            self.cmd(server, "-d", "CPU", "-H", LOOPBACK, "-p", str(port)),
            port,
            name=name,
            timeout=min(self.timeout, 60 if self.launcher else 20),
            env=self.run_env,
        )
        return f"{LOOPBACK}:{port}"

    def executables(self) -> list[Path]:
        return [self.out_dir / a.path for a in self.info.artifacts if a.type == "EXECUTABLE"]
