"""What patchkit reads back after a build step that could have planted files (a rebuild's
sandboxed configure and build write the build dir and the worktree; patchkit reads them
unsandboxed): a symbolic link swapped in is never followed to a host file, a FIFO never
blocks patchkit, and a file is read only up to a cap (core.fs.read_regular). Each place
that reads such a file, with a link and with a FIFO there."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from patchkit.builder import cmake as cm
from patchkit.builder import output
from patchkit.builder.cmake import Artifact
from patchkit.builder.compcache.stats import ninja_entries, read_ccache_stats_log
from patchkit.core import fs
from patchkit.spec.buildinfo import BuildInfo
from patchkit.spec.rpcproto import RPC_HEADER, ProtoVersion, read_rpc_protocol
from tests.fixtures.buildinfo import build_info_json

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs and symlinks (POSIX)")

SECRET = "host secret 1f3a"


class Blocked(BaseException):
    """Not an OSError (nor an Exception): no ``except`` in the code under test swallows it."""


@pytest.fixture(autouse=True)
def _no_hang() -> Iterator[None]:
    """A read that blocks on a FIFO fails the test in seconds instead of hanging it."""

    def blocked(signum: int, frame: object) -> None:
        raise Blocked("blocked: a FIFO was opened or read")

    old = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(5)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A host file outside every folder a build writes."""
    p = tmp_path / "host" / "secret.txt"
    p.parent.mkdir()
    p.write_text(SECRET + "\n")
    return p


