"""The refresh engine names the next steps (`--continue`, `--skip`, ...) as placeholders;
the CLI writes them as the command lines the user types (the recipe as given,
`--workdir` when one was given). The engine spells no command line."""

from __future__ import annotations

from pathlib import Path

from patchkit.cli.problems import words
from patchkit.core.text import printable
from patchkit.upkeep.refresh.hints import action, outside_actions, render
from patchkit.upkeep.refresh.problems import SourceChanged


def test_placeholders_become_the_command_lines_the_user_types() -> None:
    hint = f"fix them, then `{action('--continue')}`; `{action('--skip')}` drops 0001-x.patch"
    assert "patchkit" not in hint
    assert render(hint) == (
        "fix them, then `patchkit refresh --continue`; `patchkit refresh --skip` drops 0001-x.patch"
    )
    assert render(hint, prefix="patchkit refresh ollama", workdir=Path("/w/my dir")) == (
        "fix them, then `patchkit refresh ollama --continue --workdir '/w/my dir'`; "
        "`patchkit refresh ollama --skip --workdir '/w/my dir'` drops 0001-x.patch"
    )
    said = words(SourceChanged(path=Path("/p/0001-x.patch"), workdir=Path("/w")))
    assert said is not None
    assert render(said[1], prefix="patchkit refresh q") == (
        "run `patchkit refresh q --abort` and start again"
    )
    # an action holding a NUL cannot end its placeholder early
    assert render(action("--drop a\0b")) == "patchkit refresh --drop ab"


def test_text_quoted_around_a_placeholder_is_escaped_and_the_placeholder_kept() -> None:
    line = f"0001-\x1b[31mx.patch is upstream: `{action('--skip')}` drops it"
    shown = outside_actions(line, printable)
    assert "\x1b" not in shown and "\\x1b" in shown
    assert render(shown, prefix="patchkit refresh q").endswith("`patchkit refresh q --skip` drops it")
