"""The JSON forms of the small records other files embed (a conflict in check's JSON, a
recipe's resolved CUDA archs in build-info, the work folder's state.json), key for key:
they go through core.record and must stay what they were."""

from __future__ import annotations

import json

from patchkit.builder.state import BuildState
from patchkit.spec.applyout import Conflict
from patchkit.spec.cuda import resolve_archs


def test_a_conflict_as_json() -> None:
    hunk = Conflict(file="src/a.c", hunk=2, header="@@ -1 +1 @@ f()", reason="context does not match")
    assert hunk.to_json() == {
        "file": "src/a.c",
        "hunk": 2,
        "header": "@@ -1 +1 @@ f()",
        "reason": "context does not match",
    }
    whole = Conflict(file="b.c", hunk=None, header="", reason="No such file or directory")
    assert json.dumps(whole.to_json()) == (
        '{"file": "b.c", "hunk": null, "header": "", "reason": "No such file or directory"}'
    )


def test_cuda_archs_as_json() -> None:
    archs = resolve_archs(["pascal", 86])
    assert json.dumps(archs.to_json()) == (
        '{"sms": [60, 61, 86], "ptx": 86, "cmake": "60-real;61-real;86-real;86-virtual", '
        '"requested": ["pascal", "86"]}'
    )


def test_build_state_as_json() -> None:
    state = BuildState(source_id="s", tree="t", results=("applied",), commit_date="d", subject="x")
    assert json.dumps(state.to_json()) == (
        '{"source_id": "s", "tree": "t", "results": ["applied"], "commit_date": "d", '
        '"subject": "x", "build_number": -1, "config_id": null}'
    )
