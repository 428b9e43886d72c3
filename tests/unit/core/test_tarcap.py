"""core.tarcap: a tar.gz read with its headers capped, its members counted and forgotten."""

from __future__ import annotations

import gzip
import io
import tarfile
import tracemalloc
from pathlib import Path

import pytest

from patchkit.core import tarcap
from tests.fixtures.hostile_tar import MIB, header_bomb_tar_gz


def _tar_gz(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _names(path: Path, **caps: int) -> list[str]:
    with tarcap.open_tar_gz(path) as tar:
        return [i.name for i in tarcap.capped_members(tar, **caps)]


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME])
def test_a_header_claiming_16_mib_is_refused_before_it_is_read(tmp_path: Path, kind: bytes) -> None:
    bomb = header_bomb_tar_gz(tmp_path / "b.tar.gz", 16 * MIB, kind=kind)
    tracemalloc.start()
    try:
        with pytest.raises(
            tarcap.TarRefused, match=r"a tar header record of 16777216 bytes, more than 1048576"
        ):
            _names(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * MIB  # the payload was never read into memory


def test_a_header_under_the_cap_and_a_plain_archive_read_as_usual(tmp_path: Path) -> None:
    info = tarfile.TarInfo("r/x")
    info.pax_headers = {"comment": "c" * (512 * 1024)}  # half a MiB: allowed
    path = tmp_path / "ok.tar.gz"
    with (
        gzip.GzipFile(path, "wb") as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        tar.addfile(info, io.BytesIO(b""))
        data = tarfile.TarInfo("r/y")
        data.size = 3 * MIB
        tar.addfile(data, io.BytesIO(b"y" * (3 * MIB)))
    with tarcap.open_tar_gz(path) as tar:
        got = {}
        for i in tarcap.capped_members(tar):
            f = tar.extractfile(i)
            assert f is not None
            chunks = []
            while chunk := f.read(tarcap.HEADER_CAP):
                chunks.append(chunk)
            got[i.name] = b"".join(chunks)
            assert tar.members == []  # forgotten: memory stays flat over many members
    assert got == {"r/x": b"", "r/y": b"y" * (3 * MIB)}


def test_members_and_skipped_bytes_are_capped(tmp_path: Path) -> None:
    many = _tar_gz(tmp_path / "m.tar.gz", {f"r/{i}": b"z" * 10 for i in range(12)})
    assert len(_names(many)) == 12
    with pytest.raises(tarcap.TarRefused, match="more than 10 members"):
        _names(many, members=10)
    with pytest.raises(tarcap.TarRefused, match="declare more than 0 MiB"):
        _names(many, skipped=100)


def test_a_read_past_the_cap_backwards_or_late_is_refused() -> None:
    r = tarcap.CappedReader(io.BytesIO(b"a" * 4096), 1024)
    assert r.read(1024) == b"a" * 1024
    with pytest.raises(tarcap.TarRefused, match="a tar header record of the rest of the stream"):
        r.read()
    with pytest.raises(tarcap.TarRefused, match="read backwards"):
        r.seek(0)
    late = tarcap.CappedReader(io.BytesIO(b"a"), 1024, deadline=0.0)
    with pytest.raises(tarcap.TarRefused, match="took too long"):
        late.read(1)


def test_not_a_tar_gz_is_one_of_the_errors_it_names(tmp_path: Path) -> None:
    for body in (b"not gzip at all", gzip.compress(b"x" * 700)):
        p = tmp_path / "bad.tar.gz"
        p.write_bytes(body)
        with pytest.raises(tarcap.NOT_A_TAR_GZ):
            _names(p)
    truncated = _tar_gz(tmp_path / "t.tar.gz", {"r/a": bytes(range(256)) * 400})
    truncated.write_bytes(truncated.read_bytes()[:60])
    with pytest.raises(tarcap.NOT_A_TAR_GZ), tarcap.open_tar_gz(truncated) as tar:
        for i in tarcap.capped_members(tar):
            f = tar.extractfile(i)
            assert f is not None
            while f.read(tarcap.HEADER_CAP):
                pass
