"""The build's last check on the staged bin/: ELF search paths (crafted files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.builder.pipeline import _checked_runpaths
from patchkit.core.errors import BuildError
from tests.fixtures.elf import make_elf


def test_bad_runpath_fails_naming_file_and_entry(tmp_path: Path) -> None:
    (tmp_path / "libggml.so").write_bytes(make_elf(runpath="$ORIGIN"))
    (tmp_path / "llama-cli").write_bytes(make_elf(runpath="$ORIGIN:"))
    called: list[Path] = []
    check = _checked_runpaths(lambda d: called.append(d) or ())
    with pytest.raises(BuildError) as e:
        check(tmp_path)
    assert e.value.exit_code == 6
    assert e.value.message.startswith("bin/llama-cli: RUNPATH entry '': empty entry")
    assert called == []  # the PE edits never run on a refused output


def test_good_files_pass_and_the_next_step_runs(tmp_path: Path) -> None:
    (tmp_path / "libggml.so").write_bytes(make_elf(runpath=None))
    (tmp_path / "llama-cli").write_bytes(make_elf(runpath="$ORIGIN"))
    (tmp_path / "README").write_text("not a binary")
    called: list[Path] = []
    assert _checked_runpaths(lambda d: called.append(d) or ())(tmp_path) == ()
    assert called == [tmp_path]
    assert _checked_runpaths(None)(tmp_path) == ()


def test_malformed_elf_fails(tmp_path: Path) -> None:
    (tmp_path / "libx.so").write_bytes(make_elf(runpath="$ORIGIN")[:90])
    with pytest.raises(
        BuildError, match=r"^bin/libx.so: cannot read its dynamic section or imports: malformed ELF"
    ):
        _checked_runpaths(None)(tmp_path)
