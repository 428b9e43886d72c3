"""The ELF dynamic-section reader on crafted, truncated and hostile bytes."""

from __future__ import annotations

import io
import os
import struct
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from patchkit.binary.elf import (
    MAX_DYNAMIC_ENTRIES,
    MAX_STRING,
    ElfDynamic,
    ElfFormatError,
    parse_dynamic,
    read_dynamic,
    rpath_problems,
)
from tests.fixtures.elf import make_elf


def parse(data: bytes) -> ElfDynamic | None:
    return parse_dynamic(io.BytesIO(data), len(data))


@pytest.mark.parametrize("is64", [True, False])
@pytest.mark.parametrize("little", [True, False])
def test_reads_needed_runpath_rpath_soname(is64: bool, little: bool) -> None:
    data = make_elf(
        needed=("libggml.so", "libc.so.6"),
        runpath="$ORIGIN:",
        rpath="/opt/x",
        soname="libllama.so",
        is64=is64,
        little=little,
        machine=183,
    )
    dyn = parse(data)
    assert dyn == ElfDynamic(
        elf_class=64 if is64 else 32,
        machine="aarch64",
        dynamic=True,
        needed=("libggml.so", "libc.so.6"),
        runpath=("$ORIGIN", ""),
        rpath=("/opt/x",),
        soname="libllama.so",
    )


def test_no_paths_is_empty() -> None:
    dyn = parse(make_elf())
    assert dyn is not None and dyn.runpath == () and dyn.rpath == () and dyn.soname is None
    assert dyn.needed == ("libc.so.6",) and dyn.machine == "x86_64"


def test_static_binary_has_no_dynamic() -> None:
    dyn = parse(make_elf(with_dynamic=False))
    assert dyn is not None and dyn.dynamic is False and dyn.needed == ()


def test_unknown_machine_is_named_by_number() -> None:
    dyn = parse(make_elf(machine=999))
    assert dyn is not None and dyn.machine == "machine-999"


@pytest.mark.parametrize(
    "data", [b"", b"MZ\x90\x00" + bytes(200), b"#!/bin/sh\necho hi\n" * 4, b"\x7fEL", b"\x7fEL" + bytes(100)]
)
def test_not_elf_is_none(data: bytes) -> None:
    assert parse(data) is None


def test_every_truncation_is_an_error_or_none_never_a_crash() -> None:
    data = make_elf(needed=("a.so", "b.so"), runpath="$ORIGIN", soname="x.so")
    for cut in range(len(data)):
        try:
            dyn = parse(data[:cut])
        except ElfFormatError as e:
            assert str(e).startswith("malformed ELF: ")
        else:
            # only the magic-less prefix may pass as "not ELF"
            assert dyn is None and cut < 16


def test_every_single_byte_flip_is_handled() -> None:
    data = make_elf(needed=("a.so",), runpath="$ORIGIN", rpath="$ORIGIN/../lib", soname="x.so")
    for i in range(len(data)):
        for value in (0x00, 0xFF, 0x7F):
            bad = bytearray(data)
            bad[i] = value
            try:
                parse(bytes(bad))
            except ElfFormatError:
                pass


def _with(data: bytes, offset: int, fmt: str, *values: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, *values)
    return bytes(out)


def test_program_headers_out_of_range() -> None:
    data = make_elf()
    with pytest.raises(ElfFormatError, match="program headers lies outside the file"):
        parse(_with(data, 32, "<Q", 1 << 62))  # e_phoff


def test_huge_phnum_is_capped() -> None:
    with pytest.raises(ElfFormatError, match="program headers"):
        parse(_with(make_elf(), 56, "<H", 0xFFFF))  # e_phnum (PN_XNUM)


def test_small_phentsize_is_refused() -> None:
    with pytest.raises(ElfFormatError, match="program header size"):
        parse(_with(make_elf(), 54, "<H", 8))


def test_huge_dynamic_segment_is_capped_before_reading() -> None:
    data = make_elf()
    # PT_DYNAMIC's p_filesz (second program header at 64 + 56; p_filesz at +32)
    bad = _with(data, 64 + 56 + 32, "<Q", (MAX_DYNAMIC_ENTRIES + 1) * 16)
    with pytest.raises(ElfFormatError, match="dynamic entries"):
        parse(bad)


def test_strtab_outside_loaded_segments() -> None:
    data = make_elf(runpath="$ORIGIN", extra_dyn=())
    # DT_STRTAB is after NEEDED and RUNPATH: entry 2 of the dynamic segment
    dyn_off = 64 + 2 * 56
    bad = _with(data, dyn_off + 2 * 16, "<qQ", 5, 0x10)
    with pytest.raises(ElfFormatError, match="in no loaded segment"):
        parse(bad)


def test_string_index_past_table() -> None:
    data = make_elf(needed=())
    dyn_off = 64 + 2 * 56
    bad = _with(data, dyn_off, "<qQ", 29, 10_000)  # STRTAB entry turned into RUNPATH@10000
    # the table is now unnamed: either message is a refusal
    with pytest.raises(ElfFormatError):
        parse(bad)
    data = make_elf(runpath="$ORIGIN")
    bad = _with(data, dyn_off + 8 * 2 - 8, "<Q", 10_000)  # RUNPATH's string index
    with pytest.raises(ElfFormatError, match="past the string table"):
        parse(bad)


