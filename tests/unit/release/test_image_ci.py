"""`ci-template --push-images`: each Linux build released as an image too, and a job that
verifies and pushes them after publishing, with no action beyond the pinned ones."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from patchkit.release.ci import ImagePush, MatrixEntry, render_workflow
from tests.fixtures.project import assert_error, invoke

ENTRIES = [
    MatrixEntry(recipe="cpu-rpc", runner="ubuntu-22.04", cuda=""),
    MatrixEntry(recipe="windows-cpu-rpc", runner="ubuntu-22.04", cuda="", cross="mingw"),
]


def test_without_push_images_the_workflow_has_no_image() -> None:
    text = render_workflow(ENTRIES)
    assert "--image" not in text and "push-images" not in text and "@@" not in text


def test_push_images_job() -> None:
    text = render_workflow(ENTRIES, images=ImagePush())
    assert "@@" not in text
    jobs = yaml.safe_load(text)["jobs"]
    release = next(s for s in jobs["build"]["steps"] if s.get("name") == "Release")
    assert release["run"].endswith("${{ (runner.os == 'Linux' && matrix.cross == '') && '--image' || '' }}")
    push = jobs["push-images"]
    assert push["needs"] == "publish" and push["if"] == "startsWith(github.ref, 'refs/tags/')"
    assert push["permissions"] == {"contents": "read", "packages": "write"}
    uses = [s["uses"] for s in push["steps"] if "uses" in s]
    assert uses and all(re.match(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40}$", u) for u in uses), uses  # pinned
    step = push["steps"][-1]
    assert step["env"] == {
        "REGISTRY": "ghcr.io",
        "REGISTRY_USER": "${{ github.actor }}",
        "REGISTRY_TOKEN": "${{ secrets.GITHUB_TOKEN }}",
    }
    script = step["run"]
    assert script.index('patchkit verify "$part"') < script.index("skopeo copy --preserve-digests")
    assert '"docker://$REGISTRY/$owner/llama:$name"' in script  # tagged with the release name
    other = yaml.safe_load(render_workflow(ENTRIES, images=ImagePush(registry="quay.io/team")))
    env = other["jobs"]["push-images"]["steps"][-1]["env"]
    assert (
        env["REGISTRY"] == "quay.io/team" and env["REGISTRY_TOKEN"] == "${{ secrets.IMAGE_REGISTRY_TOKEN }}"
    )


@pytest.mark.parametrize("bad", ["", "GHCR.io", "ghcr.io/$(id)", "ghcr.io/a b", "https://ghcr.io", "a/" * 10])
def test_bad_registry_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="is not a registry host"):
        ImagePush(registry=bad)


def test_cli_options(project: Path) -> None:
    res = invoke(project, "ci-template", "--push-images")
    assert res.exit_code == 0, res.output
    assert "push-images:" in res.stdout
    assert_error(
        invoke(project, "ci-template", "--image-registry", "quay.io"),
        2,
        "--image-registry needs --push-images",
    )
    assert_error(
        invoke(project, "ci-template", "--push-images", "--image-registry", "bad host"),
        2,
        "is not a registry host",
    )
    assert_error(invoke(project, "ci-template", "--canary", "--push-images"), 2, "not --canary")
