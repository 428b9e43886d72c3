"""The patch series patchkit ships (patches/ at the repository root).

The patches are for real llama.cpp, which tests cannot use, so this checks their
metadata and the diffs' own consistency (tests/integration/test_patches.py runs
``git apply`` on each)."""

from __future__ import annotations

from patchkit.core.fs import sha256_file
from tests.fixtures.patches import HUNK, PATCHES, RPC_CPP, SHA40, diff_sections, shipped_series


def test_series_loads_and_hashes_match() -> None:
    patches = shipped_series()
    assert patches, "patches/series lists no patch"
    for p in patches:
        assert sha256_file(p.path) == p.sha256, p.filename
        assert p.read_verified() == p.path.read_bytes()
    listed = {p.filename for p in patches}
    on_disk = {f.name for f in PATCHES.glob("*.patch")}
    assert listed == on_disk, "every patch file must be in the series, and only those"


def test_when_ends_are_full_shas() -> None:
    for p in shipped_series():
        assert p.when_from or p.when_to, f"{p.filename}: When has no end at all"
        for end in (p.when_from, p.when_to):
            assert end is None or SHA40.match(end), f"{p.filename}: When end {end!r}"


def test_headers() -> None:
    for p in shipped_series():
        assert p.subject and p.why
        assert p.upstream_status.split()[0] in ("pending", "submitted", "accepted", "backport")
        assert p.path.read_text(encoding="utf-8").count("\ndiff --git ") >= 1
    names = [p.filename for p in shipped_series()]
    assert names == sorted(names), "series order must follow the file numbers"


def test_zero_nbytes_patch() -> None:
    p = next(p for p in shipped_series() if p.filename.startswith("0001-"))
    assert p.filename == "0001-rpc-deserialize-tensor-zero-nbytes.patch"
    assert p.files == (RPC_CPP,)
    assert p.default and not p.experimental
    assert p.when_from == "e95dae18d64ae4471d61a9dc87880a64e0e5c86e" and p.when_to is None
    text = p.path.read_text(encoding="utf-8")
    assert "Checked: applies at bb4caa7540188872173c44d161602d9271386413" in text
    added = "\n".join(line for line in text.splitlines() if line.startswith("+"))
    removed = "\n".join(line for line in text.splitlines() if line.startswith("-"))
    # the aborting checks go, the zero-byte rule and an error return come in
    assert "GGML_ASSERT(tensor->data >= buffer_start" in removed
    assert "GGML_ASSERT" not in added
    assert "tensor_size == 0" in added and "return nullptr;" in added


def test_hunk_line_counts_match_headers() -> None:
    for p in shipped_series():
        for path, hunks in diff_sections(p.path.read_text(encoding="utf-8")).items():
            assert hunks, f"{p.filename}: {path} has no hunk"
            for hunk in hunks:
                m = HUNK.match(hunk[0])
                assert m, hunk[0]
                old = int(m.group(2) or 1)
                new = int(m.group(4) or 1)
                body = [line for line in hunk[1:] if not line.startswith("\\")]
                n_old = sum(1 for line in body if line[:1] in (" ", "-", ""))
                n_new = sum(1 for line in body if line[:1] in (" ", "+", ""))
                assert (n_old, n_new) == (old, new), f"{p.filename}: {path}: {hunk[0]}"