def test_unterminated_string() -> None:
    data = make_elf(needed=(), runpath="$ORIGIN")
    bad = data[:-1] + b"X"  # the last string loses its NUL
    with pytest.raises(ElfFormatError, match="runs past the string table"):
        parse(bad)


def test_overlong_string_is_capped() -> None:
    data = make_elf(needed=(), runpath="$ORIGIN/" + "a" * (MAX_STRING + 10))
    with pytest.raises(ElfFormatError, match="longer than"):
        parse(data)


def test_duplicate_runpath_is_refused() -> None:
    data = make_elf(needed=(), runpath="$ORIGIN", extra_dyn=((29, 1),))
    with pytest.raises(ElfFormatError, match="two RUNPATH"):
        parse(data)


def test_string_table_past_the_end() -> None:
    data = make_elf(runpath="$ORIGIN", needed=())
    dyn_off = 64 + 2 * 56
    bad = _with(data, dyn_off + 2 * 16, "<qQ", 10, 1 << 40)  # DT_STRSZ
    with pytest.raises(ElfFormatError, match="string table lies outside"):
        parse(bad)


def test_bad_class_and_byte_order() -> None:
    data = make_elf()
    with pytest.raises(ElfFormatError, match="class"):
        parse(data[:4] + b"\x03" + data[5:])
    with pytest.raises(ElfFormatError, match="byte order"):
        parse(data[:5] + b"\x09" + data[6:])


def test_read_dynamic_from_a_file(tmp_path: Path) -> None:
    f = tmp_path / "libx.so"
    f.write_bytes(make_elf(runpath="$ORIGIN", soname="libx.so"))
    dyn = read_dynamic(f)
    assert dyn is not None and dyn.runpath == ("$ORIGIN",) and dyn.soname == "libx.so"
    (tmp_path / "text").write_text("hello")
    assert read_dynamic(tmp_path / "text") is None


@pytest.mark.skipif(not hasattr(os, "symlink") or sys.platform == "win32", reason="POSIX links")
def test_read_dynamic_does_not_follow_links(tmp_path: Path) -> None:
    f = tmp_path / "libx.so.1"
    f.write_bytes(make_elf(runpath="$ORIGIN"))
    (tmp_path / "libx.so").symlink_to("libx.so.1")
    with pytest.raises(ElfFormatError, match="symbolic link"):
        read_dynamic(tmp_path / "libx.so")
    dyn = read_dynamic(tmp_path / "libx.so", follow_symlinks=True)
    assert dyn is not None and dyn.runpath == ("$ORIGIN",)
    with pytest.raises(ElfFormatError, match="not a regular file"):
        read_dynamic(tmp_path)


@pytest.mark.skipif(not Path("/bin/sh").exists() or sys.platform != "linux", reason="a Linux system binary")
def test_a_real_system_binary() -> None:
    dyn = read_dynamic(Path("/bin/sh"), follow_symlinks=True)
    assert dyn is not None and dyn.dynamic
    assert any(n.startswith("libc.so") for n in dyn.needed)


@pytest.mark.parametrize(
    ("runpath", "bad"),
    [
        ("$ORIGIN", []),
        ("${ORIGIN}", []),
        ("$ORIGIN/../lib:$ORIGIN", []),
        ("$ORIGIN:", [""]),
        (":$ORIGIN", [""]),
        ("$ORIGIN::$ORIGIN", [""]),
        (
            "$ORIGIN:/home/me/venv/site-packages/nvidia/cu13/lib:",
            ["/home/me/venv/site-packages/nvidia/cu13/lib", ""],
        ),
        ("lib", ["lib"]),
        ("./lib", ["./lib"]),
        ("$ORIGINAL", ["$ORIGINAL"]),
        ("$LIB", ["$LIB"]),
    ],
)
def test_rpath_policy(runpath: str, bad: list[str]) -> None:
    dyn = parse(make_elf(runpath=runpath))
    assert dyn is not None
    problems = rpath_problems(dyn)
    assert [p.entry for p in problems] == bad
    assert all(p.tag == "RUNPATH" for p in problems)


def test_rpath_policy_reads_rpath_too_and_describes() -> None:
    dyn = parse(make_elf(rpath="/build/x:"))
    assert dyn is not None
    described = [p.describe() for p in rpath_problems(dyn)]
    assert described == [
        "RPATH entry '/build/x': absolute path (a path of the machine that built it)",
        "RPATH entry '': empty entry (the loader reads it as the current directory)",
    ]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "libx.so"
    os.mkfifo(fifo)
    with pytest.raises(ElfFormatError, match="not a regular file"):
        read_dynamic(fifo)


@settings(max_examples=300, deadline=None)
@given(tail=st.binary(max_size=600), is64=st.booleans(), little=st.booleans())
def test_random_bytes_after_an_elf_ident_never_crash(tail: bytes, is64: bool, little: bool) -> None:
    head = b"\x7fELF" + bytes([2 if is64 else 1, 1 if little else 2, 1]) + bytes(9)
    try:
        dyn = parse(head + tail)
    except ElfFormatError:
        return
    assert dyn is None or isinstance(dyn, ElfDynamic)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_random_overwrites_of_a_valid_image_never_crash(data: st.DataObject) -> None:
    image = bytearray(make_elf(needed=("a.so", "b.so"), runpath="$ORIGIN", soname="x.so"))
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(image) - 1))
        image[at] = data.draw(st.integers(0, 255))
    try:
        parse(bytes(image))
    except ElfFormatError:
        pass
