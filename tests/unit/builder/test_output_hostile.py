"""The output folder: only a folder provably patchkit's is ever replaced (and then only
what patchkit wrote there); copies come only from inside their roots; a full disk or a
read-only folder is one line naming the out dir."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest

from patchkit.builder import output
from patchkit.builder.cmake import Artifact
from patchkit.builder.problems import OutDirClash, OutDirRefused
from patchkit.cli.problems import render, said
from patchkit.core.errors import BuildError, ConfigError
from patchkit.core.fs import Foreign, ForeignEntry
from patchkit.spec.buildinfo import BuildInfo
from tests.fixtures.buildinfo import build_info_json

INFO = BuildInfo.from_json(build_info_json())
posix_only = pytest.mark.skipif(os.name != "posix", reason="symlinks")


def artifact(tmp_path: Path, name: str = "llama-cli", data: bytes = b"\x7fELF bin") -> Artifact:
    p = tmp_path / "build" / "bin" / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return Artifact(target=name, type="EXECUTABLE", path=p)


def ours(tmp_path: Path) -> Path:
    """A real previous output: what write_output itself wrote."""
    out = tmp_path / "out" / "cpu-rpc"
    output.write_output(out, [artifact(tmp_path)], None, INFO, build_dir=tmp_path / "build")
    return out


def snapshot(folder: Path) -> dict[str, bytes | str]:
    got: dict[str, bytes | str] = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        got[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else (p.read_bytes() if p.is_file() else "dir")
    return got


def refused(tmp_path: Path, out: Path, *needles: str) -> None:
    before = snapshot(out)
    with pytest.raises(ConfigError) as e:
        output.write_output(out, [artifact(tmp_path)], None, INFO, build_dir=tmp_path / "build")
    assert e.value.exit_code == 2 and "\n" not in said(e.value)
    assert isinstance(e.value.problem, (OutDirRefused, ForeignEntry)) and e.value.problem.folder == out
    for n in needles:
        assert n in said(e.value), said(e.value)
    assert snapshot(out) == before  # untouched
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []  # no temp left


def refused_foreign(tmp_path: Path, out: Path, entry: Foreign) -> None:
    """Refused as a folder holding ``entry``, which patchkit did not write (the words are
    the CLI's: tests/unit/cli/test_problems.py)."""
    before = snapshot(out)
    with pytest.raises(ConfigError) as e:
        output.write_output(out, [artifact(tmp_path)], None, INFO, build_dir=tmp_path / "build")
    assert e.value.exit_code == 2
    assert e.value.problem == ForeignEntry(folder=out, entry=entry, owner="build")
    assert snapshot(out) == before  # untouched
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []  # no temp left


def test_user_files_with_an_empty_build_info_are_not_taken_for_ours(tmp_path: Path) -> None:
    out = tmp_path / "home"
    (out / "photos").mkdir(parents=True)
    (out / "photos" / "cat.jpg").write_bytes(b"meow")
    (out / "build-info.json").write_text("{}")
    refused(tmp_path, out, "is not a patchkit output dir", "unknown build-info schema")


@pytest.mark.parametrize(
    "text",
    ["", "not json", "[]", '{"schema": 1}', "[" * 100_000, '{"schema": 1, "recipe": 3}'],
    ids=["empty", "text", "list", "schema-only", "deep", "wrong-type"],
)
def test_any_build_info_patchkit_did_not_write_is_refused(tmp_path: Path, text: str) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "build-info.json").write_text(text)
    (out / "notes.txt").write_text("keep")
    refused(tmp_path, out, "is not a patchkit output dir")


def test_a_real_output_plus_a_user_file_stops_the_build(tmp_path: Path) -> None:
    out = ours(tmp_path)
    (out / "notes.txt").write_text("mine")
    refused_foreign(tmp_path, out, Foreign("notes.txt"))


def test_an_extra_file_in_bin_stops_the_build(tmp_path: Path) -> None:
    out = ours(tmp_path)
    (out / "bin" / "my-tool").write_bytes(b"mine")
    refused_foreign(tmp_path, out, Foreign("bin/my-tool", why="not an artifact build-info.json lists"))


@posix_only
def test_a_symlinked_bin_or_license_stops_the_build(tmp_path: Path) -> None:
    out = ours(tmp_path)
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "a").write_text("keep")
    shutil.rmtree(out / "bin")
    (out / "bin").symlink_to(precious)
    refused_foreign(tmp_path, out, Foreign("bin", link=True))
    assert (precious / "a").read_text() == "keep"
    (out / "bin").unlink()
    (out / "LICENSE").symlink_to(precious / "a")
    refused_foreign(tmp_path, out, Foreign("LICENSE", link=True))


@posix_only
def test_a_symlinked_build_info_or_artifact_stops_the_build(tmp_path: Path) -> None:
    out = ours(tmp_path)
    elsewhere = tmp_path / "bi.json"
    shutil.move(out / "build-info.json", elsewhere)
    (out / "build-info.json").symlink_to(elsewhere)
    refused_foreign(tmp_path, out, Foreign("build-info.json", why="not a plain file"))
    (out / "build-info.json").unlink()
    shutil.move(elsewhere, out / "build-info.json")
    (out / "bin" / "llama-cli").unlink()
    (out / "bin" / "llama-cli").symlink_to(elsewhere)
    refused_foreign(tmp_path, out, Foreign("bin/llama-cli", why="not a plain file"))


