"""Every workflow `patchkit ci-template` writes passes actionlint (with shellcheck on the
`run:` scripts): the release workflow with each compile-cache setting, and the nightly
upstream canary. And the canary does what it says: check, bisect, one issue, bump, one PR."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.fixtures.actionlint import lint
from tests.fixtures.project import assert_error, invoke
from tests.fixtures.release import workflow

URL = "https://github.com/ggml-org/llama.cpp"


def _ok(text: str, root: Path, name: str) -> None:
    res = lint(text, root, name)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize(
    "extra",
    [
        (),
        ("--cache-remote", "gha"),
        ("--cache-remote", "secret:CACHE_URL"),
        ("--cache-remote", "secret:CACHE_URL", "--launcher", "sccache"),
        ("--push-images",),
        ("--push-images", "--image-registry", "quay.io/team"),
    ],
)
def test_release_workflows_pass_actionlint(project: Path, tmp_path: Path, extra: tuple[str, ...]) -> None:
    workflow(project)  # adds the CUDA and Windows recipes to the matrix
    res = invoke(project, "ci-template", *extra)
    assert res.exit_code == 0, res.output
    _ok(res.stdout, tmp_path, "release.yml")


def test_canary_passes_actionlint_and_catches_a_broken_one(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "canary.yml"
    res = invoke(
        project,
        "ci-template",
        "--canary",
        "fixture",
        "--branch",
        "main",
        "--cron",
        "5 3 * * 1-5",
        "--upstream",
        URL,
        "-o",
        str(out),
    )
    assert res.exit_code == 0, res.output
    text = out.read_text()
    _ok(text, tmp_path, "canary.yml")
    broken = text.replace("steps.check.outputs.rc == '11'", "steps.chek.outputs.rc == '11'", 1)
    assert lint(broken, tmp_path / "b", "canary.yml").returncode != 0


def _canary(project: Path) -> dict:  # type: ignore[type-arg]
    res = invoke(project, "ci-template", "--canary", "fixture", "--upstream", URL)
    assert res.exit_code == 0, res.output
    return yaml.safe_load(res.stdout)  # type: ignore[no-any-return]


def test_canary_content(project: Path) -> None:
    wf = _canary(project)
    on = wf[True]  # YAML 1.1 reads the key `on` as True
    assert on["schedule"] == [{"cron": "17 4 * * *"}] and "workflow_dispatch" in on
    assert wf["permissions"] == {"contents": "write", "issues": "write", "pull-requests": "write"}
    assert wf["env"]["RECIPE"] == "fixture" and wf["env"]["UPSTREAM_BRANCH"] == "master"
    assert wf["env"]["UPSTREAM_URL"] == URL
    steps = {s.get("name", s.get("uses")): s for s in wf["jobs"]["canary"]["steps"]}
    run = {k: s.get("run", "") for k, s in steps.items()}
    assert "--filter=blob:none" in run["Clone upstream (partial, blobs fetched on demand)"]
    check = run["Check the series against upstream's newest commit"]
    assert '--ref "origin/$UPSTREAM_BRANCH"' in check and 'echo "rc=$rc"' in check
    bisect = steps["Find the upstream commit that broke it"]
    assert bisect["if"] == "steps.check.outputs.rc == '11'"
    assert '--range "$pin..origin/$UPSTREAM_BRANCH" --bisect' in bisect["run"]
    issue = run["Open or update the canary issue"]
    assert "gh issue edit" in issue and "gh issue create" in issue  # one issue, updated
    close = steps["Close the canary issue (every patch applies again)"]
    assert close["if"] == "steps.check.outputs.rc == '0'" and "gh issue close" in close["run"]
    bump = steps["Move every recipe to upstream's newest commit"]
    assert bump["if"] == "steps.check.outputs.rc == '0'"
    assert (
        'patchkit bump "$RECIPE" --upstream upstream --to "origin/$UPSTREAM_BRANCH" '
        "--summary bump.md" in bump["run"]
    )
    pr = steps["Open or update the bump pull request"]
    assert pr["if"] == "steps.bump.outputs.changed == 'true'"
    assert "gh pr edit" in pr["run"] and "gh pr create" in pr["run"] and "--body-file bump.md" in pr["run"]


def test_canary_bad_input(project: Path) -> None:
    # the fixture recipe's upstream is a local folder: GitHub's runner cannot clone that
    assert_error(invoke(project, "ci-template", "--canary", "fixture"), 2, "must be a git URL")
    assert_error(
        invoke(project, "ci-template", "--canary", "fixture", "--upstream", "https://x/y z"),
        2,
        "must be a git URL",
    )
    assert_error(
        invoke(project, "ci-template", "--canary", "fixture", "--upstream", URL, "--cron", "every night"),
        2,
        "not five cron fields",
    )
    assert_error(
        invoke(project, "ci-template", "--canary", "fixture", "--upstream", URL, "--branch", "a b"),
        2,
        "not a git branch name",
    )
    assert_error(invoke(project, "ci-template", "--canary", "fixture", "other"), 2, "takes one RECIPE")
    assert_error(
        invoke(project, "ci-template", "--canary", "fixture", "--cache-remote", "gha"), 2, "not --canary"
    )
    assert_error(invoke(project, "ci-template", "--cron", "1 2 3 4 5"), 2, "for --canary")
    assert_error(invoke(project, "ci-template", "--upstream", URL), 2, "for --canary")
