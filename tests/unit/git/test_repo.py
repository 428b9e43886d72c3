"""Parsing OLD..NEW ranges (git.repo)."""

from __future__ import annotations

import pytest

from patchkit.core.errors import ConfigError
from patchkit.git.repo import parse_range


@pytest.mark.parametrize("bad", ["abc", "..b", "a..", "a...b", ""])
def test_parse_range_rejects_malformed(bad: str) -> None:
    with pytest.raises(ConfigError, match="OLD..NEW"):
        parse_range(bad)


def test_parse_range_ok() -> None:
    assert parse_range(" v1..origin/master ") == ("v1", "origin/master")
