"""The ELF reader's version needs (``.gnu.version_r``) and the floor computed from them,
on crafted, truncated and hostile bytes."""

from __future__ import annotations

import io
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from patchkit.binary.elf import (
    MAX_VERSION_NEEDS,
    ElfDynamic,
    ElfFormatError,
    VersionNeed,
    above_floor,
    newest_versions,
    parse_dynamic,
    version_key,
)
from tests.fixtures.elf import make_elf

NEEDS = (
    ("libc.so.6", ("GLIBC_2.2.5", "GLIBC_2.34", "GLIBC_2.17", "GLIBC_PRIVATE")),
    ("libstdc++.so.6", ("GLIBCXX_3.4.9", "CXXABI_1.3.13", "GLIBCXX_3.4.30", "GLIBCXX_3.4.26")),
    ("libgcc_s.so.1", ("GCC_3.0", "GCC_4.2.0")),
    ("libssl.so.3", ("OPENSSL_3.0.0",)),
)


def parse(data: bytes) -> ElfDynamic | None:
    return parse_dynamic(io.BytesIO(data), len(data))


@pytest.mark.parametrize("is64", [True, False])
@pytest.mark.parametrize("little", [True, False])
def test_reads_every_library_and_version_in_order(is64: bool, little: bool) -> None:
    dyn = parse(make_elf(needed=("libc.so.6", "libstdc++.so.6"), verneed=NEEDS, is64=is64, little=little))
    assert dyn is not None
    assert dyn.version_needs == tuple(VersionNeed(library=lib, versions=v) for lib, v in NEEDS)
    assert dyn.needed == ("libc.so.6", "libstdc++.so.6")


def test_newest_per_family_by_number_not_by_text() -> None:
    dyn = parse(make_elf(verneed=NEEDS))
    assert dyn is not None
    # 2.34 > 2.17 > 2.2.5 (by number: "2.2.5" > "2.17" as text); OPENSSL_ and _PRIVATE ignored
    assert newest_versions(dyn.version_needs) == {
        "CXXABI": "1.3.13",
        "GCC": "4.2.0",
        "GLIBC": "2.34",
        "GLIBCXX": "3.4.30",
    }


def test_a_file_without_version_needs_has_none() -> None:
    dyn = parse(make_elf(needed=("libc.so.6",)))
    assert dyn is not None and dyn.version_needs == ()
    assert newest_versions(dyn.version_needs) == {}


def test_above_floor_names_each_family_over_it() -> None:
    newest = {"GLIBC": "2.34", "GLIBCXX": "3.4.26", "CXXABI": "1.3.13"}
    floor = {"GLIBC": "2.31", "GLIBCXX": "3.4.28", "CXXABI": "1.3.12"}
    assert above_floor(newest, floor) == [("GLIBC", "2.34", "2.31"), ("CXXABI", "1.3.13", "1.3.12")]
    assert above_floor(newest, {"GLIBC": "2.34"}) == []
    assert above_floor({}, floor) == []
    assert version_key("2.31") < version_key("2.31.1") < version_key("2.32")


def test_versions_that_are_not_numbers_count_as_zero() -> None:
    assert version_key("2.x") == (2, 0)
    assert newest_versions([VersionNeed(library="l", versions=("GLIBC_", "GLIBC_x", "GLIBC_2.3"))]) == {
        "GLIBC": "2.3"
    }


def _aux(name: int, nxt: int) -> bytes:
    return struct.pack("<IHHII", 0, 0, 2, name, nxt)


def test_a_library_chain_pointing_outside_the_file_is_refused() -> None:
    head = struct.pack("<HHIII", 1, 0, 1, 16, 2**32 - 16)
    with pytest.raises(ElfFormatError, match="outside the file"):
        parse(make_elf(verneed_raw=head, verneed_num=2))


def test_a_library_chain_that_repeats_stops_at_the_cap() -> None:
    # vn_next = 0 ends a chain; a count over what the bytes hold stops at their end, and
    # a chain as long as the cap allows is read, never more
    heads = b"".join(struct.pack("<HHIII", 1, 0, 1, 16, 16) for _ in range(MAX_VERSION_NEEDS + 5))
    dyn = parse(make_elf(verneed_raw=heads, verneed_num=MAX_VERSION_NEEDS))
    assert dyn is not None and len(dyn.version_needs) == MAX_VERSION_NEEDS


def test_a_version_chain_that_loops_on_itself_stops_at_the_cap() -> None:
    # a library claiming 65535 versions, each entry pointing at the next: the cap ends it
    aux = b"".join(_aux(1, 16) for _ in range(MAX_VERSION_NEEDS + 2))
    head = struct.pack("<HHIII", 1, 0xFFFF, 1, 16, 0)
    with pytest.raises(ElfFormatError, match=f"more than {MAX_VERSION_NEEDS}"):
        parse(make_elf(verneed_raw=head + aux, verneed_num=1))


def test_a_count_over_the_cap_is_refused() -> None:
    data = make_elf(verneed=NEEDS, verneed_num=MAX_VERSION_NEEDS + 1)
    with pytest.raises(ElfFormatError, match="DT_VERNEEDNUM"):
        parse(data)


def test_a_count_larger_than_the_chain_stops_at_its_end() -> None:
    dyn = parse(make_elf(verneed=NEEDS[:1], verneed_num=5))
    assert dyn is not None and [n.library for n in dyn.version_needs] == ["libc.so.6"]


def test_an_unknown_revision_is_refused() -> None:
    head = struct.pack("<HHIII", 2, 0, 1, 16, 0)
    with pytest.raises(ElfFormatError, match="revision 2"):
        parse(make_elf(verneed_raw=head, verneed_num=1))


def test_a_name_past_the_string_table_is_refused() -> None:
    head = struct.pack("<HHIII", 1, 1, 1, 16, 0) + _aux(1 << 20, 0)
    with pytest.raises(ElfFormatError, match="past the string table"):
        parse(make_elf(verneed_raw=head, verneed_num=1))


def test_a_truncated_chain_is_refused() -> None:
    data = make_elf(verneed=NEEDS)
    with pytest.raises(ElfFormatError):
        parse(data[:-8])


def test_a_verneed_address_outside_every_segment_is_refused() -> None:
    data = make_elf(needed=(), extra_dyn=((0x6FFFFFFE, 0x10), (0x6FFFFFFF, 1)))
    with pytest.raises(ElfFormatError, match="DT_VERNEED address"):
        parse(data)


def test_two_verneed_entries_are_refused() -> None:
    data = make_elf(verneed=NEEDS, extra_dyn=((0x6FFFFFFF, 1),))
    with pytest.raises(ElfFormatError, match="two VERNEEDNUM"):
        parse(data)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=400), st.integers(min_value=0, max_value=MAX_VERSION_NEEDS))
def test_random_version_bytes_never_crash(raw: bytes, count: int) -> None:
    data = make_elf(verneed_raw=raw, verneed_num=count)
    try:
        dyn = parse(data)
    except ElfFormatError:
        return
    assert dyn is not None
    assert len(dyn.version_needs) <= max(count, 0)