def plant(path: Path, kind: str, target: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "link":
        path.symlink_to(target)
    else:
        os.mkfifo(path)


KINDS = ["link", "fifo"]


# -- the helper itself ----------------------------------------------------------------------


def test_read_regular_reads_a_regular_file_up_to_its_cap(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")
    assert fs.read_regular(p, limit=10) == b"0123456789"
    with pytest.raises(OSError, match="larger than 4 bytes"):
        fs.read_regular(p, limit=4)
    assert fs.read_regular(p, limit=4, part="head") == b"0123"
    assert fs.read_regular(p, limit=4, part="tail") == b"6789"


@pytest.mark.parametrize("kind", KINDS)
def test_read_regular_refuses_a_link_and_a_fifo(tmp_path: Path, secret: Path, kind: str) -> None:
    p = tmp_path / "planted"
    plant(p, kind, secret)
    with pytest.raises(OSError) as e:
        fs.read_regular(p, limit=1 << 20)
    assert SECRET not in str(e.value)


def test_read_regular_refuses_a_folder_and_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        fs.read_regular(tmp_path, limit=10)
    with pytest.raises(FileNotFoundError):
        fs.read_regular(tmp_path / "missing", limit=10)


# -- the build log's tail (shown when a configure or build fails) ---------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_the_log_tail_never_shows_a_host_file(tmp_path: Path, secret: Path, kind: str) -> None:
    log = tmp_path / "work" / "build.log"
    plant(log, kind, secret)
    assert cm._tail(log) == ""


def test_the_log_tail_is_its_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text("".join(f"line {i}\n" for i in range(200_000)))  # ~2.3 MB
    assert cm._tail(log, 3) == "line 199997\nline 199998\nline 199999"


# -- the codemodel record beside the File API reply ---------------------------------------------


def _reply(build: Path) -> Path:
    reply = build / ".cmake" / "api" / "v1" / "reply"
    reply.mkdir(parents=True)
    (reply / "index-2026-01-01T00-00-00-0000.json").write_text("{}")
    return reply


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_codemodel_record_is_not_read(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = tmp_path / "build"
    reply = _reply(build)
    key = cm._reply_key(reply)
    host = tmp_path / "host" / "record.json"
    host.parent.mkdir()
    forged = cm.CodeModel(targets={}, compilers={"cmake": "forged"})
    host.write_text(json.dumps({"reply": key, "model": forged.to_json()}))
    plant(build / cm._CODEMODEL, kind, host)
    parsed = cm.CodeModel(targets={}, compilers={"cmake": "parsed"})
    monkeypatch.setattr(cm, "_load_index", lambda r: r)
    monkeypatch.setattr(cm, "_from_index", lambda index: parsed)
    assert cm.read_codemodel(build) == parsed


def test_the_codemodel_record_is_still_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build = tmp_path / "build"
    reply = _reply(build)
    kept = cm.CodeModel(targets={}, compilers={"cmake": "kept"})
    (build / cm._CODEMODEL).write_text(json.dumps({"reply": cm._reply_key(reply), "model": kept.to_json()}))
    monkeypatch.setattr(cm, "_load_index", lambda r: pytest.fail("the reply was parsed again"))
    assert cm.read_codemodel(build) == kept


# -- ccache's stats log and ninja's log -------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_ccache_stats_log_counts_nothing(tmp_path: Path, kind: str) -> None:
    host = tmp_path / "host-stats.log"
    host.write_text("# /x.c\ncache_miss\nlocal_storage_miss\n" * 50)
    log = tmp_path / "work" / "ccache-stats.log"
    plant(log, kind, host)
    counts = read_ccache_stats_log(log)
    assert counts == read_ccache_stats_log(tmp_path / "missing.log")


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_ninja_log_gives_no_durations(tmp_path: Path, kind: str) -> None:
    host = tmp_path / "host-ninja.log"
    host.write_text("# ninja log v5\n0\t1500\t0\tobj/a.c.o\tdeadbeef\n")
    assert ninja_entries(tmp_path, 0) == []  # none there
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / ".ninja_log").write_text(host.read_text())
    assert ninja_entries(tmp_path / "real", 0) == [1.5]
    plant(tmp_path / "build" / ".ninja_log", kind, host)
    assert ninja_entries(tmp_path / "build", 0) == []


# -- ggml-rpc.h in the worktree -------------------------------------------------------------------

HEADER = "#define RPC_PROTO_MAJOR_VERSION 3\n#define RPC_PROTO_MINOR_VERSION 0\n#define RPC_PROTO_PATCH_VERSION 0\n"


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_rpc_header_is_not_read(tmp_path: Path, kind: str) -> None:
    host = tmp_path / "host-ggml-rpc.h"
    host.write_text(HEADER)
    src = tmp_path / "src"
    plant(src / RPC_HEADER, kind, host)
    assert read_rpc_protocol(src) is None
    (src / RPC_HEADER).unlink()
    (src / RPC_HEADER).write_text(HEADER)
    assert read_rpc_protocol(src) == ProtoVersion(major=3, minor=0, patch=0)


# -- artifacts that are links -------------------------------------------------------------------


def test_an_artifact_linked_inside_the_build_dir_is_copied_under_its_own_name(tmp_path: Path) -> None:
    """A link among the artifacts (to another file of the build dir) is copied as a plain
    file under the artifact's name, the name build-info lists and programs look for; it
    used to be copied under its target's name, and dropped when that was an artifact too."""
    bin_dir = tmp_path / "build" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "ggml-rpc-server").write_bytes(b"\x7fELF server")
    (bin_dir / "llama-server").symlink_to("ggml-rpc-server")
    arts = [
        Artifact(target="ggml-rpc-server", type="EXECUTABLE", path=bin_dir / "ggml-rpc-server"),
        Artifact(target="llama-server", type="EXECUTABLE", path=bin_dir / "llama-server"),
    ]
    out = tmp_path / "out"
    info = output.write_output(
        out, arts, None, BuildInfo.from_json(build_info_json()), build_dir=tmp_path / "build"
    )
    assert sorted(a.path for a in info.artifacts) == ["bin/ggml-rpc-server", "bin/llama-server"]
    for name in ("ggml-rpc-server", "llama-server"):
        assert not (out / "bin" / name).is_symlink()
        assert (out / "bin" / name).read_bytes() == b"\x7fELF server"


def test_a_fifo_artifact_is_refused(tmp_path: Path) -> None:
    bin_dir = tmp_path / "build" / "bin"
    bin_dir.mkdir(parents=True)
    os.mkfifo(bin_dir / "llama-server")
    arts = [Artifact(target="llama-server", type="EXECUTABLE", path=bin_dir / "llama-server")]
    from patchkit.core.errors import BuildError

    with pytest.raises(BuildError, match="not a regular file"):
        output.write_output(
            tmp_path / "out", arts, None, BuildInfo.from_json(build_info_json()), build_dir=tmp_path / "build"
        )
    assert not (tmp_path / "out").exists()


# -- the include dirs read back for the prefix maps ---------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_reply_file_gives_no_include_maps(tmp_path: Path, kind: str) -> None:
    from patchkit.builder import repro

    root = tmp_path / "work"
    build = root / "build"
    reply = build / ".cmake" / "api" / "v1" / "reply"
    reply.mkdir(parents=True)
    target = {"compileGroups": [{"includes": [{"path": f"{root}/src/common/../vendor"}]}]}
    (reply / "target-a.json").write_text(json.dumps(target))
    assert repro.include_maps(root, build) == [
        f"-ffile-prefix-map={root}/src/common/../vendor/=../src/vendor/"
    ]
    host = tmp_path / "host-target.json"
    host.write_text(json.dumps(target))
    plant(reply / "target-a.json", kind, host)
    assert repro.include_maps(root, build) == []
