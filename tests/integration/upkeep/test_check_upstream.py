"""`check` says what is upstream as the refresh finds it: proven (the same patch-id, the
change there) or only proposed (a title, a pull request named in the message), with the
rule and the commit; the same verdicts `refresh --drop-upstreamed` acts on."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.fixtures.drift import make_project, patch_header
from tests.fixtures.project import invoke
from tests.fixtures.refreshq import PatchQueue as RefreshQueue
from tests.fixtures.refreshq import make_refresh_queue, patches_for
from tests.fixtures.upstream import GIT_ENV


@pytest.fixture(scope="module")
def rq(tmp_path_factory: pytest.TempPathFactory) -> RefreshQueue:
    old = os.environ.copy()
    os.environ.update(GIT_ENV)
    os.environ["GIT_CONFIG_GLOBAL"] = os.devnull
    try:
        return make_refresh_queue(tmp_path_factory.mktemp("rq"))
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_check_shows_proven_and_proposed(rq: RefreshQueue, tmp_path: Path) -> None:
    pid, pr, effect, prdone = patches_for(rq, "pid", "pr", "effect", "prdone")
    prose = patch_header("tests: check two more") + (
        "Similar to https://github.com/ggml-org/llama.cpp/pull/102, though ours differs.\n\n"
    )
    pr = (pr[0], prose, pr[2])
    prdone = (prdone[0], patch_header("tests: gamma checked (#102)"), prdone[2])
    proj = make_project(tmp_path, rq, pin=rq.c["r1"], patches=[pid, pr, effect, prdone])
    res = invoke(proj, "check", "fixture", "--range", f"{rq.c['r1']}..{rq.c['u6']}", "--json")
    doc = json.loads(res.stdout)
    by = {u["patch"]: u for u in doc["upstream"]}
    assert by["pid"]["rule"] == "patch-id" and by["pid"]["proven"] is True
    assert by["pid"]["commit"]["sha"] == rq.c["u1"]
    # a pull request named in the prose: proposed, never proven
    assert by["pr"]["rule"] == "pull-request" and by["pr"]["proven"] is False
    assert "only its pull request number matches" in by["pr"]["evidence"]
    assert by["effect"]["rule"] == "effect" and by["effect"]["proven"] is True
    # the title's (#102) and the change there: proven, naming both
    assert by["prdone"]["rule"] == "effect" and by["prdone"]["detail"] == "and pull-request #102"
    assert by["prdone"]["commit"]["sha"] == rq.c["u3"]
    assert doc["base"]["sha"] == rq.c["r1"]
    text = res.stderr
    assert f"upstream at {rq.c['u6'][:12]} since {rq.c['r1'][:12]} (as refresh finds it):" in text
    assert "#2 pr: proposed only (kept): perhaps upstream (pull-request #102; only its pull request" in text
    assert "#1 pid: proven (--drop-upstreamed drops it): already upstream (patch-id" in text
    assert "#3 effect: proven (--drop-upstreamed drops it): already upstream (effect)" in text
