"""`patchkit refresh`'s text rewriting: the recipe pin and the series hashes, byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.core.errors import RecipeError
from patchkit.spec.series import rewrite_series
from patchkit.upkeep.refresh import move_recipe_pin


def test_move_recipe_pin_keeps_every_other_byte() -> None:
    old, new = "a" * 40, "b" * 40
    text = (
        f'name = "x"  # commit = "{old}" in a comment stays\n[build]\ncommit = "{old}"\n'
        f'\n[upstream]\nurl = "u"\ncommit   =  "{old}"   # pinned\r\n[cuda]\n'
    )
    out = move_recipe_pin(text, new)
    assert out == text.replace(f'commit   =  "{old}"', f'commit   =  "{new}"')


def test_move_recipe_pin_without_upstream_commit_fails() -> None:
    with pytest.raises(RecipeError, match="no `commit"):
        move_recipe_pin('[upstream]\nurl = "u"\n', "b" * 40, where="r.toml")


def test_rewrite_series_touches_only_named_lines() -> None:
    a, b, c = "1" * 64, "2" * 64, "3" * 64
    text = f"# head\n0001-a.patch sha256={a}  # keep\n0002-b.patch   sha256={b}\n"
    assert rewrite_series(text, {"0001-a.patch": c}) == (
        f"# head\n0001-a.patch sha256={c}  # keep\n0002-b.patch   sha256={b}\n"
    )


def test_move_recipe_pin_writes_only_a_commit_and_through_the_toml_writer() -> None:
    from patchkit.upkeep.refresh.finish import toml_string

    text = '[upstream]\nurl = "u"\ncommit = "' + "a" * 40 + '"  # pin\n'
    for bad in ("b" * 40 + '"\n[build.defines]\nX = "y', "b" * 39, "B" * 40, "HEAD"):
        with pytest.raises(RecipeError, match="40 hex digits"):
            move_recipe_pin(text, bad, where="r.toml")
    assert move_recipe_pin(text.replace('"', "'"), "c" * 40) == text.replace('"', "'").replace(
        "a" * 40, "c" * 40
    )
    assert toml_string('a"b\\c\nd\x1b') == '"a\\"b\\\\c\\nd\\u001b"'


def test_rerere_store_refuses_a_planted_link_and_a_resolution_that_is_a_conflict(tmp_path: Path) -> None:
    from patchkit.upkeep.conflict import Block, parse_conflicts
    from patchkit.upkeep.rerere import Store, marker_lines

    text = "a\n<<<<<<< ours\nx\n=======\ny\n>>>>>>> theirs\nb\n"
    (block,) = [p for p in parse_conflicts(text) if isinstance(p, Block)]
    assert marker_lines(text) == [2, 4, 6] and marker_lines("a\n======= b\n") == [2]
    assert marker_lines("a == b\n<<<<<<<<x\n") == []
    real = Store(tmp_path / "real")
    at = ("f.c", "0001-p.patch")
    assert not real.put(block, ["<<<<<<< ours\n", "x\n"], *at)  # still a conflict: not recorded
    assert real.put(block, ["x\n", "y\n"], *at) and real.get(block, *at) == ["x\n", "y\n"]
    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / "link").symlink_to(victim, target_is_directory=True)
    linked = Store(tmp_path / "link")
    assert not linked.put(block, ["x\n"], *at) and list(victim.iterdir()) == []
    (victim / "k.json").write_text("{}")
    linked._trim()
    assert (victim / "k.json").exists()


def test_a_file_deleted_with_its_folder_says_the_code_may_be_gone() -> None:
    from patchkit.git.repo import CommitInfo
    from patchkit.upkeep.refresh.moved import Gone

    c = CommitInfo(sha="d" * 40, date="2026-01-01T00:00:00+00:00", subject="ggml : remove kompute backend")
    homes = (("-1911,6 +1911,7", (("ggml/src/ggml-backend.cpp", 4, 7),)),)
    gone = Gone(side="upstream", commit=c, homes=homes, folder_gone=True)
    lines = gone.lines("ggml/src/ggml-kompute/ggml-kompute.cpp")
    assert lines[1] == "  its folder ggml/src/ggml-kompute/ is gone too: the code may be gone, not moved"
    assert "the nearest like it is in ggml/src/ggml-backend.cpp (4 of its 7 names)" in lines[2]
    assert gone.summary() == "deleted upstream by dddddddddddd, with its folder"
    moved = Gone(side="upstream", commit=c, homes=homes)
    assert "its code is now in ggml/src/ggml-backend.cpp" in moved.lines("a/b.cpp")[1]
    assert moved.summary() == "deleted upstream by dddddddddddd, its code now in ggml/src/ggml-backend.cpp"
