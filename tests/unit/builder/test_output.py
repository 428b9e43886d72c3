"""The output dir is swapped in whole, and a failed swap keeps the previous output."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from patchkit.builder import output
from patchkit.builder.cmake import Artifact
from patchkit.builder.problems import OutDirBusy
from patchkit.core.errors import BuildError
from patchkit.spec.buildinfo import BuildInfo, PeEditRecord, StackSizes
from tests.fixtures.buildinfo import build_info_json


def info(version: str) -> BuildInfo:
    return BuildInfo.from_json(build_info_json(patchkit_version=version))


def artifact(tmp_path: Path, name: str, data: bytes) -> Artifact:
    p = tmp_path / "build" / "bin" / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return Artifact(target=name, type="EXECUTABLE", path=p)


def test_output_written_and_replaced(tmp_path: Path) -> None:
    out = tmp_path / "out" / "r"
    output.write_output(out, [artifact(tmp_path, "a", b"one")], None, info("1"))
    written = output.write_output(out, [artifact(tmp_path, "a", b"two")], None, info("2"))
    assert (out / "bin" / "a").read_bytes() == b"two"
    assert json.loads((out / "build-info.json").read_text())["patchkit_version"] == "2"
    assert written.artifacts[0].size == 3
    assert sorted(p.name for p in out.parent.iterdir()) == ["r"]  # no temp or old dirs left


def test_failed_swap_keeps_the_previous_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out" / "r"
    output.write_output(out, [artifact(tmp_path, "a", b"one")], None, info("1"))
    real_replace = os.replace
    calls = []

    def flaky(src: os.PathLike[str], dst: os.PathLike[str]) -> None:
        calls.append((Path(src).name, Path(dst).name))
        if Path(src).name.startswith(".r.tmp-"):
            raise PermissionError(13, "Access is denied")
        real_replace(src, dst)

    monkeypatch.setattr(output.os, "replace", flaky)
    with pytest.raises(BuildError) as e:
        output.write_output(out, [artifact(tmp_path, "a", b"two")], None, info("2"))
    assert e.value.problem == OutDirBusy(out=out, cause="Access is denied")
    assert (out / "bin" / "a").read_bytes() == b"one"
    assert json.loads((out / "build-info.json").read_text())["patchkit_version"] == "1"
    assert sorted(p.name for p in out.parent.iterdir()) == ["r"]


def test_post_edits_copies_before_hashing(tmp_path: Path) -> None:
    out = tmp_path / "out" / "r"

    sizes = StackSizes(stack_reserve=1 << 21, stack_commit=4096)
    edit = PeEditRecord(file="bin/a", before=sizes, after=sizes)

    def post(bin_dir: Path) -> tuple[PeEditRecord, ...]:
        (bin_dir / "a").write_bytes(b"edited")
        return (edit,)

    written = output.write_output(out, [artifact(tmp_path, "a", b"orig")], None, info("1"), post=post)
    from patchkit.core.fs import sha256_bytes

    assert written.artifacts[0].sha256 == sha256_bytes(b"edited")
    assert json.loads((out / "build-info.json").read_text())["pe_edits"] == [edit.to_json()]
    assert (tmp_path / "build" / "bin" / "a").read_bytes() == b"orig"  # the build dir untouched
