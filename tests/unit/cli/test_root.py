"""`patchkit root list|prepare` print root.json's fields escaped: a tampered record is not
patchkit's words (terminal escapes, bidi and zero-width characters), and a record whose
name or id is not what patchkit writes reads as not prepared."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from patchkit.cli import main
from tests.fixtures.sysroot import fake_root


def _tamper(cache: Path, **fields: str) -> None:
    rec = cache / "roots/debian11/root.json"
    data = json.loads(rec.read_text())
    data.update(fields)
    rec.write_text(json.dumps(data))


def test_root_list_escapes_the_records_fields(tmp_path: Path) -> None:
    cache = tmp_path / "c"
    fake_root(cache)
    _tamper(cache, prepared="2026\x1b]0;pwned\x07\u202e\u200b")
    r = CliRunner().invoke(main, ["root", "list"], env={"PATCHKIT_CACHE": str(cache)})
    assert r.exit_code == 0, r.output
    assert "2026\\x1b]0;pwned\\x07\\u202e\\u200b" in r.stdout
    assert "\x1b" not in r.output and "\u202e" not in r.output and "\u200b" not in r.output


def test_a_record_that_is_not_patchkits_is_not_a_prepared_root(tmp_path: Path) -> None:
    cache = tmp_path / "c"
    for fields in ({"packages_sha256": "\x1b]0;x\x07" + "a" * 56}, {"name": "debian12"}):
        fake_root(cache)
        _tamper(cache, **fields)
        r = CliRunner().invoke(main, ["root", "list"], env={"PATCHKIT_CACHE": str(cache)})
        assert r.exit_code == 0, r.output
        assert r.stdout.splitlines()[0].endswith("not prepared (`patchkit root prepare debian11`)"), r.stdout
        assert "\x1b" not in r.output
        shutil.rmtree(cache)


def test_root_list_json_golden(tmp_path: Path) -> None:
    """`root list --json`, byte for byte: one row per root, its record or null."""
    cache = tmp_path / "c"
    fake_root(cache)
    record = json.loads((cache / "roots/debian11/root.json").read_text())
    r = CliRunner().invoke(main, ["root", "list", "--json"], env={"PATCHKIT_CACHE": str(cache)})
    assert r.exit_code == 0, r.output
    want = {
        "schema": 1,
        "roots": [
            {
                "name": "debian11",
                "suite": "bullseye",
                "glibc": "2.31",
                "glibcxx": "3.4.28",
                "prepared": record,
            },
            {"name": "debian12", "suite": "bookworm", "glibc": "2.36", "glibcxx": "3.4.30", "prepared": None},
        ],
    }
    assert r.stdout == json.dumps(want, indent=2, sort_keys=True) + "\n"
