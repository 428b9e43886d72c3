"""core.text: the did-you-mean suffix of one-line errors."""

from __future__ import annotations

import pytest

from patchkit.core.text import did_you_mean


@pytest.mark.parametrize(
    ("word", "choices", "want"),
    [
        ("biuld", ["build", "list", "check"], ' (did you mean "build"?)'),
        ("pascall", ("maxwell", "pascal", "ampere"), ' (did you mean "pascal"?)'),
        ("Subjekt", iter(["Name", "Subject", "Why"]), ' (did you mean "Subject"?)'),  # any iterable
        ("zzz", ["build", "list"], ""),
        ("build", [], ""),
    ],
)
def test_did_you_mean(word: str, choices: object, want: str) -> None:
    assert did_you_mean(word, choices) == want  # type: ignore[arg-type]


def test_only_the_closest_match_is_named() -> None:
    assert did_you_mean("cpu-rcp", ["cpu-rpc", "cuda-rpc", "cpu"]) == ' (did you mean "cpu-rpc"?)'
    assert did_you_mean("x", ["xx", "xy"]).count("did you mean") == 1


def test_diff_keys_names_every_differing_path() -> None:
    from patchkit.core.text import diff_keys

    a = {"x": 1, "y": {"z": [1, 2, {"w": "a"}]}, "gone": True}
    b = {"x": 1, "y": {"z": [1, 3, {"w": "b"}]}, "new": None}
    assert diff_keys(a, b) == ["gone", "y.z[1]", "y.z[2].w"]
    assert diff_keys([1], [1, 2], "l") == ["l"]
    assert diff_keys(1, 2) == ["(whole)"] and diff_keys({"a": 1}, {"a": 1}) == []
