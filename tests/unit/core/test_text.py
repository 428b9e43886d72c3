"""core.text: the did-you-mean suffix of one-line errors; printable (untrusted text on a terminal)."""

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


def test_printable_escapes_what_a_terminal_would_act_on() -> None:
    from patchkit.core.text import printable

    assert printable("plain é ü 日本 ok") == "plain é ü 日本 ok"  # text stays text
    assert printable("\x1b]0;pwned\x07") == "\\x1b]0;pwned\\x07"  # set the title
    assert printable("a\x1b[2Jb\r\nc\td") == "a\\x1b[2Jb\\x0d\\x0ac\\x09d"  # one line
    assert printable("\x9b31m \x7f") == "\\x9b31m \\x7f"  # C1 CSI, DEL
    assert printable("abc\u202edef\u200b") == "abc\\u202edef\\u200b"  # bidi override, zero width
    assert printable("\u2028\U000e0001") == "\\u2028\\U000e0001"
    assert printable("x" * 5 + "\x00") == "xxxxx\\x00"
