"""`release` and `verify` refuse an ELF that searches outside $ORIGIN (crafted binaries)."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.core.errors import ReleaseError
from patchkit.release import contents as release_contents
from patchkit.release.verify import verify_dir
from tests.fixtures.elf import make_elf, put_artifact
from tests.fixtures.release import do_release, make_build

BAD = [
    ("$ORIGIN:", "RUNPATH entry '': empty entry (the loader reads it as the current directory)", None),
    (
        "$ORIGIN:/home/ci/venv/lib/python3.11/site-packages/nvidia/cu13/lib",
        "RUNPATH entry '/home/ci/venv/lib/python3.11/site-packages/nvidia/cu13/lib': absolute path",
        None,
    ),
    (None, "RPATH entry 'lib': relative entry", "lib"),
]


@pytest.mark.parametrize(("runpath", "message", "rpath"), BAD)
def test_release_refuses_a_bad_search_path(
    tmp_path: Path, runpath: str | None, message: str, rpath: str | None
) -> None:
    build = make_build(tmp_path)
    put_artifact(build, "bin/libggml.so", make_elf(runpath=runpath, rpath=rpath, soname="libggml.so"))
    with pytest.raises(ReleaseError) as e:
        do_release(build, tmp_path / "dist")
    assert e.value.message.startswith(f"bin/libggml.so: {message}")
    assert "\n" not in e.value.message
    assert e.value.exit_code == 12
    assert not (tmp_path / "dist").exists()


def test_release_refuses_a_malformed_elf(tmp_path: Path) -> None:
    build = make_build(tmp_path)
    put_artifact(build, "bin/llama-cli", b"\x7fELF\x02\x01\x01" + b"\xff" * 200)
    with pytest.raises(
        ReleaseError, match=r"^bin/llama-cli: cannot read its ELF dynamic section \(malformed ELF: "
    ):
        do_release(build, tmp_path / "dist")


def test_release_accepts_origin_only_and_no_runpath(tmp_path: Path) -> None:
    build = make_build(tmp_path)
    put_artifact(build, "bin/libggml.so", make_elf(runpath=None, soname="libggml.so"))
    put_artifact(build, "bin/llama-cli", make_elf(runpath="$ORIGIN", needed=("libllama.so", "libc.so.6")))
    r = do_release(build, tmp_path / "dist")
    assert verify_dir(tmp_path / "dist").differences == ()
    assert r.archive.is_file()


def _no_import_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Release without the import check too (release.check_release), so the archive is packed."""
    from patchkit.release import release
    from patchkit.release.imports import check_imports

    monkeypatch.setattr(
        release,
        "check_release",
        lambda *a, **kw: release.ReleaseCheck(
            report=check_imports([], os_name="linux", files=[]), runtime=None
        ),
    )


def _runpath_diffs(diffs: tuple[str, ...]) -> list[str]:
    """verify's lines but the import check's (tests/unit/release/test_imports.py)."""
    return [d for d in diffs if ": import check: " not in d and "the manifest's imports" not in d]


@pytest.mark.parametrize("windows", [False, True])
@pytest.mark.parametrize(("runpath", "message", "rpath"), BAD)
def test_verify_flags_a_bad_search_path(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    windows: bool,
    runpath: str | None,
    message: str,
    rpath: str | None,
) -> None:
    """An archive that is consistent in every other way (sums, manifest) but ships a binary
    with a bad RUNPATH, as an older patchkit or a hand-made one would have written it."""
    build = make_build(
        tmp_path, name="win" if windows else "cpu-rpc", os_name="windows" if windows else "linux"
    )
    rel = "bin/ggml.dll" if windows else "bin/libggml.so"
    put_artifact(build, rel, make_elf(runpath=runpath, rpath=rpath))
    monkeypatch.setattr(release_contents, "_refuse_bad_runpath", lambda path, rel: None)
    _no_import_check(monkeypatch)
    r = do_release(build, tmp_path / "dist")
    diffs = _runpath_diffs(verify_dir(tmp_path / "dist").differences)
    assert len(diffs) == 1, diffs
    assert diffs[0].startswith(f"{r.archive.name}: {rel}: {message}")


def test_verify_flags_a_malformed_elf_member(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build = make_build(tmp_path)
    put_artifact(build, "bin/llama-cli", make_elf(runpath="$ORIGIN")[:100])  # cut short
    monkeypatch.setattr(release_contents, "_refuse_bad_runpath", lambda path, rel: None)
    _no_import_check(monkeypatch)
    r = do_release(build, tmp_path / "dist")
    (diff,) = _runpath_diffs(verify_dir(tmp_path / "dist").differences)
    assert diff.startswith(
        f"{r.archive.name}: bin/llama-cli: cannot read its ELF dynamic section (malformed ELF: "
    )
