"""bench.run against the in-process fake RPC server."""

from __future__ import annotations

from patchkit.bench.run import measure_latency


def test_latency_from_a_protocol_server() -> None:
    from tests.fixtures.rpc_server import FakeRpcServer

    with FakeRpcServer("patched", devices=1) as fake:
        (lat,) = measure_latency([f"127.0.0.1:{fake.port}"], count=5)
    assert lat.ok and lat.version == "5.0.0" and lat.devices == 1 and lat.count == 5
    assert 0 < lat.min_ms <= lat.median_ms <= lat.max_ms


def test_the_demo_takes_its_servers_environment_from_the_caller() -> None:
    """README code map: the engine takes its environment from the CLI (run_demo's servers
    got ``dict(os.environ)`` read inside bench/run.py before; ruff's TID251 now refuses an
    ``os.environ`` read in every package below the CLI: tests/integration/test_lint_gates.py)."""
    import inspect

    from patchkit.bench.run import run_demo

    assert "env" in inspect.signature(run_demo).parameters
