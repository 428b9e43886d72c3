"""With real git: `ci-template --update-pins` lists each action's tags with
`git ls-remote` (here on local fake repositories, through PATCHKIT_GITHUB_URL), moves every
pin to the newest release of its line, rewrites the pins file, and the workflows rendered
from it are pinned by those commits and still pass actionlint."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.release.ci import load_pins
from tests.fixtures.actionlint import lint
from tests.fixtures.upstream import GIT_ENV

REPO_ROOT = Path(__file__).resolve().parents[3]


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV, "GIT_CONFIG_GLOBAL": os.devnull}
    return subprocess.run(
        ["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def _fake_github(root: Path, extra: dict[str, list[str]]) -> dict[str, dict[str, str]]:
    """A repository per pinned action under root/OWNER/REPO with the tags in ``extra``
    (annotated when they end in "+"), else only its pinned tag, at a fresh commit (the pin's
    sha does not exist here: that tag looks moved). Returns {action: {tag: commit}}."""
    made: dict[str, dict[str, str]] = {}
    for action, pin in load_pins().items():
        repo = root / action
        repo.mkdir(parents=True)
        _git(repo, "init", "-q", "-b", "main")
        tags: dict[str, str] = {}
        for tag in extra.get(action, [pin.tag]):
            name = tag.rstrip("+")
            _git(repo, "commit", "-q", "--allow-empty", "-m", name)
            sha = _git(repo, "rev-parse", "HEAD")
            if tag.endswith("+"):
                _git(repo, "tag", "-a", "-m", name, name)
            else:
                _git(repo, "tag", name)
            tags[name] = sha
        made[action] = tags
    return made


def _patchkit(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "patchkit", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "300", **env},
        timeout=300,
    )


def test_update_pins_moves_every_pin_and_the_workflows_follow(project: Path, tmp_path: Path) -> None:
    shipped = load_pins()
    pins_file = tmp_path / "pins.toml"
    pins_file.write_bytes((REPO_ROOT / "patchkit/release/templates/action-pins.toml").read_bytes())
    gh = tmp_path / "gh"
    # checkout: a newer v4 release (annotated), a v5 and a moving v4 tag that do not count;
    # Jimver (line v0.2): a newer patch release; setup-python: only its pinned release's
    # line; the others only have their pinned tag, which here names another commit than the
    # shipped pin: a moved tag, so that pin is kept
    made = _fake_github(
        gh,
        {
            "actions/checkout": ["v4.9.1+", "v5.0.0", "v4"],
            "Jimver/cuda-toolkit": ["v0.2.99", "v0.3.0"],
            "actions/setup-python": ["v5.0.0+", "v6.0.0"],
        },
    )
    r = _patchkit(
        "--project",
        str(project),
        "ci-template",
        "--update-pins",
        "--pins",
        str(pins_file),
        env={"PATCHKIT_GITHUB_URL": str(gh)},
    )
    assert r.returncode == 0, r.stderr
    new = load_pins(pins_file)
    assert (
        new["actions/checkout"].tag == "v4.9.1"
        and new["actions/checkout"].sha == made["actions/checkout"]["v4.9.1"]
    )
    assert new["Jimver/cuda-toolkit"].tag == "v0.2.99"
    assert new["Jimver/cuda-toolkit"].sha == made["Jimver/cuda-toolkit"]["v0.2.99"]
    assert new["actions/setup-python"] == shipped["actions/setup-python"]  # v5.6.0 is the newest v5
    assert new["actions/cache"] == shipped["actions/cache"]  # its tag moved: pin kept
    assert "actions/checkout: v4.4.0 (11d5960a3267) -> v4.9.1" in r.stdout
    assert "actions/cache: WARNING: its tag v4.3.0 now names" in r.stdout
    assert "actions/setup-python: v5.6.0 (a26af69be951), the newest of v5" in r.stdout
    assert f"wrote {pins_file}" in r.stderr and "Traceback" not in r.stderr

    # the workflows rendered from that file carry the new commits, and still lint
    for extra, name in (
        ([], "release.yml"),
        (["--canary", "fixture", "--upstream", "https://github.com/o/r"], "canary.yml"),
    ):
        r = _patchkit("--project", str(project), "ci-template", "--pins", str(pins_file), *extra, env={})
        assert r.returncode == 0, r.stderr
        assert f"uses: actions/checkout@{made['actions/checkout']['v4.9.1']} # v4.9.1" in r.stdout
        res = lint(r.stdout, tmp_path / name, name)
        assert res.returncode == 0, res.stdout + res.stderr


def test_update_pins_without_the_network_is_one_line_and_writes_nothing(
    project: Path, tmp_path: Path
) -> None:
    pins_file = tmp_path / "pins.toml"
    before = (REPO_ROOT / "patchkit/release/templates/action-pins.toml").read_bytes()
    pins_file.write_bytes(before)
    r = _patchkit(
        "--project", str(project), "ci-template", "--update-pins", "--pins", str(pins_file),
        env={"PATCHKIT_GITHUB_URL": str(tmp_path / "nowhere")},
    )  # fmt: skip
    assert r.returncode == 4, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "listing the tags of" in errors[0], r.stderr
    assert "needs the network" in r.stderr and "Traceback" not in r.stderr
    assert pins_file.read_bytes() == before


@pytest.mark.parametrize(
    ("args", "env", "code", "needle"),
    [
        (["--update-pins", "fixture"], {}, 2, "--update-pins takes no other option but --pins"),
        (
            ["--update-pins"],
            {"PATCHKIT_GITHUB_URL": "--upload-pack=touch /tmp/x"},
            2,
            "neither a URL nor an absolute path",
        ),
        (["--pins", "missing.toml"], {}, 2, "--pins: missing.toml: cannot read it"),
    ],
)
def test_update_pins_refusals(
    project: Path, tmp_path: Path, args: list[str], env: dict[str, str], code: int, needle: str
) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "patchkit", "--project", str(project), "ci-template", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "300", **env},
        cwd=tmp_path,
        timeout=120,
    )
    assert r.returncode == code, r.stderr
    assert needle in r.stderr and "Traceback" not in r.stderr
