"""`patchkit bench --rpc`: every RPC host is checked against the build's protocol before the
sweep; a server its clients refuse stops it with what to rebuild (nothing run, nothing
written). The check comes before llama-bench is ever started: no process here."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixtures.buildinfo import build_info_json
from tests.fixtures.project import invoke
from tests.fixtures.rpc_server import FakeRpcServer


def _build(tmp_path: Path, proto: str) -> tuple[Path, Path]:
    out = tmp_path / "build"
    (out / "bin").mkdir(parents=True)
    (out / "bin" / "llama-bench").write_text("not run\n")
    (out / "build-info.json").write_text(json.dumps(build_info_json(rpc_protocol=proto)))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    return out, model


def test_bench_stops_on_a_server_its_clients_refuse(tmp_path: Path) -> None:
    build, model = _build(tmp_path, "5.0.0")
    with FakeRpcServer(version=(5, 0, 0)) as ok, FakeRpcServer(version=(5, 1, 0)) as new:
        rpc = f"127.0.0.1:{ok.port},127.0.0.1:{new.port}"
        res = invoke(
            tmp_path, "bench", str(tmp_path / "res"), "-m", str(model), "--build", str(build), "--rpc", rpc
        )
    assert res.exit_code == 14, res.output
    err = [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")]
    assert len(err) == 1
    assert f"cannot talk to 127.0.0.1:{new.port} (RPC 5.1.0)" in err[0]
    assert "rebuild cpu-rpc at an upstream commit with RPC 5.1 or later" in err[0]
    assert not (tmp_path / "res").exists()
