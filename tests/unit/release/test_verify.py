"""`patchkit verify` (release.verify) catches every kind of tampering with a release folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from patchkit.core.fs import sha256_file
from patchkit.release.archive import Member, read_archive, write_archive
from patchkit.release.release import dump_manifest
from patchkit.release.verify import verify_dir
from tests.fixtures.release import (
    COMMIT_EPOCH,
    do_release,
    make_build,
)

# ---------------------------------------------------------------- verify


def _released(tmp_path: Path, **kw: Any) -> tuple[Path, Any]:
    dist = tmp_path / "dist"
    r = do_release(make_build(tmp_path, **kw), dist)
    assert verify_dir(dist).differences == ()
    return dist, r


def _repack(archive: Path, root: str, edit: Any, *, mtime: int = COMMIT_EPOCH) -> None:
    """Rewrite an archive with the same writer after ``edit(dict name->bytes)``."""
    entries = read_archive(archive, keep=[e.name for e in read_archive(archive)])
    files = {e.name[len(root) + 1 :]: e.data for e in entries}
    edit(files)
    members = [
        Member(name=n, mode=0o755 if n.startswith("bin/") else 0o644, data=d) for n, d in files.items()
    ]
    write_archive(archive, root, members, mtime=mtime)


def test_verify_catches_a_modified_member(tmp_path: Path) -> None:
    dist, r = _released(tmp_path)
    _repack(r.archive, r.name, lambda f: f.update({"bin/llama-cli": b"\x7fELF patched"}))
    diffs = verify_dir(dist).differences
    assert any(d.startswith(f"{r.archive.name}: sha256 is ") and "SHA256SUMS says" in d for d in diffs)
    assert (
        f"{r.archive.name}: bin/llama-cli: size is 12, the manifest says "
        f"{(tmp_path / 'out/cpu-rpc/bin/llama-cli').stat().st_size}" in diffs
    )
    assert any(d.startswith(f"{r.archive.name}: bin/llama-cli: sha256 is") for d in diffs)
    # the provenance statement names the old archive's sha256
    assert (
        f"{r.name}.intoto.json: does not match {r.archive.name} and its manifest: "
        "subject[0].digest.sha256" in diffs
    )
    assert len(diffs) == 4, diffs


def test_verify_catches_missing_and_extra_members(tmp_path: Path) -> None:
    dist, r = _released(tmp_path)

    def edit(f: dict[str, bytes]) -> None:
        del f["bin/libggml.so"]
        f["bin/extra.so"] = b"x"

    _repack(r.archive, r.name, edit)
    diffs = verify_dir(dist).differences
    assert f"{r.archive.name}: bin/libggml.so is in the manifest but missing from the archive" in diffs
    assert f"{r.archive.name}: bin/extra.so is in the archive but not in the manifest" in diffs


def test_verify_catches_missing_files(tmp_path: Path) -> None:
    dist, r = _released(tmp_path)
    r.manifest.unlink()
    diffs = verify_dir(dist).differences
    assert diffs == (
        f"{r.manifest.name}: listed in SHA256SUMS but missing",
        f"{r.manifest.name}: missing (the copy of {r.archive.name}'s manifest)",
    )
    r.archive.unlink()
    assert f"{r.archive.name}: listed in SHA256SUMS but missing" in verify_dir(dist).differences
    (dist / "SHA256SUMS").unlink()
    assert "SHA256SUMS: missing" in verify_dir(dist).differences


def test_verify_catches_an_edited_sidecar_manifest(tmp_path: Path) -> None:
    dist, r = _released(tmp_path)
    m = json.loads(r.manifest.read_text())
    m["smoke"]["status"] = "passed-ish"
    m["tools"]["cmake"] = "9.9"
    r.manifest.write_bytes(dump_manifest(m))
    diffs = verify_dir(dist).differences
    assert any(d.startswith(f"{r.manifest.name}: sha256 is") for d in diffs)
    assert (
        f"{r.manifest.name}: differs from the manifest inside {r.archive.name}: smoke.status, tools.cmake"
    ) in diffs
    assert len(diffs) == 2, diffs


def test_verify_catches_an_edited_inner_manifest(tmp_path: Path) -> None:
    dist, r = _released(tmp_path)

    def edit(f: dict[str, bytes]) -> None:
        m = json.loads(f["manifest.json"])
        m["files"] = [x for x in m["files"] if x["path"] != "LICENSE"]
        m["smoke"]["status"] = "failed"
        m["series_hash"] = "1" * 64
        f["manifest.json"] = json.dumps(m).encode()  # not the canonical form either

    _repack(r.archive, r.name, edit)
    # the attacker also fixes SHA256SUMS: the content checks must still catch it
    sums = (dist / "SHA256SUMS").read_text().splitlines()
    sums = [
        f"{sha256_file(r.archive)}  {r.archive.name}" if line.endswith(r.archive.name) else line
        for line in sums
    ]
    (dist / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    diffs = verify_dir(dist).differences
    a = r.archive.name
    assert f"{a}: manifest.json is not in canonical form (edited by hand?)" in diffs
    assert any(
        d.startswith(
            f"{a}: the manifest's upstream/series/platform/cuda fields give the "
            "name llama-82bb485-pk11111111-"
        )
        for d in diffs
    )
    assert f"{a}: LICENSE is in the archive but not in the manifest" in diffs
    assert f"{a}: smoke failed but the manifest records no 'unsmoked' waiver" in diffs
    assert any(
        d.startswith(f"{r.manifest.name}: differs from the manifest inside {a}: files")
        and "series_hash" in d
        and "smoke.status" in d
        for d in diffs
    )
    assert not any("sha256 is" in d and "SHA256SUMS" in d for d in diffs)


def test_verify_catches_non_normalised_layout(tmp_path: Path) -> None:
    dist, r = _released(tmp_path)
    _repack(r.archive, r.name, lambda f: None, mtime=COMMIT_EPOCH + 60)
    diffs = verify_dir(dist).differences
    assert (
        f"{r.archive.name}: {r.name}/LICENSE: mtime {COMMIT_EPOCH + 60}, the manifest "
        f"declares {COMMIT_EPOCH}" in diffs
    )


def test_verify_flags_unlisted_and_unreadable_files(tmp_path: Path) -> None:
    dist, _r = _released(tmp_path)
    junk = dist / "llama-junk.tar.gz"
    junk.write_bytes(b"not a gzip")
    diffs = verify_dir(dist).differences
    assert "llama-junk.tar.gz: not listed in SHA256SUMS" in diffs
    assert any(d.startswith("llama-junk.tar.gz: not a readable tar.gz archive") for d in diffs)
    (dist / "SHA256SUMS").write_text("garbage\n" + (dist / "SHA256SUMS").read_text())
    assert "SHA256SUMS line 1: not `<sha256>  <file>`: 'garbage'" in verify_dir(dist).differences
