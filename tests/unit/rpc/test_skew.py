"""Version skew: a build's RPC clients against fake servers of several protocol versions
(upstream's rule), build-info's ``rpc_protocol`` (old files without it still read), and
`patchkit rpc-probe --build`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkit.core.errors import ConfigError, RpcError
from patchkit.rpc.skew import RpcSkewed, check_hosts, check_server
from patchkit.spec.buildinfo import BuildInfo
from patchkit.spec.rpcproto import ProtoVersion
from tests.fixtures.buildinfo import COMMIT, build_info_json
from tests.fixtures.project import invoke
from tests.fixtures.rpc_server import FakeRpcServer


def info(proto: str | None) -> BuildInfo:
    extra = {"rpc_protocol": proto} if proto is not None else {}
    return BuildInfo.from_json(build_info_json(**extra))


def test_build_info_rpc_protocol_is_typed_and_optional() -> None:
    assert info("5.1.0").rpc_protocol == ProtoVersion(major=5, minor=1, patch=0)
    assert info(None).rpc_protocol is None  # files written before the field existed
    assert "rpc_protocol" not in info(None).to_json()  # and they are written as they were
    assert info("5.0.0").to_json()["rpc_protocol"] == "5.0.0"
    with pytest.raises(ConfigError, match="rpc_protocol is missing or not the expected type"):
        BuildInfo.from_json(build_info_json(rpc_protocol="five"))
    with pytest.raises(ConfigError, match="rpc_protocol"):
        BuildInfo.from_json(build_info_json(rpc_protocol=5))


@pytest.mark.parametrize(
    ("client", "server", "ok", "rebuild"),
    [
        ("5.1.0", (5, 1, 0), True, ""),
        ("5.1.0", (5, 0, 0), True, ""),  # a newer client uses an older minor
        ("5.0.0", (5, 1, 0), False, "client"),  # the build, at a commit with the server's protocol
        ("5.1.0", (6, 0, 0), False, "client"),
        ("5.1.0", (4, 0, 3), False, "server"),  # the server, from the build's upstream
        ("6.0.0", (5, 1, 0), False, "server"),
    ],
)
def test_skew_verdicts_against_fake_servers(
    client: str, server: tuple[int, int, int], ok: bool, rebuild: str
) -> None:
    with FakeRpcServer(version=server) as srv:
        report = check_server("127.0.0.1", srv.port, info(client), "out/cpu-rpc", timeout=2)
    assert report.ok is ok
    assert (report.rebuild, report.commit, report.recipe) == (rebuild, COMMIT, "cpu-rpc")
    assert (report.client_version, report.server_version) == (client, ".".join(map(str, server)))
    assert report.message == ""  # the CLI words it (golden: tests/unit/cli/test_rpc_probe.py)
    data = report.to_json()
    assert (data["rebuild"], data["ok"], data["message"]) == (rebuild, ok, "")


def test_check_hosts_stops_at_the_first_refusing_server() -> None:
    with FakeRpcServer(version=(5, 1, 0)) as good, FakeRpcServer(version=(5, 2, 0)) as bad:
        eps = [f"127.0.0.1:{good.port}", f"127.0.0.1:{bad.port}"]
        assert [r.ok for r in check_hosts(info("5.2.0"), "b", eps, timeout=2)] == [True, True]
        with pytest.raises(RpcError) as ei:
            check_hosts(info("5.1.0"), "b", eps, timeout=2)
        assert ei.value.exit_code == 14
        refused = ei.value.problem
        assert isinstance(refused, RpcSkewed) and refused.report.rebuild == "client"
        assert refused.report.endpoint == f"127.0.0.1:{bad.port}"
        assert f"127.0.0.1:{bad.port} (RPC 5.2.0)" in ei.value.message  # the facts, uncaught
        # a build from before patchkit recorded the protocol: not checked, not stopped
        assert check_hosts(info(None), "b", eps, timeout=2) == ()


def _outdir(tmp_path: Path, proto: str | None) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    extra = {"rpc_protocol": proto} if proto is not None else {}
    (out / "build-info.json").write_text(json.dumps(build_info_json(**extra)))
    return out


def test_rpc_probe_build_says_what_to_rebuild(tmp_path: Path) -> None:
    out = _outdir(tmp_path, "5.0.0")
    with FakeRpcServer(version=(5, 1, 0)) as srv:
        res = invoke(tmp_path, "rpc-probe", f"127.0.0.1:{srv.port}", "--build", str(out))
    assert res.exit_code == 14, res.output
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1
    assert "RPC 5.0.0) cannot talk to 127.0.0.1:" in errors[0]
    assert "(RPC 5.1.0)" in errors[0] and "patchkit bump" in errors[0]


def test_rpc_probe_build_ok_then_shows_the_server(tmp_path: Path) -> None:
    out = _outdir(tmp_path, "5.1.0")
    with FakeRpcServer(version=(5, 0, 0)) as srv:
        res = invoke(tmp_path, "rpc-probe", f"127.0.0.1:{srv.port}", "--build", str(out), "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["skew"]["ok"] is True and data["skew"]["server"] == "5.0.0"
    assert data["server"]["version"] == "5.0.0"


def test_rpc_probe_build_without_a_recorded_protocol(tmp_path: Path) -> None:
    out = _outdir(tmp_path, None)
    with FakeRpcServer(version=(5, 1, 0)) as srv:
        res = invoke(tmp_path, "rpc-probe", f"127.0.0.1:{srv.port}", "--build", str(out))
    assert res.exit_code == 2
    assert "records no RPC protocol" in res.stderr and "patchkit build cpu-rpc" in res.stderr
