"""A second `patchkit build` with nothing changed reuses the smoke verdict; --resmoke, a
changed artifact and a failed smoke run the checks again. The fixture's fixture-cli is
patched to count its runs (the version check runs it) and to fail on request."""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path

import pytest
from click.testing import Result

from patchkit.core.fs import sha256_file
from tests.fixtures.project import GUARD_HEADER, build
from tests.fixtures.upstream import GUARD_PATCH_BODY, TOOL

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the counting tool is POSIX C")

CLI = TOOL.replace("NAME", "fixture-cli")
COUNTING = """\
#include <stdlib.h>
static void count_run(int argc, char ** argv) {
    const char * runs = getenv("FIXTURE_RUNS");
    FILE * f = runs ? fopen(runs, "a") : NULL;
    if (f) {
        fprintf(f, "%s\\n", argc > 1 ? argv[1] : "-");
        fclose(f);
    }
}
"""


def _counting_cli(fail_code: int) -> str:
    """fixture-cli that appends its first argument to $FIXTURE_RUNS and exits
    ``fail_code`` when $FIXTURE_FAIL is set."""
    text = CLI.replace('#include "fixture.h"\n', '#include "fixture.h"\n' + COUNTING)
    return text.replace(
        "int main(int argc, char ** argv) {\n",
        "int main(int argc, char ** argv) {\n    count_run(argc, argv);\n"
        f'    if (getenv("FIXTURE_FAIL")) {{\n        return {fail_code};\n    }}\n',
    )


def _write_counting_patch(project: Path, fail_code: int) -> None:
    diff = "".join(
        difflib.unified_diff(
            CLI.splitlines(keepends=True),
            _counting_cli(fail_code).splitlines(keepends=True),
            "a/tools/cli.c",
            "b/tools/cli.c",
        )
    )
    patches = project / "patches"
    (patches / "0002-count-runs.patch").write_text(
        GUARD_HEADER.format(when="..") + "diff --git a/tools/cli.c b/tools/cli.c\n" + diff
    )
    lines = [
        f"{name} sha256={sha256_file(patches / name)}"
        for name in ("0001-zero-nbytes-guard.patch", "0002-count-runs.patch")
    ]
    (patches / "series").write_text("# fixture series\n" + "\n".join(lines) + "\n")


@pytest.fixture
def counted(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The project with the counting patch; returns the file fixture-cli counts its runs in."""
    assert "nbytes == 0" in GUARD_PATCH_BODY  # the series keeps the guard patch first
    _write_counting_patch(project, fail_code=3)
    runs = tmp_path / "runs.txt"
    monkeypatch.setenv("FIXTURE_RUNS", str(runs))
    monkeypatch.delenv("FIXTURE_FAIL", raising=False)
    return runs


def _runs(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _smoke(out: Path) -> dict:
    return json.loads((out / "build-info.json").read_text())["smoke"]


def _ok(r: Result) -> str:
    assert r.exit_code == 0, r.output
    return r.output


def test_second_build_reuses_the_verdict_and_says_so(project: Path, tmp_path: Path, counted: Path) -> None:
    out = tmp_path / "out"
    first = _ok(build(project, out))
    assert "smoke: unchanged" not in first
    assert _runs(counted) == 1  # the version check ran fixture-cli --version
    report = _smoke(out)
    assert report["status"] == "passed"
    second = _ok(build(project, out))
    assert _runs(counted) == 1  # not run again
    assert "smoke: unchanged since " in second and f", {len(report['checks'])} checks" in second
    assert "smoke passed" in second
    assert _smoke(out) == report  # the same report in the new build-info.json
    # --resmoke runs the checks although nothing changed
    third = _ok(build(project, out, "--resmoke"))
    assert "smoke: unchanged" not in third and _runs(counted) == 2
    _ok(build(project, out))
    assert _runs(counted) == 2


def test_a_changed_artifact_runs_the_checks(project: Path, tmp_path: Path, counted: Path) -> None:
    out = tmp_path / "out"
    _ok(build(project, out))
    before = {a["path"]: a["sha256"] for a in json.loads((out / "build-info.json").read_text())["artifacts"]}
    _write_counting_patch(project, fail_code=4)  # other bytes in fixture-cli
    r = _ok(build(project, out))
    after = {a["path"]: a["sha256"] for a in json.loads((out / "build-info.json").read_text())["artifacts"]}
    assert before["bin/fixture-cli"] != after["bin/fixture-cli"]
    assert "smoke: unchanged" not in r and _runs(counted) == 2


def test_a_failed_smoke_is_never_reused(
    project: Path, tmp_path: Path, counted: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    _ok(build(project, out))
    monkeypatch.setenv("FIXTURE_FAIL", "1")
    r = build(project, out, "--resmoke")
    assert r.exit_code == 7, r.output
    assert _smoke(out)["status"] == "failed"
    ran = _runs(counted)
    assert ran == 3  # --version, then --help: both failed
    monkeypatch.delenv("FIXTURE_FAIL")
    r = _ok(build(project, out))  # nothing changed since the failure: it runs again
    assert "smoke: unchanged" not in r and _runs(counted) == ran + 1
    assert _smoke(out)["status"] == "passed"
    r = _ok(build(project, out))
    assert "smoke: unchanged" in r and _runs(counted) == ran + 1


def test_no_smoke_and_clean(project: Path, tmp_path: Path, counted: Path) -> None:
    out = tmp_path / "out"
    _ok(build(project, out))
    r = _ok(build(project, out, "--no-smoke"))
    assert "smoke: not run (--no-smoke" in r and _smoke(out) is None and _runs(counted) == 1
    r = _ok(build(project, out, "--clean"))  # a fresh start forgets the verdict too
    assert "smoke: unchanged" not in r and _runs(counted) == 2
