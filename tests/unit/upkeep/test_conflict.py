"""upkeep.conflict, upkeep.rerere and upkeep.upstreamed's pure parts: conflict blocks, the
stop message's trimmed excerpt, recorded resolutions (learn, replay, a damaged store),
titles and the duplicated-hunk rule."""

from __future__ import annotations

import json
from pathlib import Path

from patchkit.upkeep import rerere
from patchkit.upkeep.conflict import Block, added_runs, describe_file, hunk_headers, parse_conflicts
from patchkit.upkeep.upstreamed import duplicated_runs, normalise_subject

CONFLICTED = (
    "a\nb\n"
    "<<<<<<< HEAD\nours 1\nours 2\n||||||| base\nold\n=======\ntheirs 1\n>>>>>>> abc (0003-x.patch)\n"
    "c\n"
    "<<<<<<< HEAD\nx\n=======\ny\n>>>>>>> abc (0003-x.patch)\n"
    "d\n"
)


def test_parse_conflicts_reads_diff3_and_merge_style_blocks() -> None:
    parts = parse_conflicts(CONFLICTED)
    blocks = [p for p in parts if isinstance(p, Block)]
    assert [(b.start, b.end) for b in blocks] == [(3, 10), (12, 16)]
    assert blocks[0].ours == ("ours 1\n", "ours 2\n") and blocks[0].base == ("old\n",)
    assert blocks[0].theirs == ("theirs 1\n",)
    assert blocks[1].base is None and blocks[1].theirs == ("y\n",)
    # an unterminated marker is text
    assert parse_conflicts("<<<<<<< HEAD\nx\n") == ["<<<<<<< HEAD\n", "x\n"]


def test_describe_file_trims_a_big_block_and_points_at_the_file() -> None:
    big = "".join(f"upstream line {i}\n" for i in range(2450))
    text = f"head\n<<<<<<< HEAD\n{big}=======\npatched\n>>>>>>> abc (0007-big.patch)\ntail\n"
    diff = "diff --git a/f.c b/f.c\n--- a/f.c\n+++ b/f.c\n@@ -1,2 +1,2 @@ int f()\n head\n-old\n+patched\n"
    lines, commits = describe_file(
        git=None,
        old="a" * 40,
        new="b" * 40,
        path="f.c",
        full_path=Path("/w/tree/f.c"),
        text=text,
        new_text=None,
        patch_diff=diff,
    )
    out = "\n".join(lines)
    assert commits == []
    assert "f.c:2-2455 (conflict 1 of 1, 2454 lines; the patch's hunk #1 of 1 `-1,2 +1,2`)" in out
    assert "upstream | … 2444 more lines" in out
    assert "patch    | patched" in out
    assert "(the whole block: /w/tree/f.c:2)" in out
    assert len(lines) < 20


def test_rerere_learns_each_block_and_replays_it(tmp_path: Path) -> None:
    resolved = "a\nb\nours 1\ntheirs 1\nc\nx and y\nd\n"
    found, lost = rerere.learn(CONFLICTED, resolved)
    assert lost == 0
    assert [r for _, r in found] == [["ours 1\n", "theirs 1\n"], ["x and y\n"]]
    store = rerere.Store(tmp_path / "rr")
    for block, res in found:
        assert store.put(block, res, "f.c", "0003-x.patch")
    # the same conflicts elsewhere in the same file at the same patch: replayed whole
    again = "zzz\n" + CONFLICTED
    rep = rerere.replay(again, store, path="f.c", patch="0003-x.patch")
    assert rep.complete and rep.reused == 2 and rep.text == "zzz\n" + resolved
    # sides swapped (ours and theirs traded places) still match
    swapped = "<<<<<<< HEAD\ny\n=======\nx\n>>>>>>> other\n"
    assert rerere.replay(swapped, store, path="f.c", patch="0003-x.patch").text == "x and y\n"
    # one unknown block: the known one is replayed, the other kept with its markers
    partial = CONFLICTED.replace("y\n>>>>>>>", "q\n>>>>>>>")
    rep = rerere.replay(partial, store, path="f.c", patch="0003-x.patch")
    assert rep.reused == 1 and not rep.complete and "<<<<<<< HEAD\nx\n=======\nq\n" in rep.text


def test_rerere_replays_a_resolution_only_in_its_file_and_patch_or_carried_on_request(tmp_path: Path) -> None:
    found, _ = rerere.learn(CONFLICTED, "a\nb\nR\nc\nS\nd\n")
    store = rerere.Store(tmp_path)
    for block, res in found:
        store.put(block, res, "f.c", "0003-x.patch")
    for path, patch in (("g.c", "0003-x.patch"), ("f.c", "0009-y.patch"), ("g.c", "0009-y.patch")):
        rep = rerere.replay(CONFLICTED, store, path=path, patch=patch)
        assert rep.reused == 0 and rep.text == CONFLICTED, (path, patch)
    # a later patch's same conflict in the same file takes the earlier patch's, when allowed
    rep = rerere.replay(CONFLICTED, store, path="f.c", patch="0009-y.patch", carry_from=["0003-x.patch"])
    assert rep.complete and rep.reused == 0 and rep.carried == 2 and rep.carried_from == ("0003-x.patch",)
    assert rep.text == "a\nb\nR\nc\nS\nd\n"
    # never into another file
    rep = rerere.replay(CONFLICTED, store, path="g.c", patch="0009-y.patch", carry_from=["0003-x.patch"])
    assert rep.carried == 0


