"""Golden messages of the structured errors: what the CLI says for each problem kind
(engines raise fields; patchkit/cli/problems/ writes the words and the hint)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from patchkit.cli.problems import RENDERERS, render
from patchkit.cli.problems.fs import RENDERERS as FS_RENDERERS
from patchkit.core.errors import ConfigError, FatalError, ReleaseError
from patchkit.core.fs import Foreign, ForeignEntry
from patchkit.release.release import ImportCheckFailed
from tests.unit.cli.problems_bench_golden import GOLDEN as BENCH
from tests.unit.cli.problems_build_golden import GOLDEN as BUILD
from tests.unit.cli.problems_git_golden import GOLDEN as GIT
from tests.unit.cli.problems_rebuild_golden import GOLDEN as REBUILD
from tests.unit.cli.problems_refresh_golden import GOLDEN as REFRESH
from tests.unit.cli.problems_rpc_golden import GOLDEN as RPC
from tests.unit.cli.problems_spec_golden import GOLDEN as SPEC

OUT = Path("/home/u/out")
GOLDEN: list[tuple[FatalError, str, str]] = [
    (
        ConfigError(problem=ForeignEntry(folder=OUT, entry=Foreign("notes.txt"), owner="build")),
        "/home/u/out holds notes.txt, which patchkit did not write there: not replacing the folder",
        "pick another --out, or move that folder's contents away",
    ),
    (
        ConfigError(problem=ForeignEntry(folder=OUT, entry=Foreign("bin", link=True), owner="build")),
        "/home/u/out holds bin (a symlink), which patchkit did not write there: not replacing the folder",
        "pick another --out, or move that folder's contents away",
    ),
    (
        ConfigError(
            problem=ForeignEntry(
                folder=OUT, entry=Foreign("bin/x", why="not an artifact build-info.json lists"), owner="build"
            )
        ),
        "/home/u/out holds bin/x (not an artifact build-info.json lists), which patchkit did not write "
        "there: not replacing the folder",
        "pick another --out, or move that folder's contents away",
    ),
    (
        ConfigError(problem=ForeignEntry(folder=OUT, entry=Foreign("logs", link=True), owner="bench")),
        "/home/u/out holds logs (a link), which patchkit bench did not write there",
        "give an empty or new folder, or one a previous bench wrote",
    ),
    (
        ReleaseError(problem=ImportCheckFailed(stage="build", problems=("a: 1", "b: 2", "c: 3", "d: 4"))),
        "the import check failed: a: 1; b: 2; c: 3 (and 1 more)",
        "every library a binary loads must be in bin/, in the CUDA runtime bundle, or an allowed "
        "system library (docs/release.md)",
    ),
    (
        ReleaseError(problem=ImportCheckFailed(stage="runtime", problems=("bin/libcublas.so.12: x",))),
        "the CUDA runtime bundle's own imports do not resolve: bin/libcublas.so.12: x",
        "every library a binary loads must be in bin/, in the CUDA runtime bundle, or an allowed "
        "system library (docs/release.md)",
    ),
]


GOLDEN += BUILD + REBUILD + RPC + SPEC + GIT + BENCH + REFRESH


@pytest.mark.parametrize(("error", "message", "hint"), GOLDEN)
def test_each_problem_is_said_in_the_words_it_always_was(error: FatalError, message: str, hint: str) -> None:
    assert render(error) == (message, hint)


def test_every_problem_kind_has_a_renderer_and_a_golden_message() -> None:
    assert {type(e.problem) for e, _, _ in GOLDEN} | set(FS_RENDERERS) == set(
        RENDERERS
    )  # fs: test_problems_fs


def test_an_error_without_a_problem_keeps_its_words_and_a_raisers_hint_wins() -> None:
    assert render(ConfigError("plain", hint="do x")) == ("plain", "do x")
    e = ConfigError(problem=ForeignEntry(folder=OUT, entry=Foreign("a"), owner="bench"), hint="mine")
    assert render(e)[1] == "mine"


def test_the_cli_prints_the_rendered_words(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """End to end through the error handler: one line, the hint, exit 2."""
    from patchkit.cli import main
    from patchkit.cli import pe as pe_cli

    def boom(*a: object, **kw: object) -> None:
        raise ConfigError(problem=ForeignEntry(folder=OUT, entry=Foreign("notes.txt"), owner="build"))

    monkeypatch.setattr(pe_cli, "pe_info", boom)
    f = tmp_path / "a.exe"
    f.write_bytes(b"MZ")
    r = CliRunner().invoke(main, ["pe-info", str(f)])
    assert r.exit_code == 2
    assert "error: /home/u/out holds notes.txt, which patchkit did not write there" in r.output
    assert "hint: pick another --out" in r.output