def test_a_file_where_the_folder_should_be(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.write_text("a file")
    with pytest.raises(ConfigError) as e:
        output.write_output(out, [artifact(tmp_path)], None, INFO)
    assert e.value.problem == OutDirRefused(folder=out, found="not-a-folder")
    assert out.read_text() == "a file"


def test_only_what_patchkit_wrote_is_replaced(tmp_path: Path) -> None:
    out = ours(tmp_path)
    (out / "LICENSE").write_text("old licence")
    output.write_output(out, [artifact(tmp_path, data=b"new")], None, INFO, build_dir=tmp_path / "build")
    assert sorted(snapshot(out)) == ["bin", "bin/llama-cli", "build-info.json"]
    assert (out / "bin" / "llama-cli").read_bytes() == b"new"


@pytest.mark.parametrize("where", ["cache", "cache/work/x-1/src", "cache/work/x-1/build/out", "."])
def test_an_out_dir_inside_or_around_the_cache_is_refused(tmp_path: Path, where: str) -> None:
    cache = tmp_path / "cache"
    (cache / "work" / "x-1" / "build").mkdir(parents=True)
    with pytest.raises(ConfigError) as e:
        output.check_out_dir(tmp_path / where, cache)
    assert e.value.exit_code == 2
    assert e.value.problem == OutDirClash(
        out=tmp_path / where, cache=cache.resolve(), holds_cache=where == "."
    )
    assert sorted(os.listdir(cache / "work" / "x-1")) == ["build"]


@posix_only
def test_an_out_dir_reaching_the_cache_through_a_link_is_refused(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "work").mkdir(parents=True)
    (tmp_path / "link").symlink_to(cache / "work")
    with pytest.raises(ConfigError) as e:
        output.check_out_dir(tmp_path / "link" / "out", cache)
    assert e.value.problem == OutDirClash(
        out=tmp_path / "link" / "out", cache=cache.resolve(), holds_cache=False
    )


@posix_only
def test_an_artifact_or_licence_linked_out_of_its_root_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("TOP-SECRET")
    a = artifact(tmp_path)
    a.path.unlink()
    a.path.symlink_to(secret)
    out = tmp_path / "out"
    with pytest.raises(BuildError, match="artifact: .* resolves to .*secret, outside .*build"):
        output.write_output(out, [a], None, INFO, build_dir=tmp_path / "build")
    assert not out.exists() and os.listdir(tmp_path).count("out") == 0
    assert secret.read_text() == "TOP-SECRET"
    src = tmp_path / "src"
    src.mkdir()
    (src / "LICENSE").symlink_to(secret)
    with pytest.raises(BuildError, match="LICENSE: .* outside .*src"):
        output.write_output(
            out,
            [artifact(tmp_path, "llama-server")],
            src / "LICENSE",
            INFO,
            build_dir=tmp_path / "build",
            source_dir=src,
        )
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []


@posix_only
def test_a_planted_temp_name_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    out = tmp_path / "o" / "r"
    out.parent.mkdir()
    for name in (f".r.tmp-{os.getpid()}", f".r.old-{os.getpid()}"):
        (out.parent / name).symlink_to(victim)  # the names an older patchkit used
    output.write_output(out, [artifact(tmp_path)], None, INFO, build_dir=tmp_path / "build")
    output.write_output(out, [artifact(tmp_path)], None, INFO, build_dir=tmp_path / "build")
    assert os.listdir(victim) == []
    assert (out / "bin" / "llama-cli").is_file()


def test_a_full_disk_names_the_out_dir_not_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = ours(tmp_path)
    before = snapshot(out)
    a = artifact(tmp_path, data=b"bigger")

    def full(src: object, dst: object, **kw: object) -> None:
        # what shutil's sendfile copy raises: the *source* (in the cache) as filename
        raise OSError(errno.ENOSPC, "No space left on device", str(src), None, str(dst))

    monkeypatch.setattr(output.shutil, "copy2", full)
    with pytest.raises(BuildError) as e:
        output.write_output(out, [a], None, INFO, build_dir=tmp_path / "build")
    msg = e.value.message
    assert e.value.exit_code == 6 and "\n" not in msg
    assert msg.startswith(f"no space left on the file system of {out} (mounted at ")
    assert "llama-cli" in msg and str(a.path) not in msg
    assert snapshot(out) == before  # the previous output stays
    assert sorted(p.name for p in out.parent.iterdir()) == ["cpu-rpc"]


def test_a_full_disk_while_writing_build_info(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"

    def full(*a: object, **kw: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(output, "write_build_info", full)
    with pytest.raises(
        BuildError, match=f"no space left on the file system of {out} .* while writing .*build-info.json"
    ):
        output.write_output(out, [artifact(tmp_path)], None, INFO, build_dir=tmp_path / "build")
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_a_read_only_parent_is_a_one_line_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "ro" / "out"

    def denied(*a: object, **kw: object) -> str:
        raise PermissionError(errno.EACCES, "Permission denied", str(out.parent))

    monkeypatch.setattr(output.tempfile, "mkdtemp", denied)
    with pytest.raises(ConfigError) as e:
        output.write_output(out, [artifact(tmp_path)], None, INFO, build_dir=tmp_path / "build")
    assert e.value.exit_code == 2 and "Permission denied" in said(e.value)
    assert "--out" in render(e.value)[1]  # the advice is the CLI's


def test_the_replaced_folder_keeps_its_permissions(tmp_path: Path) -> None:
    out = ours(tmp_path)
    os.chmod(out, 0o750)
    output.write_output(out, [artifact(tmp_path)], None, INFO, build_dir=tmp_path / "build")
    if os.name == "posix":
        assert out.stat().st_mode & 0o777 == 0o750
    json.loads((out / "build-info.json").read_text())
