"""`patchkit series`: verify the series' hashes; --rehash after editing a patch on purpose."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixtures.project import assert_error, invoke


def test_series_verifies_and_rehash_records_an_edit(project: Path) -> None:
    r = invoke(project, "series")
    assert r.exit_code == 0, r.output
    assert r.stdout == (  # the result on stdout, nothing on stderr
        "✓ 0001-zero-nbytes-guard.patch: sha256 ok, pending, when ..\n1 patch(es) verified\n"
    )
    assert r.stderr == ""
    patch = project / "patches" / "0001-zero-nbytes-guard.patch"
    patch.write_text(patch.read_text().replace("zero-byte views", "zero byte views"))
    r = invoke(project, "series")
    assert_error(r, 5, "sha256 is", "the series records")
    assert r.stdout == "" and "error: " in r.stderr
    before = (project / "patches" / "series").read_text()
    r = invoke(project, "series", "--rehash")
    assert r.exit_code == 0, r.output
    old = before.split("sha256=")[1][:12]
    assert r.stdout.splitlines()[0].startswith(f"0001-zero-nbytes-guard.patch: {old} -> ")
    assert "✓ 0001-zero-nbytes-guard.patch: sha256 ok" in r.stdout and r.stderr == ""
    after = (project / "patches" / "series").read_text()
    assert after != before and after.startswith("# fixture series\n")  # comments kept
    assert invoke(project, "series").exit_code == 0


def test_series_outside_a_project_is_a_usage_error(tmp_path: Path) -> None:
    r = invoke(tmp_path, "series")
    assert r.exit_code == 2 and "is not a patchkit project" in r.output


def test_series_json(project: Path) -> None:
    r = invoke(project, "series", "--json")
    assert r.exit_code == 0, r.output
    assert r.stderr == ""
    data = json.loads(r.stdout)
    assert data["schema"] == 1 and data["rehashed"] is None  # no --rehash: null, not []
    (p,) = data["patches"]
    assert set(p) == {"file", "name", "sha256", "upstream_status", "when", "default", "experimental"}
    assert p["file"] == "0001-zero-nbytes-guard.patch" and p["when"] == ".." and len(p["sha256"]) == 64
    r = invoke(project, "series", "--rehash", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["rehashed"] == []  # nothing changed
    patch = project / "patches" / "0001-zero-nbytes-guard.patch"
    patch.write_text(patch.read_text().replace("zero-byte views", "zero byte views"))
    r = invoke(project, "series", "--json")
    assert r.exit_code == 5 and r.stdout == ""  # no half result
    r = invoke(project, "series", "--rehash", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    (c,) = data["rehashed"]
    assert c["file"] == "0001-zero-nbytes-guard.patch" and c["old"] == p["sha256"]
    assert c["new"] == data["patches"][0]["sha256"] != p["sha256"]
