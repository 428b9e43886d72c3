"""Which file a recipe argument means (decided once: a bare NAME is recipes/NAME.toml,
anything with a separator or a .toml suffix is a path), and a one-line error of its own
for each way a recipe file can be wrong; `list` marks such a recipe invalid."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from patchkit.core.errors import RecipeError
from patchkit.spec import recipe as recipe_mod
from patchkit.spec.problems import RecipeNotFound
from patchkit.spec.recipe import is_recipe_name, load_recipe, resolve_recipe_path
from patchkit.spec.series import load_series
from tests.fixtures.project import assert_error, invoke


@pytest.mark.parametrize(
    ("arg", "name"),
    [
        ("cpu-rpc", True),
        ("fixture", True),
        ("", True),
        ("x.toml", False),
        ("./fixture", False),
        ("recipes/fixture", False),
        ("a\\b", False),
        ("C:x", False),
        ("fixture.TOML", True),
    ],
)
def test_what_is_a_name(arg: str, name: bool) -> None:
    assert is_recipe_name(arg) is name


def test_a_folder_or_file_named_like_a_recipe_here_does_not_hide_it(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "cwd"
    (here / "fixture").mkdir(parents=True)  # a folder called fixture
    (here / "fixture.toml").write_text("garbage = [\n")  # and a file fixture.toml
    monkeypatch.chdir(here)
    assert resolve_recipe_path("fixture", project) == project / "recipes" / "fixture.toml"
    # the file here is used only when named as a path
    with pytest.raises(RecipeError, match="not valid TOML"):
        load_recipe(resolve_recipe_path("fixture.toml", project), project, load_series(project / "patches"))
    r = invoke(project, "list")
    assert r.exit_code == 0, r.output


def test_a_name_missing_from_recipes_but_present_here_says_how_to_use_it(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").write_text("")
    with pytest.raises(RecipeError) as e:
        resolve_recipe_path("mine", project)
    assert e.value.message.startswith("no recipe named 'mine' in ")
    assert isinstance(e.value.problem, RecipeNotFound)
    assert (e.value.problem.by, e.value.problem.file_here) == ("name", True)


def test_a_recipe_path_that_is_a_folder(project: Path, tmp_path: Path) -> None:
    (tmp_path / "fixture").mkdir()
    with pytest.raises(RecipeError) as e:
        resolve_recipe_path(str(tmp_path / "fixture"), project)
    assert e.value.message == f"recipe {tmp_path / 'fixture'} is a folder, not a recipe file"
    assert "did you mean" not in e.value.message
    r = invoke(project, "build", str(tmp_path / "fixture"))
    assert_error(r, 3, "is a folder, not a recipe file")


def test_a_missing_path_names_the_recipe_of_the_same_name(project: Path) -> None:
    with pytest.raises(RecipeError) as e:
        resolve_recipe_path("nowhere/fixture.toml", project)
    assert e.value.message == "recipe file nowhere/fixture.toml does not exist"
    assert e.value.problem == RecipeNotFound(
        arg="nowhere/fixture.toml", by="path", recipes=project / "recipes", known=("fixture",)
    )


def _series(project: Path):  # type: ignore[no-untyped-def]
    return load_series(project / "patches")


def test_unreadable_recipe_is_exit_3(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def denied(path: object, *a: object, **kw: object) -> int:
        if str(path).endswith(".toml"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", denied)
    r = invoke(project, "build", "fixture")
    assert_error(r, 3, "cannot read recipes/fixture.toml: Permission denied")
    r = invoke(project, "list")
    assert r.exit_code == 3 and "invalid: cannot read recipes/fixture.toml" in r.output


def test_non_utf8_recipe_names_the_line(project: Path) -> None:
    (project / "recipes" / "fixture.toml").write_bytes(b'name = "fixture"\n# caf\xe9\n')
    assert_error(invoke(project, "build", "fixture"), 3, "recipes/fixture.toml:2: not UTF-8 text (byte 0xe9)")


def test_huge_deep_and_special_recipes(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipes = project / "recipes"
    (recipes / "deep.toml").write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(RecipeError, match="deep.toml: not valid TOML"):
        load_recipe(recipes / "deep.toml", project, _series(project))
    monkeypatch.setattr(recipe_mod, "RECIPE_MAX", 100)
    (recipes / "big.toml").write_text("# " + "x" * 200 + "\n")
    with pytest.raises(RecipeError, match="big.toml is larger than 100 bytes"):
        load_recipe(recipes / "big.toml", project, _series(project))
    if hasattr(os, "mkfifo"):
        os.mkfifo(recipes / "fifo.toml")  # reading it would block forever
        with pytest.raises(RecipeError, match="fifo.toml is not a regular file"):
            load_recipe(recipes / "fifo.toml", project, _series(project))
    (recipes / "dangling.toml").symlink_to(project / "nowhere.toml")
    with pytest.raises(RecipeError, match="dangling.toml: the recipe file is a link to nothing"):
        load_recipe(resolve_recipe_path("dangling", project), project, _series(project))


def test_list_marks_every_bad_recipe_invalid_and_goes_on(project: Path) -> None:
    recipes = project / "recipes"
    (recipes / "a-folder.toml").mkdir()
    (recipes / "dangling.toml").symlink_to(project / "nowhere.toml")
    (recipes / "latin1.toml").write_bytes(b'name = "caf\xe9"\n')
    # a key that looks like rich markup: shown as text, never interpreted
    (recipes / "markup.toml").write_text('"[/red]" = 1\n')
    if hasattr(os, "mkfifo"):
        os.mkfifo(recipes / "fifo.toml")
    r = invoke(project, "list")
    assert r.exit_code == 3, r.output
    out = " ".join(r.output.split())
    for needle in (
        "a-folder.toml: is a folder",
        "dangling.toml: the recipe file is a link",
        "latin1.toml:1: not UTF-8",
        "markup.toml: [/red]: unknown key",
    ):
        assert needle in out, r.output
    assert "fixture" in out and "ok" in out  # the good recipe is still listed
