"""`patchkit list`: the tables on stdout (grep finds a row), ``--json`` the same data."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixtures.project import invoke, write_recipe
from tests.fixtures.upstream import FixtureUpstream

RECIPE_KEYS = {
    "name",
    "file",
    "default",
    "status",
    "error",
    "os",
    "cuda_sms",
    "upstream",
    "patches",
    "targets",
}
PATCH_KEYS = {
    "index",
    "name",
    "file",
    "subject",
    "upstream_status",
    "when",
    "default",
    "experimental",
    "sha256",
}


def _gpu_project(project: Path, upstream: FixtureUpstream) -> None:
    write_recipe(
        project,
        "gpu",
        url=str(upstream.path),
        commit=upstream.head,
        extra='\n[cuda]\narchs = ["pascal", "turing", 86]\n',
    )


def test_list_prints_its_tables_on_stdout(project: Path, upstream: FixtureUpstream) -> None:
    _gpu_project(project, upstream)
    r = invoke(project, "list")
    assert r.exit_code == 0, r.output
    assert r.stderr == ""
    lines = r.stdout.splitlines()
    assert lines[0] == "patches (patches/series, in order)"
    # `patchkit list | grep cuda`: the recipe's whole row is one line of stdout
    (gpu,) = [ln for ln in lines if "CUDA" in ln]
    assert "gpu" in gpu and "CUDA sm_60,61,75,86" in gpu and upstream.head[:12] in gpu
    (patch,) = [ln for ln in lines if ln.startswith("│ 1 ")]
    assert "zero-nbytes-guard" in patch and "pending" in patch and "yes" in patch
    assert "\x1b[" not in r.stdout


def test_list_json_has_the_documented_keys(project: Path, upstream: FixtureUpstream) -> None:
    _gpu_project(project, upstream)
    r = invoke(project, "list", "--json")
    assert r.exit_code == 0, r.output
    assert r.stderr == ""
    data = json.loads(r.stdout)
    assert set(data) == {"schema", "patches", "recipes"} and data["schema"] == 1
    (patch,) = data["patches"]
    assert set(patch) == PATCH_KEYS
    assert patch["index"] == 1 and patch["file"] == "0001-zero-nbytes-guard.patch"
    assert patch["upstream_status"] == "pending" and patch["default"] and not patch["experimental"]
    assert len(patch["sha256"]) == 64
    recipes = {x["name"]: x for x in data["recipes"]}
    assert set(recipes) == {"fixture", "gpu"}
    assert all(set(x) == RECIPE_KEYS for x in recipes.values())
    gpu = recipes["gpu"]
    assert gpu["cuda_sms"] == [60, 61, 75, 86] and gpu["status"] == "ok" and gpu["error"] is None
    assert gpu["file"] == "recipes/gpu.toml" and not gpu["default"]
    assert gpu["upstream"] == {"url": str(upstream.path), "commit": upstream.head}
    assert gpu["patches"] == [patch["name"]] and gpu["targets"] == ["fixture-cli", "fixture-rpc-server"]
    assert recipes["fixture"]["cuda_sms"] is None and recipes["fixture"]["os"] == "linux"


def test_an_invalid_recipe_keeps_its_row_and_exits_3(project: Path, upstream: FixtureUpstream) -> None:
    write_recipe(
        project, "typo", url=str(upstream.path), commit=upstream.head, extra='\n[cuda]\narchs = ["pascall"]\n'
    )
    r = invoke(project, "list")
    assert r.exit_code == 3, r.output
    (row,) = [ln for ln in r.stdout.splitlines() if ln.lstrip("│ ").startswith("typo")]
    assert "invalid" in row and "pascall" in row
    assert "pascall" not in r.stderr
    r = invoke(project, "list", "--json")
    assert r.exit_code == 3
    typo = next(x for x in json.loads(r.stdout)["recipes"] if x["name"] == "typo")
    assert set(typo) == RECIPE_KEYS and typo["status"] == "invalid" and "pascall" in typo["error"]
    assert typo["upstream"] is None and typo["targets"] is None


def test_list_shows_recipes_and_patches(project: Path) -> None:
    r = invoke(project, "list")
    assert r.exit_code == 0, r.output
    assert "zero-nbytes-guard" in r.output and "fixture" in r.output and "pending" in r.output


def test_list_shows_gpu_archs_and_flags_a_bad_family(project: Path, upstream: FixtureUpstream) -> None:
    _gpu_project(project, upstream)
    write_recipe(
        project, "typo", url=str(upstream.path), commit=upstream.head, extra='\n[cuda]\narchs = ["pascall"]\n'
    )
    r = invoke(project, "list")
    assert r.exit_code == 3, r.output
    assert "CUDA sm_60,61,75,86" in r.output
    assert "invalid" in r.output and "pascall" in r.output
