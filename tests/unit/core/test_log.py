"""The logger: steps timed with ✓/✕, CI fold groups on stderr (stdout stays for --json)."""

from __future__ import annotations

import pytest

from patchkit.core.log import Logger


def test_step_times_and_marks(capsys: pytest.CaptureFixture[str]) -> None:
    lg = Logger()
    with lg.step("configure", "configure"):
        pass
    with pytest.raises(RuntimeError), lg.step("build", "build"):
        raise RuntimeError("boom")
    out, err = capsys.readouterr()
    assert out == ""
    assert "✓ configure" in err and "✕ build" in err
    assert set(lg.timings) == {"configure", "build"}


def test_github_fold_groups_go_to_stderr(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    lg = Logger()
    with lg.step("source"):
        print('{"json": true}')  # what a --json command writes to stdout
    out, err = capsys.readouterr()
    assert out == '{"json": true}\n'
    assert "::group::source" in err and "::endgroup::" in err
