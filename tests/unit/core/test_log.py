"""The logger: steps timed with ✓/✕, CI fold groups on stderr (stdout stays for --json)."""

from __future__ import annotations

import pytest

from patchkit.core.log import Logger


def test_step_times_and_marks(capsys: pytest.CaptureFixture[str]) -> None:
    lg = Logger()
    took: dict[str, float] = {}
    with lg.step("configure", "configure", on_time=took.__setitem__):
        pass
    with pytest.raises(RuntimeError), lg.step("build all", "build", on_time=took.__setitem__):
        raise RuntimeError("boom")
    with lg.step("untimed"):
        pass
    out, err = capsys.readouterr()
    assert out == ""
    assert "✓ configure" in err and "✕ build all" in err and "✓ untimed" in err
    assert set(took) == {"configure", "build"}  # a failed step is timed too; the key names it
    assert all(isinstance(v, float) and v >= 0 for v in took.values())
    assert not hasattr(lg, "timings")  # the logger keeps no data


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
