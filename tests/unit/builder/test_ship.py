"""The output stage's steps on the staged bin/: a shipping refusal is exit 6 before the PE
edits run; warnings are logged; a clean bin/ passes (crafted ELF files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.binary.shipping import ShippingFinding
from patchkit.builder import ship
from patchkit.core.errors import BuildError
from tests.fixtures.elf import make_elf


class _Recipe:
    windows = None


def test_bad_runpath_fails_with_exit_6(tmp_path: Path) -> None:
    (tmp_path / "libggml.so").write_bytes(make_elf(runpath="$ORIGIN"))
    (tmp_path / "llama-cli").write_bytes(make_elf(runpath="$ORIGIN:"))
    with pytest.raises(BuildError) as e:
        ship.post_output(_Recipe())(tmp_path)  # type: ignore[arg-type]
    assert e.value.exit_code == 6
    assert e.value.message.startswith("bin/llama-cli: RUNPATH entry '': empty entry")
    assert "CMAKE_INSTALL_RPATH" in e.value.hint


def test_good_files_pass_with_no_edits(tmp_path: Path) -> None:
    (tmp_path / "llama-cli").write_bytes(make_elf(runpath="$ORIGIN"))
    assert ship.post_output(_Recipe())(tmp_path) == ()  # type: ignore[arg-type]


def test_warnings_are_logged_then_the_refusal_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import patchkit.binary.shipping as shipping

    found = (
        ShippingFinding(file="a.exe", message="bin/a.exe imports cudart64_12.dll (...)", refused=False),
        ShippingFinding(file="b.exe", message="bin/b.exe imports libgomp-1.dll, ...", hint="link it"),
    )
    monkeypatch.setattr(shipping, "shipping_findings", lambda d: found)
    with pytest.raises(BuildError) as e:
        ship.check_shipping(tmp_path)
    assert e.value.message == "bin/b.exe imports libgomp-1.dll, ..." and e.value.hint == "link it"
    assert "warning: bin/a.exe imports cudart64_12.dll" in capsys.readouterr().err
