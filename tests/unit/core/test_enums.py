"""core.enums.StrEnum: members are their string values in str(), f-strings, format specs
and JSON, on every supported Python."""

from __future__ import annotations

import json

import pytest

from patchkit.core.enums import StrEnum


class Color(StrEnum):
    RED = "red"
    DARK_BLUE = "dark-blue"


def test_str_and_fstrings_give_the_value() -> None:
    assert str(Color.RED) == "red"
    assert f"{Color.DARK_BLUE}" == "dark-blue"
    assert f"[{Color.RED:>5}]" == "[  red]" and f"{Color.RED:.1}" == "r"
    assert "%s" % Color.RED == "red"  # noqa: UP031 (the old formatting goes through __str__)
    assert format(Color.RED) == "red"
    assert "Color" not in f"{Color.RED}"  # 3.11's (str, Enum) would say Color.RED


def test_members_are_strings() -> None:
    assert isinstance(Color.RED, str)
    assert Color.RED == "red" and Color.RED.value == "red"
    assert Color("dark-blue") is Color.DARK_BLUE
    assert {Color.RED: 1}["red"] == 1  # hashes like its value
    assert sorted([Color.RED, Color.DARK_BLUE]) == ["dark-blue", "red"]
    with pytest.raises(ValueError):
        Color("green")


def test_json_writes_the_value() -> None:
    assert (
        json.dumps({"status": Color.RED, "all": list(Color)})
        == '{"status": "red", "all": ["red", "dark-blue"]}'
    )
    assert json.loads(json.dumps(Color.DARK_BLUE)) == "dark-blue"


def test_the_package_enums_are_str_enums() -> None:
    from patchkit.spec.buildinfo import ApplyResult, CheckStatus, SmokeStatus

    for cls in (ApplyResult, CheckStatus, SmokeStatus):
        assert issubclass(cls, StrEnum)
        for member in cls:
            assert f"{member}" == member.value == json.loads(json.dumps(member))
