"""Sizes in recipes and on the command line (core.units)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from patchkit.core.errors import PEError
from patchkit.core.units import PAGE_SIZE, format_size, parse_size
from tests.fixtures.pe import (
    MIB,
)

# ---------------------------------------------------------------- sizes


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("268435456", 268435456),
        ("0x10000000", 268435456),
        ("0X1000", 4096),
        ("256MiB", 256 * MIB),
        ("256 MiB", 256 * MIB),
        ("256mib", 256 * MIB),
        ("4KiB", 4096),
        ("1GiB", 1 << 30),
        ("4096B", 4096),
        (" 8 MiB ", 8 * MIB),
        (4096, 4096),
    ],
)
def test_parse_size_accepts(text: str | int, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("256MB", "ambiguous"),
        ("256M", "ambiguous"),
        ("1GB", "write 1GiB"),
        ("4kb", "ambiguous"),
        ("256 parsecs", "unknown unit"),
        ("", "not a size"),
        ("1.5GiB", "not a size"),
        ("-4096", "not a size"),
        ("MiB", "not a size"),
        ("0xZZ", "unknown unit"),
    ],
)
def test_parse_size_refuses(text: str, needle: str) -> None:
    with pytest.raises(PEError, match=needle):
        parse_size(text)


def test_parse_size_refuses_bool_and_negative() -> None:
    with pytest.raises(PEError):
        parse_size(True)  # type: ignore[arg-type]
    with pytest.raises(PEError, match="negative"):
        parse_size(-1)


def test_format_size() -> None:
    assert format_size(256 * MIB) == "256 MiB"
    assert format_size(PAGE_SIZE) == "4 KiB"
    assert format_size(1 << 30) == "1 GiB"
    assert format_size(3 * 512) == "1536 B"


@given(st.integers(min_value=0, max_value=1 << 50))
def test_format_size_parses_back(n: int) -> None:
    text = format_size(n)
    assert parse_size(text) == n
    assert text.endswith((" B", " KiB", " MiB", " GiB", " TiB"))


def test_tib_and_hex_and_the_refusals_name_the_input() -> None:
    assert parse_size("2TiB") == 2 << 40 and parse_size("0xFFFFF000") == 0xFFFFF000
    with pytest.raises(PEError) as e:
        parse_size("16 MB")
    assert e.value.message == "size '16 MB' is ambiguous (decimal or binary?): write 16MiB"
    assert e.value.exit_code == 10
