"""The smoke checks' verdicts and records (smoke.checks), without running a binary."""

from __future__ import annotations

from patchkit.model.buildinfo import CheckStatus
from patchkit.smoke import checks


def test_recorded_reasons_carry_no_random_ports() -> None:
    r = checks._result("meta-ot", 0.0, CheckStatus.SKIP, "buffer (RPC0[127.0.0.1:50341]) and 127.0.0.1:4242")
    assert r.why == "buffer (RPC0[127.0.0.1:<port>]) and 127.0.0.1:<port>"
