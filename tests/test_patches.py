"""The patch series patchkit ships (patches/ at the repository root).

The patches are for real llama.cpp, which tests cannot use, so this checks their
metadata and the diffs' own consistency, and (integration) that ``git apply``
accepts each diff against a file rebuilt from its hunks' preimage.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from patchkit.core.fs import sha256_file
from patchkit.model.series import Patch, load_series
from tests.fixtures.paths import REPO

PATCHES = REPO / "patches"
SHA40 = re.compile(r"^[0-9a-f]{40}$")
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
RPC_CPP = "ggml/src/ggml-rpc/ggml-rpc.cpp"


def _series() -> tuple[Patch, ...]:
    return load_series(PATCHES).patches


def _diff_sections(text: str) -> dict[str, list[list[str]]]:
    """file -> hunks (each a list of body lines with their ' ', '-', '+' prefix)."""
    files: dict[str, list[list[str]]] = {}
    current: list[list[str]] | None = None
    lines = text[text.index("diff --git"):].splitlines()
    for line in lines:
        if line.startswith("diff --git"):
            current = files.setdefault(line.split(" b/", 1)[1], [])
        elif line.startswith("@@"):
            assert current is not None
            current.append([line])
        elif current and line[:1] in (" ", "-", "+", "\\", ""):
            current[-1].append(line)  # before the first @@ current is empty: headers skipped
    return files


def test_series_loads_and_hashes_match() -> None:
    patches = _series()
    assert patches, "patches/series lists no patch"
    for p in patches:
        assert sha256_file(p.path) == p.sha256, p.filename
        assert p.read_verified() == p.path.read_bytes()
    listed = {p.filename for p in patches}
    on_disk = {f.name for f in PATCHES.glob("*.patch")}
    assert listed == on_disk, "every patch file must be in the series, and only those"


def test_when_ends_are_full_shas() -> None:
    for p in _series():
        assert p.when_from or p.when_to, f"{p.filename}: When has no end at all"
        for end in (p.when_from, p.when_to):
            assert end is None or SHA40.match(end), f"{p.filename}: When end {end!r}"


def test_headers() -> None:
    for p in _series():
        assert p.subject and p.why
        assert p.upstream_status.split()[0] in ("pending", "submitted", "accepted", "backport")
        assert p.path.read_text(encoding="utf-8").count("\ndiff --git ") >= 1
    names = [p.filename for p in _series()]
    assert names == sorted(names), "series order must follow the file numbers"


def test_zero_nbytes_patch() -> None:
    p = next(p for p in _series() if p.filename.startswith("0001-"))
    assert p.filename == "0001-rpc-deserialize-tensor-zero-nbytes.patch"
    assert p.files == (RPC_CPP,)
    assert p.default and not p.experimental
    assert p.when_from == "e95dae18d64ae4471d61a9dc87880a64e0e5c86e" and p.when_to is None
    text = p.path.read_text(encoding="utf-8")
    assert "Checked: applies at 82bb48500a9a6b3374da2cf5811695369278e4d3" in text
    added = "\n".join(line for line in text.splitlines() if line.startswith("+"))
    removed = "\n".join(line for line in text.splitlines() if line.startswith("-"))
    # the aborting checks go, the zero-byte rule and an error return come in
    assert "GGML_ASSERT(tensor->data >= buffer_start" in removed
    assert "GGML_ASSERT" not in added
    assert "tensor_size == 0" in added and "return nullptr;" in added


def test_hunk_line_counts_match_headers() -> None:
    for p in _series():
        for path, hunks in _diff_sections(p.path.read_text(encoding="utf-8")).items():
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


def _preimage(hunks: list[list[str]]) -> list[str]:
    """A file whose lines at each hunk's old position are that hunk's context and '-' lines."""
    out: list[str] = []
    for hunk in hunks:
        start = int(HUNK.match(hunk[0]).group(1))  # type: ignore[union-attr]
        while len(out) < start - 1:
            out.append(f"// filler {len(out) + 1}")
        out += [line[1:] for line in hunk[1:] if line[:1] in (" ", "-", "")]
    return [*out, "// end"]


@pytest.mark.integration
def test_git_apply_accepts_each_patch(tmp_path: Path) -> None:
    for p in _series():
        repo = tmp_path / p.name
        repo.mkdir()
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        sections = _diff_sections(p.path.read_text(encoding="utf-8"))
        for path, hunks in sections.items():
            target = repo / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("\n".join(_preimage(hunks)) + "\n", encoding="utf-8")
        subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
        r = subprocess.run(["git", "-C", str(repo), "apply", "--index", str(p.path)],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"{p.filename}: {r.stderr}"
        for path, hunks in sections.items():
            text = (repo / path).read_text(encoding="utf-8")
            for hunk in hunks:
                for line in hunk[1:]:
                    if line.startswith("+"):
                        assert line[1:] in text, f"{p.filename}: {line!r} not applied"
