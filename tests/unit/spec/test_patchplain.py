"""Plain diffs (``git diff`` files, no header) and quilt patches (free text before the
diff) are patches too: every field derived, the title from the text or the file's name,
no author; a header that names one of patchkit's fields is still patchkit's form."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.core.errors import PatchError
from patchkit.core.fs import sha256_file
from patchkit.spec.patchdoc import read_doc
from patchkit.spec.series import load_series

DIFF = (
    "diff --git a/src/f.c b/src/f.c\n"
    "index 1111111..2222222 100644\n"
    "--- a/src/f.c\n"
    "+++ b/src/f.c\n"
    "@@ -1,3 +1,3 @@\n"
    " a\n"
    "-b\n"
    "+B\n"
    " c\n"
)


def load(tmp_path: Path, files: dict[str, str]) -> list:
    d = tmp_path / "patches"
    d.mkdir()
    lines = []
    for name, text in files.items():
        (d / name).write_text(text)
        lines.append(f"{name} sha256={sha256_file(d / name)}\n")
    (d / "series").write_text("".join(lines))
    return list(load_series(d).patches)


def test_a_plain_git_diff_is_a_patch_titled_from_its_file_name(tmp_path: Path) -> None:
    (p,) = load(tmp_path, {"0003-ggml-cuda_fix-graphs.patch": DIFF})
    assert p.kind == "plain"
    assert p.subject == "ggml cuda fix graphs"
    assert p.author is None and p.date is None  # no author invented
    assert p.upstream_status == "pending" and p.when == ".."
    assert "Subject" in p.derived and "Why" in p.derived
    assert p.files == ("src/f.c",)


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("Make b loud\n\nThe tool shouts, so must we.\n\n", "Make b loud"),
        ("Description: make b loud\nAuthor: Someone <s@example.org>\nForwarded: no\n\n", "make b loud"),
        ("Index: src/f.c\n===================================================================\n", "f shout"),
        ("Subject: make b loud\n---\n src/f.c | 2 +-\n 1 file changed\n\n", "make b loud"),
    ],
)
def test_a_quilt_patch_takes_its_title_from_its_text(tmp_path: Path, text: str, title: str) -> None:
    (p,) = load(tmp_path, {"f-shout.diff": text + DIFF})
    assert p.kind == "plain"
    assert p.subject == title
    assert p.author is None  # a DEP-3 Author: line is text, not the patch's author


def test_the_free_text_is_the_message_and_the_diff_is_kept_as_bytes(tmp_path: Path) -> None:
    data = ("Make b loud\n\nThe tool shouts.\n\n" + DIFF).encode()
    doc = read_doc(data, "patches/x.patch")
    assert doc.kind == "plain" and doc.native is None and doc.mail is None
    assert doc.message.startswith("Make b loud\n\nThe tool shouts.")
    assert doc.parts.diff == DIFF.encode()


def test_a_header_naming_patchkits_fields_is_still_checked_as_one(tmp_path: Path) -> None:
    with pytest.raises(PatchError, match="header lacks Why, Upstream-Status$"):
        load(tmp_path, {"0001-x.patch": "Subject: x\nWhen: ..\n\n" + DIFF})


def test_a_plain_file_without_a_diff_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PatchError, match="holds no `diff --git` section"):
        load(tmp_path, {"0001-x.patch": "just words\n"})
