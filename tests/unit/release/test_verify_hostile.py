"""Tampered and hostile release folders: archive bombs (a one-line exit 12), members that an
unpacker would put elsewhere, links and special files that must not be followed, all
with bounded memory and time."""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
import tarfile
import tracemalloc
import zipfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchkit.cli import main
from patchkit.core.errors import ReleaseError
from patchkit.core.fs import sha256_file
from patchkit.release.archive import (
    ArchiveRefused,
    Limits,
    Member,
    check_archive,
    read_archive,
    write_archive,
)
from patchkit.release.release import dump_manifest, write_sums
from patchkit.release.verify import verify_dir
from tests.fixtures.release import COMMIT_EPOCH, do_release, make_build

MIB = 1 << 20
ROOT = "llama-x"


class _Zeros(io.RawIOBase):
    """``n`` zero bytes, produced as they are read (no big buffer in the test either)."""

    def __init__(self, n: int) -> None:
        self.left = n

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        k = min(len(b), self.left)
        b[:k] = bytes(k)
        self.left -= k
        return k


def tar_gz(
    path: Path, members: list[tarfile.TarInfo | tuple[str, int]], *, fmt: int = tarfile.PAX_FORMAT
) -> Path:
    """A .tar.gz of the given members: TarInfo as is, (name, size) as zero-filled files."""
    with (
        gzip.GzipFile(path, "wb", compresslevel=1, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=fmt) as tar,
    ):
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tar.addfile(m, io.BytesIO(b"x" * m.size) if m.isfile() else None)
            else:
                info = tarfile.TarInfo(m[0])
                info.size = m[1]
                tar.addfile(info, io.BufferedReader(_Zeros(m[1])))
    return path


def dist_with(tmp_path: Path, archive: Path) -> Path:
    """A release folder whose SHA256SUMS lists ``archive`` (so only its content is wrong)."""
    dist = archive.parent
    write_sums(dist / "SHA256SUMS", {archive.name: sha256_file(archive)})
    return dist


def verify_cli(dist: Path) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["verify", str(dist)])
    assert "Traceback" not in r.output
    return r.exit_code, r.output


