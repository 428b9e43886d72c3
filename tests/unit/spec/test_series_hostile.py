"""Hostile series and patch files: refused when the series is loaded (exit 5, one line),
before anything is applied, and nothing outside patches/ is read or written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from patchkit.core.errors import PatchError
from patchkit.core.fs import sha256_bytes, sha256_file
from patchkit.spec import series as series_mod
from patchkit.spec.series import load_series, rehash_series
from tests.fixtures.project import GUARD_HEADER, assert_error, invoke

HEADER = GUARD_HEADER.format(when="..")
SECRET = "TOP-SECRET-HOST-FILE-CONTENT"


def link_patch(path: str, target: str) -> str:
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 120000\nindex 0000000..1234567\n"
        f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{target}\n"
        "\\ No newline at end of file\n"
    )


def license_to_link(target: str) -> str:
    """A tracked file (LICENSE, which the output stage copies) turned into a symlink."""
    return (
        "diff --git a/LICENSE b/LICENSE\ndeleted file mode 100644\nindex 1111111..0000000\n"
        "--- a/LICENSE\n+++ /dev/null\n@@ -1 +0,0 @@\n-MIT License\n" + link_patch("LICENSE", target)
    )


def set_series(project: Path, *files: tuple[str, str]) -> None:
    patches = project / "patches"
    lines = []
    for name, text in files:
        (patches / name).write_text(HEADER + text)
        lines.append(f"{name} sha256={sha256_file(patches / name)}")
    (patches / "series").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (license_to_link("/etc/passwd"), "LICENSE: makes a symlink to '/etc/passwd', an absolute target"),
        (license_to_link("../../../../../../etc/shadow"), "a target above the worktree"),
        (link_patch("src/evil", "../../x"), "src/evil: makes a symlink to '../../x'"),
        (link_patch("a/../x", "y"), "the path 'a/../x' has an empty, '.' or '..' component"),
        (
            "diff --git a/.git/hooks/pre-commit b/.git/hooks/pre-commit\nnew file mode 100755\n"
            "--- /dev/null\n+++ b/.git/hooks/pre-commit\n@@ -0,0 +1 @@\n+rm -rf ~\n",
            "is inside .git",
        ),
        # a traditional diff (no diff --git line) is read as git apply reads it: checked the same
        (
            "--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n",
            "the path '../x' has an empty, '.' or '..' component",
        ),
        ("--- /dev/null\n+++ b/.git/hooks/post-checkout\n@@ -0,0 +1 @@\n+rm -rf ~\n", "is inside .git"),
    ],
)
def test_unsafe_patches_are_refused_at_load_exit_5(
    project: Path, tmp_path: Path, body: str, needle: str
) -> None:
    set_series(project, ("0001-evil.patch", body))
    for args in (["list"], ["series"], ["build", "fixture", "--out", str(tmp_path / "out")]):
        r = invoke(project, *args)
        assert_error(r, 5, "patches/0001-evil.patch: refused:", needle, "patches are data")
    assert not (tmp_path / "out").exists()


def test_a_patch_file_linked_to_a_host_file_is_not_read(project: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(f"Subject: {SECRET}\n")
    link = project / "patches" / "0002-link.patch"
    link.symlink_to(secret)
    with (project / "patches" / "series").open("a") as f:
        f.write(f"0002-link.patch sha256={sha256_file(secret)}\n")
    r = invoke(project, "series")
    assert_error(r, 5, "0002-link.patch", "outside")
    assert SECRET not in r.output


@pytest.mark.parametrize(
    "name", ["sub/x.patch", "..\\x.patch", ".hidden.patch", "C:x.patch", "../../etc/passwd"]
)
def test_series_lines_naming_other_folders_are_refused(tmp_path: Path, name: str) -> None:
    d = tmp_path / "patches"
    d.mkdir()
    (d / "series").write_text(f"{name} sha256={'0' * 64}\n")
    with pytest.raises(PatchError, match="must be a file in patches/"):
        load_series(d)
    with pytest.raises(PatchError, match="must be a file in patches/"):
        rehash_series(d)
    assert (d / "series").read_text() == f"{name} sha256={'0' * 64}\n"  # nothing rewritten


def test_non_utf8_series_is_one_line_also_for_rehash(project: Path) -> None:
    (project / "patches" / "series").write_bytes(b"# ok\n0001-zero-nbytes-guard.patch \xff\xfe\n")
    for args in (["series"], ["series", "--rehash"], ["list"]):
        assert_error(invoke(project, *args), 5, "series:2: not UTF-8 text (byte 0xff)")
    assert (project / "patches" / "series").read_bytes().endswith(b"\xff\xfe\n")


def test_series_that_is_a_folder_a_fifo_or_huge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "patches"
    (d / "series").mkdir(parents=True)
    with pytest.raises(PatchError, match="is not a regular file"):
        load_series(d)
    os.rmdir(d / "series")
    if hasattr(os, "mkfifo"):
        os.mkfifo(d / "series")  # reading it would block forever
        with pytest.raises(PatchError, match="is not a regular file"):
            load_series(d)
        os.unlink(d / "series")
    monkeypatch.setattr(series_mod, "SERIES_MAX", 64)
    (d / "series").write_text("# " + "x" * 100 + "\n")
    with pytest.raises(PatchError, match="larger than 64 bytes"):
        load_series(d)


def test_oversized_and_unreadable_patch_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "patches"
    d.mkdir()
    data = (HEADER + "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n").encode()
    (d / "0001-x.patch").write_bytes(data)
    (d / "series").write_text(f"0001-x.patch sha256={sha256_bytes(data)}\n")
    assert load_series(d).patches[0].read_verified() == data
    monkeypatch.setattr(series_mod, "PATCH_MAX", 16)
    with pytest.raises(PatchError, match="0001-x.patch is larger than 16 bytes"):
        load_series(d)
    monkeypatch.undo()

    real_open = os.open
    denied_suffix = ".patch"

    def denied(path: object, *a: object, **kw: object) -> int:
        if str(path).endswith(denied_suffix):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", denied)
    with pytest.raises(PatchError, match="cannot read patches/0001-x.patch: Permission denied"):
        load_series(d)
    denied_suffix = "series"
    with pytest.raises(PatchError, match="cannot read .*/patches/series: Permission denied"):
        load_series(d)


def test_a_patch_turned_into_a_link_after_loading_is_caught(tmp_path: Path) -> None:
    d = tmp_path / "patches"
    d.mkdir()
    data = (HEADER + "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n").encode()
    (d / "0001-x.patch").write_bytes(data)
    (d / "series").write_text(f"0001-x.patch sha256={sha256_bytes(data)}\n")
    (patch,) = load_series(d).patches
    outside = tmp_path / "outside.patch"
    outside.write_bytes(data)  # same bytes, so only the link check can tell
    (d / "0001-x.patch").unlink()
    (d / "0001-x.patch").symlink_to(outside)
    with pytest.raises(PatchError, match="outside"):
        patch.read_verified()
