"""`patchkit refresh`'s text rewriting: the recipe pin and the series hashes, byte for byte."""

from __future__ import annotations

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