def test_a_manifest_bomb_is_one_line_exit_12_in_little_memory(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    # 256 MiB of manifest.json in a ~250 KiB archive
    bomb = tar_gz(dist / f"{ROOT}.tar.gz", [(f"{ROOT}/manifest.json", 256 * MIB)])
    assert bomb.stat().st_size < 2 * MIB
    dist_with(tmp_path, bomb)
    tracemalloc.start()
    try:
        with pytest.raises(ReleaseError) as e:
            verify_dir(dist)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * MIB
    assert e.value.exit_code == 12 and "\n" not in e.value.message
    assert e.value.message == (
        f"{bomb.name}: refused: {ROOT}/manifest.json is {256 * MIB} bytes "
        "uncompressed, more than the 4 MiB a manifest may be (a bomb?)"
    )
    code, out = verify_cli(dist)
    assert code == 12 and out.count("error: ") == 1 and "refused" in out


def test_a_big_member_is_hashed_as_a_stream(tmp_path: Path) -> None:
    path = tar_gz(tmp_path / "a.tar.gz", [("r/bin/big", 64 * MIB)])
    tracemalloc.start()
    try:
        (entry,) = read_archive(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert entry.size == 64 * MIB and entry.data is None and peak < 4 * MIB


def test_total_member_and_time_limits(tmp_path: Path) -> None:
    path = tar_gz(tmp_path / "a.tar.gz", [(f"r/f{i}", 1000) for i in range(6)])
    assert len(read_archive(path)) == 6
    with pytest.raises(ArchiveRefused, match="more than 5 members"):
        read_archive(path, limits=Limits(members=5))
    with pytest.raises(ArchiveRefused, match="past 4.*e-06 GiB uncompressed|past .* GiB"):
        read_archive(path, limits=Limits(total=4096))
    with pytest.raises(ArchiveRefused, match="took more than"):
        read_archive(path, limits=Limits(seconds=-1))


def test_ten_thousand_and_one_members_with_the_default_limits(tmp_path: Path) -> None:
    members = [tarfile.TarInfo(f"r/{i:05d}") for i in range(10_001)]
    path = tar_gz(tmp_path / "many.tar.gz", members)  # type: ignore[arg-type]
    with pytest.raises(ArchiveRefused, match="more than 10000 members"):
        read_archive(path)


def test_a_pax_or_long_name_header_claiming_megabytes_is_refused(tmp_path: Path) -> None:
    info = tarfile.TarInfo("r/x")
    info.pax_headers = {"comment": "c" * (2 * MIB)}
    pax = tar_gz(tmp_path / "pax.tar.gz", [info])
    with pytest.raises(ArchiveRefused, match="a tar header record of .* bytes"):
        read_archive(pax)
    gnu = tar_gz(
        tmp_path / "gnu.tar.gz", [tarfile.TarInfo("r/" + "n" * (200 * 1024))], fmt=tarfile.GNU_FORMAT
    )
    with pytest.raises(ArchiveRefused, match="a tar header record"):
        read_archive(gnu)


def test_a_chain_of_thousands_of_pax_headers_is_refused(tmp_path: Path) -> None:
    one = tarfile.TarInfo._create_pax_generic_header(  # type: ignore[attr-defined]
        {"comment": "x" * 100}, tarfile.XHDTYPE, "utf-8"
    )
    member = tarfile.TarInfo("r/x").tobuf(tarfile.PAX_FORMAT)
    raw = one * 5000 + member + bytes(1024)
    path = tmp_path / "chain.tar.gz"
    path.write_bytes(gzip.compress(raw, mtime=0))
    with pytest.raises(ArchiveRefused, match="chained too deeply"):
        read_archive(path)


def _zip(path: Path, entries: list[tuple[zipfile.ZipInfo | str, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for info, data in entries:
            zf.writestr(info, data)
    return path


def _patch_eocd(path: Path, offset: int, fmt: str, value: int) -> None:
    import struct

    data = bytearray(path.read_bytes())
    end = data.rfind(b"PK\x05\x06")
    struct.pack_into(fmt, data, end + offset, value)
    path.write_bytes(bytes(data))


def test_a_zip_directory_claiming_too_many_entries_or_bytes_is_refused(tmp_path: Path) -> None:
    path = _zip(tmp_path / "a.zip", [("r/x", b"1"), ("r/y", b"2")])
    _patch_eocd(path, 10, "<H", 60_000)  # total entries
    with pytest.raises(ArchiveRefused, match="its directory lists 60000 members"):
        read_archive(path)
    path = _zip(tmp_path / "b.zip", [("r/x", b"1")])
    _patch_eocd(path, 12, "<I", 100 * MIB)  # central directory size
    with pytest.raises(ArchiveRefused, match="its directory is .* bytes, more than 16 MiB"):
        read_archive(path)


def test_a_zip_manifest_bomb_and_a_member_lying_about_its_size(tmp_path: Path) -> None:
    path = tmp_path / f"{ROOT}.zip"
    with (
        zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf,
        zf.open(f"{ROOT}/manifest.json", "w", force_zip64=True) as dst,
    ):
        for _ in range(64):
            dst.write(bytes(MIB))
    with pytest.raises(ArchiveRefused, match="manifest.json is 67108864 bytes uncompressed"):
        read_archive(path, keep=[f"{ROOT}/manifest.json"])
    liar = _zip(tmp_path / "liar.zip", [("r/x", b"A" * 10_000)])
    data = bytearray(liar.read_bytes())
    for sig, off in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):  # uncompressed size fields
        at = data.find(sig)
        data[at + off : at + off + 4] = (10).to_bytes(4, "little")
    liar.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="not a readable zip archive") as e:
        read_archive(liar)
    assert not isinstance(e.value, ArchiveRefused)


def _link(name: str, kind: bytes, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


def test_members_an_unpacker_would_put_elsewhere_are_differences(tmp_path: Path) -> None:
    members: list[Any] = [
        _link("r/bin/llama-cli", tarfile.SYMTYPE, "/etc/passwd"),
        _link("r/bin/hard", tarfile.LNKTYPE, "/etc/shadow"),
        ("/etc/cron.d/x", 1),
        ("r/../../x", 1),
        ("r/a\\..\\b", 1),
        ("r/dup", 1),
        ("r/dup", 1),
    ]
    path = tar_gz(tmp_path / "r.tar.gz", members)
    problems = " | ".join(check_archive(path, read_archive(path), root="r", mtime=0))
    for needle in (
        "r/bin/llama-cli: not a regular file",
        "r/bin/hard: not a regular file",
        "'/etc/cron.d/x': an absolute name",
        "'r/../../x': an empty, '.' or '..' component",
        "backslash",
        "r/dup: appears twice",
    ):
        assert needle in problems, problems


def test_a_zip_symlink_entry_is_not_a_regular_file(tmp_path: Path) -> None:
    link = zipfile.ZipInfo("r/bin/llama-cli")
    link.create_system = 3
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    path = _zip(tmp_path / "r.zip", [(link, b"/etc/passwd"), ("r/ok", b"1")])
    entries = read_archive(path)
    assert [e.is_file for e in entries] == [False, True]
    assert "r/bin/llama-cli: not a regular file" in check_archive(path, entries, root="r", mtime=0)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_links_and_fifos_in_the_release_folder_are_never_opened(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    r = do_release(make_build(tmp_path / "b"), dist)
    # if verify opened any of these FIFOs it would wait for a writer forever
    os.mkfifo(tmp_path / "fifo")
    r.archive.unlink()
    r.archive.symlink_to(tmp_path / "fifo")
    r.manifest.unlink()
    os.mkfifo(r.manifest)
    os.mkfifo(dist / "extra.tar.gz")
    report = verify_dir(dist)
    text = " | ".join(report.differences)
    assert f"{r.archive.name}: listed in SHA256SUMS but it is a symlink (not followed)" in text
    assert f"{r.manifest.name}: listed in SHA256SUMS but it is not a regular file" in text
    assert "extra.tar.gz: not listed in SHA256SUMS" in text
    (dist / "SHA256SUMS").unlink()
    os.mkfifo(dist / "SHA256SUMS")
    assert "SHA256SUMS: is not a regular file" in verify_dir(dist).differences


def test_an_archive_linked_to_a_host_file_is_not_read(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    r = do_release(make_build(tmp_path / "b"), dist)
    outside = tmp_path / "outside.tar.gz"
    outside.write_bytes(r.archive.read_bytes())  # even a valid archive elsewhere is not read
    r.archive.unlink()
    r.archive.symlink_to(outside)
    diffs = verify_dir(dist).differences
    assert f"{r.archive.name}: is a symlink (not followed)" in diffs


def test_oversized_or_non_utf8_sums_and_side_manifest(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    r = do_release(make_build(tmp_path / "b"), dist)
    r.manifest.write_bytes(b"{" + b" " * (5 * MIB) + b"}")
    assert any("larger than 4 MiB" in d for d in verify_dir(dist).differences)
    (dist / "SHA256SUMS").write_bytes(b"\xff\xfe" * 10)
    assert "SHA256SUMS: not UTF-8 text" in verify_dir(dist).differences
    (dist / "SHA256SUMS").write_bytes(b"#" * (2 * MIB))
    assert any("SHA256SUMS: larger than 1 MiB" in d for d in verify_dir(dist).differences)


def test_a_deeply_nested_manifest_is_a_difference_not_a_traceback(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    deep = ("[" * 100_000 + "]" * 100_000).encode()
    path = dist / f"{ROOT}.tar.gz"
    with gzip.GzipFile(path, "wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        info = tarfile.TarInfo(f"{ROOT}/manifest.json")
        info.size = len(deep)
        tar.addfile(info, io.BytesIO(deep))
    dist_with(tmp_path, path)
    diffs = verify_dir(dist).differences
    assert f"{path.name}: manifest.json is not valid JSON (nested too deeply)" in diffs
    code, out = verify_cli(dist)
    assert code == 12 and out.count("error: ") == 1


def _archive_with_manifest(dist: Path, manifest: bytes) -> Path:
    path = dist / f"{ROOT}.tar.gz"
    with gzip.GzipFile(path, "wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        info = tarfile.TarInfo(f"{ROOT}/manifest.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
    return path


def test_a_manifest_that_is_json_but_hostile_in_shape(tmp_path: Path) -> None:
    """A manifest that does not fit the manifest's record is one line naming the key; the
    checks that need its fields are not made (nothing it names is opened)."""
    dist = tmp_path / "dist"
    dist.mkdir()
    manifest = json.dumps(
        {
            "files": [{"path": "../../etc/passwd", "sha256": "0"}] * 3,
            "name": 7,
            "archive": None,
            "smoke": "x",
            "waivers": 5,
        }
    ).encode()
    dist_with(tmp_path, _archive_with_manifest(dist, manifest))
    code, out = verify_cli(dist)
    assert code == 12
    assert f"{ROOT}.tar.gz: manifest.json: name is missing or not the expected type" in out
    assert "passwd" not in out


def test_a_well_formed_manifest_naming_a_path_outside_is_a_missing_member(tmp_path: Path) -> None:
    """A manifest that fits its record but lists ``../../etc/passwd``: a name compared with
    the archive's members (missing), never a path opened on this host."""
    dist = tmp_path / "dist"
    r = do_release(make_build(tmp_path / "b"), dist)
    entries = read_archive(r.archive, keep=[e.name for e in read_archive(r.archive)])
    files = {e.name[len(r.name) + 1 :]: e.data or b"" for e in entries}
    m = json.loads(files["manifest.json"])
    m["files"].append(dict(m["files"][0], path="../../etc/passwd"))
    files["manifest.json"] = dump_manifest(m)
    members = [
        Member(name=n, mode=0o755 if n.startswith("bin/") else 0o644, data=d) for n, d in files.items()
    ]
    write_archive(r.archive, r.name, members, mtime=COMMIT_EPOCH)
    diffs = verify_dir(dist).differences
    assert f"{r.archive.name}: ../../etc/passwd is in the manifest but missing from the archive" in diffs


# -- fuzz: whatever a tampered manifest holds, verify lists differences (never a traceback) --


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(1 << 70), 1 << 70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
_KEYS = (
    "schema",
    "name",
    "archive",
    "variant",
    "recipe",
    "upstream",
    "patches",
    "series_hash",
    "platform",
    "cuda",
    "smoke",
    "waivers",
    "source_date_epoch",
    "files",
    "cmake",
    "tools",
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    manifest=st.dictionaries(st.sampled_from(_KEYS), _json, max_size=len(_KEYS)),
    kind=st.sampled_from(["tar.gz", "zip"]),
)
def test_property_any_manifest_gives_differences_not_errors(
    tmp_path_factory: pytest.TempPathFactory, manifest: dict[str, Any], kind: str
) -> None:
    dist = tmp_path_factory.mktemp("dist")
    data = json.dumps(manifest).encode()
    path = dist / f"{ROOT}.{kind}"
    if kind == "zip":
        _zip(path, [(f"{ROOT}/manifest.json", data), (f"{ROOT}/bin/x", b"x")])
    else:
        with gzip.GzipFile(path, "wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
            info = tarfile.TarInfo(f"{ROOT}/manifest.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (dist / f"{ROOT}.manifest.json").write_bytes(json.dumps(manifest, indent=1).encode())
    dist_with(dist, path)
    report = verify_dir(dist)
    assert report.differences and all("\n" not in d for d in report.differences)


ESC = "\x1b]0;pwned\x07\x1b[2J\u202e\x9b"  # set the title, clear the screen, reorder, C1 CSI
SHOWN = "\\x1b]0;pwned\\x07\\x1b[2J\\u202e\\x9b"


def test_hostile_names_and_keys_reach_the_terminal_escaped(tmp_path: Path) -> None:
    """Verify: archive member names and in-toto statement keys were
    printed as given; every control character is escaped now, in text and in --json."""
    dist = tmp_path / "dist"
    r = do_release(make_build(tmp_path), dist)
    root = r.archive.name.removesuffix(".tar.gz")
    entries = read_archive(r.archive, keep=[e.name for e in read_archive(r.archive)])
    members = [Member(name=e.name[len(root) + 1 :], mode=e.mode, data=e.data or b"") for e in entries]
    members.append(Member(name=f"bin/{ESC}evil", mode=0o644, data=b"x"))
    write_archive(r.archive, root, members, mtime=COMMIT_EPOCH)
    (st_path,) = [p for p in r.provenance if p.name.endswith(".intoto.json")]
    statement = json.loads(st_path.read_text())
    statement[ESC] = "x"
    st_path.write_text(json.dumps(statement))
    diffs = verify_dir(dist).differences
    assert any(f"bin/{SHOWN}evil is in the archive but not in the manifest" in d for d in diffs), diffs
    assert any(SHOWN in d and "intoto.json: does not match" in d for d in diffs), diffs
    for d in diffs:
        assert d.isprintable(), d
    for args in ([], ["--json"]):
        res = CliRunner().invoke(main, ["verify", str(dist), *args])
        assert res.exit_code == 12, res.output
        for raw in ("\x1b", "\x07", "\u202e", "\x9b"):
            assert raw not in res.output, res.output
        shown = res.stdout if not args else "\n".join(json.loads(res.stdout)["differences"])
        assert f"bin/{SHOWN}evil" in shown, shown
