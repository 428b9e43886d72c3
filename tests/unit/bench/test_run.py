"""bench.run against the in-process fake RPC server."""

from __future__ import annotations

from patchkit.bench.run import measure_latency


def test_latency_from_a_protocol_server() -> None:
    from tests.fixtures.rpc_server import FakeRpcServer

    with FakeRpcServer("patched", devices=1) as fake:
        (lat,) = measure_latency([f"127.0.0.1:{fake.port}"], count=5)
    assert lat.ok and lat.version == "5.0.0" and lat.devices == 1 and lat.count == 5
    assert 0 < lat.min_ms <= lat.median_ms <= lat.max_ms


def test_the_bench_engine_never_reads_os_environ() -> None:
    """README code map: the engine takes its environment from the CLI (run_demo's servers
    got ``dict(os.environ)`` read inside bench/run.py before)."""
    import ast
    import inspect
    from pathlib import Path

    import patchkit.bench
    from patchkit.bench.run import run_demo

    for path in sorted(Path(patchkit.bench.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb"):
                raise AssertionError(f"{path.name}:{node.lineno} reads the environment itself")
    assert "env" in inspect.signature(run_demo).parameters
