"""Mail headers as git writes and reads them (spec.mailfmt), checked against what
`git format-patch` wrote for the synthetic queue (tests/fixtures/data/queue/)."""

from __future__ import annotations

import pytest

from patchkit.spec.mailfmt import (
    cleanup_subject,
    decode_words,
    format_from,
    format_subject,
    is_from_line,
    sanitized_subject,
    stripspace,
    wrap_text,
)
from tests.fixtures.queue import QUEUE_DATA


def _header(name: str, index: int) -> str:
    """The header ``name`` (with its continuation lines) of the queue's mail ``index``."""
    path = sorted(QUEUE_DATA.glob("*.patch"))[index]
    lines = path.read_text(encoding="utf-8").split("\n")
    out: list[str] = []
    for ln in lines:
        if out and ln[:1] == " ":
            out.append(ln)
        elif out:
            break
        elif ln.startswith(name + ":"):
            out.append(ln)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize(
    ("index", "name", "mail"),
    [
        (0, "Jöhannes Gäßler", "jg@example.invalid"),  # RFC 2047, address rules
        (1, "Nakasaka, Masato", "nakasaka@example.invalid"),  # RFC 822 quoting
        (2, "nobody", ""),  # an empty address, as ollama's Makefile.sync makes
        (3, "Fixture Author", "fixture@example.invalid"),
    ],
)
def test_from_line_is_the_one_git_writes(index: int, name: str, mail: str) -> None:
    assert format_from(name, mail) == _header("From", index)


@pytest.mark.parametrize(
    ("index", "subject"),
    [
        (0, "rpc: let zëro-byte views pass the bounds check"),  # encoded in two pieces
        (4, "data: the table's third quarter is reversed, in a long ascii title that git folds for sure"),
    ],
)
def test_subject_line_is_the_one_git_writes(index: int, subject: str) -> None:
    assert format_subject(subject, prefix=f"[PATCH {index + 1}/5] ") == _header("Subject", index)


def test_a_first_word_too_long_for_the_line_wraps_as_git_wraps_it() -> None:
    # git format-patch of a 90-character word and "yy": a line break right after "[PATCH] "
    assert format_subject("x" * 90 + " yy") == "Subject: [PATCH] \n " + "x" * 90 + "\n yy\n"
    assert wrap_text("a b c", 0, 0, 78) == "a b c"


def test_decoding_undoes_encoded_words_and_the_title_is_cleaned() -> None:
    folded = "[PATCH 1/5] =?UTF-8?q?rpc:=20let=20z=C3=ABro-byte=20views=20pass?= =?UTF-8?q?=20the=20bounds=20check?="
    assert cleanup_subject(decode_words(folded)) == "rpc: let zëro-byte views pass the bounds check"
    assert cleanup_subject("Re: [PATCH v2 3/7] [RFC] x: y") == "x: y"
    assert cleanup_subject("Revert x") == "Revert x"  # "Re" of a word stays
    assert cleanup_subject("  [no closing bracket") == "[no closing bracket"
    with pytest.raises(ValueError):
        decode_words("=?no-such-charset?q?x?=")


@pytest.mark.parametrize(
    ("subject", "slug"),
    [
        # ollama's file names, as format-patch made them
        (
            "CUDA: Changing the CUDA scheduling strategy to spin (#16585)",
            "CUDA-Changing-the-CUDA-scheduling-strategy-to-spin-16585",
        ),
        (
            "ggml-backend: malloc and free using the same compiler",
            "ggml-backend-malloc-and-free-using-the-same-compiler",
        ),
        ("fix mtmd-audio.cpp build on windows", "fix-mtmd-audio.cpp-build-on-windows"),
        ("a...b -- c.", "a.b-c"),
        ("rpc: let zëro-byte views", "rpc-let-z-ro-byte-views"),
    ],
)
def test_sanitized_subject(subject: str, slug: str) -> None:
    assert sanitized_subject(subject) == slug


def test_from_lines_are_told_as_git_mailsplit_tells_them() -> None:
    assert is_from_line(b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n")
    assert is_from_line(b"From someone@example.invalid Thu Nov  6 10:00:00 2025\n")
    assert not is_from_line(b"From here on the notes say how to run things (a line an mbox could\n")
    assert not is_from_line(b"From x Mon Sep 17 00:00:00 70\n")  # a two-digit year up to 90
    assert not is_from_line(b"From: a <b@c>\n")


def test_stripspace() -> None:
    assert stripspace("\n\ntitle  \n\n\n\nbody\t\n\n") == "title\n\nbody\n"
    assert stripspace("\n \n") == ""