def test_rerere_never_trusts_a_damaged_or_foreign_record(tmp_path: Path) -> None:
    found, _ = rerere.learn(CONFLICTED, "a\nb\nR\nc\nS\nd\n")
    store = rerere.Store(tmp_path)
    block, res = found[0]
    store.put(block, res, "f.c", "0001-p.patch")
    (path,) = tmp_path.glob("*.json")
    assert store.get(block, "f.c", "0001-p.patch") == ["R\n"]
    record = json.loads(path.read_text())
    path.write_text("{broken")
    assert store.get(block, "f.c", "0001-p.patch") is None
    path.write_text(
        json.dumps(
            {
                "version": 2,
                "key": path.stem,
                "path": "f.c",
                "patch": "0001-p.patch",
                "sides": ["a", "b"],
                "resolution": ["evil\n"],
            }
        )
    )
    assert store.get(block, "f.c", "0001-p.patch") is None  # another conflict's sides under this key
    # a record that names another file or patch under this key: never
    path.write_text(json.dumps({**record, "path": "g.c"}))
    assert store.get(block, "f.c", "0001-p.patch") is None
    # a record of the first version (keyed by content alone, no file named): ignored
    path.write_text(
        json.dumps({k: v for k, v in record.items() if k not in ("path", "patch")} | {"version": 1})
    )
    assert store.get(block, "f.c", "0001-p.patch") is None
    # too big to keep: not written
    assert not store.put(block, ["x" * (rerere.MAX_RECORD + 1)], "f.c", "0001-p.patch")


def test_rerere_learn_gives_up_where_the_text_around_a_block_changed() -> None:
    found, lost = rerere.learn(CONFLICTED, "A\nB\nR\nC\nS\nD\n")
    assert found == [] and lost == 2


def test_normalise_subject() -> None:
    assert (
        normalise_subject("[PATCH 3/7] vulkan: Fuse rope+set_rows (#16769)") == "vulkan: fuse rope+set_rows"
    )
    assert normalise_subject("  Fix   the  build. ") == "fix the build"


def test_duplicated_runs_only_what_upstream_added_meanwhile() -> None:
    case = ["void test_gamma(void) {", "    check(gamma(3) == 0);", "}"]
    diff = "diff --git a/t.c b/t.c\n--- a/t.c\n+++ b/t.c\n@@ -1,1 +1,4 @@\n one\n" + "".join(
        f"+{ln}\n" for ln in case
    )
    before = "one\ntwo\n"
    upstream = before + "\n".join(case) + "\n"
    merged = "one\n" + "\n".join(case) + "\ntwo\n" + "\n".join(case) + "\n"
    assert duplicated_runs(diff, "t.c", before=before, upstream=upstream, merged=merged) == [([2, 6], case)]
    # upstream never added it: a patch may repeat a block on purpose
    assert duplicated_runs(diff, "t.c", before=upstream, upstream=upstream, merged=merged) == []
    # the merge kept one copy: fine
    assert duplicated_runs(diff, "t.c", before=before, upstream=upstream, merged=upstream) == []
    # a lone brace is not evidence
    brace = "diff --git a/t.c b/t.c\n--- a/t.c\n+++ b/t.c\n@@ -1,1 +1,2 @@\n one\n+}\n"
    assert duplicated_runs(brace, "t.c", before="one\n", upstream="one\n}\n", merged="one\n}\n}\n") == []


# an added C line `++i;` is `+++i;` in the diff: an added line, not a `+++ b/...` file header
PLUS_PLUS = (
    "diff --git a/loop.c b/loop.c\nindex 1111111..2222222 100644\n--- a/loop.c\n+++ b/loop.c\n"
    "@@ -1,2 +1,5 @@ int f(void)\n {\n+int i = 0;\n+++i;\n+return i + 1000000;\n }\n"
)


def test_added_runs_keep_an_added_line_that_starts_with_plus_plus() -> None:
    run = ["int i = 0;", "++i;", "return i + 1000000;"]
    assert added_runs(PLUS_PLUS, "loop.c") == [run]
    assert hunk_headers(PLUS_PLUS, "loop.c") == [("@@ -1,2 +1,5 @@ int f(void)", run)]
    # so refresh's doubled-lines check sees the whole run a merge put in twice
    merged = "{\n" + "\n".join(run + run) + "\n}\n"
    got = duplicated_runs(
        PLUS_PLUS, "loop.c", before="{\n}\n", upstream="{\n" + "\n".join(run) + "\n}\n", merged=merged
    )
    assert got == [([2, 5], run)]


def test_added_runs_and_hunk_headers_read_quoted_paths() -> None:
    # git C-quotes a name with a quote, a backslash, a control or a non-ASCII character
    for old, new, path in (
        ('"a/sp ace.c"', '"b/sp ace.c"', "sp ace.c"),
        ('"a/caf\\303\\251.c"', '"b/caf\\303\\251.c"', "café.c"),
    ):
        diff = (
            f"diff --git {old} {new}\nindex 1111111..2222222 100644\n--- {old}\n+++ {new}\n"
            "@@ -1,2 +1,3 @@ int g(void)\n head\n+added line one\n+added line two\n tail\n"
        )
        added = ["added line one", "added line two"]
        assert added_runs(diff, path) == [added], path
        assert hunk_headers(diff, path) == [("@@ -1,2 +1,3 @@ int g(void)", added)], path
        text = "head\n<<<<<<< HEAD\nup\n=======\nadded line one\nadded line two\n>>>>>>> abc (0001-x.patch)\ntail\n"
        lines, _ = describe_file(
            git=None,
            old="a" * 40,
            new="b" * 40,
            path=path,
            full_path=Path("/w") / path,
            text=text,
            new_text=None,
            patch_diff=diff,
        )
        assert "the patch's hunk #1 of 1 `-1,2 +1,3`" in lines[0], lines
