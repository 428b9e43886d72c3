"""`patchkit series`: verify the series' hashes; --rehash after editing a patch on purpose."""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.project import assert_error, invoke


def test_series_verifies_and_rehash_records_an_edit(project: Path) -> None:
    r = invoke(project, "series")
    assert r.exit_code == 0, r.output
    assert "✓ 0001-zero-nbytes-guard.patch: sha256 ok, pending, when .." in r.output
    assert "1 patch(es) verified" in r.output
    patch = project / "patches" / "0001-zero-nbytes-guard.patch"
    patch.write_text(patch.read_text().replace("zero-byte views", "zero byte views"))
    assert_error(invoke(project, "series"), 5, "sha256 is", "the series records")
    before = (project / "patches" / "series").read_text()
    r = invoke(project, "series", "--rehash")
    assert r.exit_code == 0, r.output
    assert "0001-zero-nbytes-guard.patch: " in r.output and " -> " in r.output
    after = (project / "patches" / "series").read_text()
    assert after != before and after.startswith("# fixture series\n")  # comments kept
    assert invoke(project, "series").exit_code == 0


def test_series_outside_a_project_is_a_usage_error(tmp_path: Path) -> None:
    r = invoke(tmp_path, "series")
    assert r.exit_code == 2 and "is not a patchkit project" in r.output
