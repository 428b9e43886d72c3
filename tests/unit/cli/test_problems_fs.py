"""Golden messages of the file problems (core.fs_problems): the facts from the problem, the
advice from patchkit/cli/problems/fs.py, in the words they always were."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.cli.problems import render
from patchkit.cli.problems.fs import RENDERERS
from patchkit.core.errors import BuildError, ConfigError, FatalError, RecipeError
from patchkit.core.fs_problems import CopyRefused, TooLarge, WriteFailed, WriteRefused, human_size

P = Path("/home/u/out/x.json")
GOLDEN: list[tuple[FatalError, str, str]] = [
    (
        ConfigError(problem=WriteRefused(path=P, found="special", kind="a folder")),
        "/home/u/out/x.json is a folder: refusing to write to it",
        "name a regular file (a new one, or one to replace), or /dev/stdout to print it",
    ),
    (
        ConfigError(problem=WriteRefused(path=P, found="not-replaceable", kind="a FIFO")),
        "/home/u/out/x.json is a FIFO: refusing to replace it",
        "name a regular file (or a new one)",
    ),
    (
        ConfigError(problem=WriteRefused(path=P, found="dangling-link", link="/gone")),
        "/home/u/out/x.json is a symlink to /gone, which does not exist: refusing to write through it",
        "remove the link, or name the file itself",
    ),
    (
        ConfigError(problem=WriteRefused(path=P, found="no-folder", parent=Path("/home/u/out"))),
        "cannot write /home/u/out/x.json: /home/u/out is not a folder",
        "name a file in an existing folder",
    ),
    (
        ConfigError(problem=WriteRefused(path=P, found="no-reader")),
        "/home/u/out/x.json is a FIFO that no process reads: refusing to wait for one",
        "start its reader first, or name a regular file",
    ),
    (
        BuildError(
            problem=CopyRefused(
                path=P, found="outside", real=Path("/etc/passwd"), root=Path("/b"), what="reply"
            )
        ),
        "reply: /home/u/out/x.json resolves to /etc/passwd, outside /b: refusing to copy it",
        "a symlink leaves the folder it belongs to; remove it (or rebuild with --clean)",
    ),
    (
        BuildError(problem=CopyRefused(path=P, found="not-plain")),
        "/home/u/out/x.json is not a regular file: refusing to copy it",
        "only plain files are copied out of a build",
    ),
    (
        RecipeError(problem=TooLarge(label="recipes/x.toml", limit=1 << 20)),
        "recipes/x.toml is larger than 1 MiB: not a file patchkit wrote or reads",
        "is it the right file?",
    ),
    (
        BuildError(
            problem=WriteFailed(
                dest=P, folder=Path("/home/u/out"), found="full", mount=Path("/home"), free=1536
            )
        ),
        "no space left on the file system of /home/u/out (mounted at /home, 1.5 KiB free) while writing "
        "/home/u/out/x.json",
        "free space on /home, or pass another --out on another disk",
    ),
    (
        BuildError(
            problem=WriteFailed(dest=P, folder=Path("/home/u/out"), found="too-large", mount=Path("/"))
        ),
        "/home/u/out/x.json is too large for /home/u/out: its file system (mounted at /, free space "
        "unknown) or a file size limit (ulimit -f) refuses it",
        "free space on /, or pass another --out on another disk",
    ),
    (
        ConfigError(
            problem=WriteFailed(dest=P, folder=Path("/o"), found="refused", reason="Permission denied")
        ),
        "cannot write /home/u/out/x.json: Permission denied",
        "is /o writable? Pass another --out, or fix its permissions",
    ),
]


@pytest.mark.parametrize(("error", "message", "hint"), GOLDEN)
def test_each_file_problem_is_said_in_the_words_it_always_was(
    error: FatalError, message: str, hint: str
) -> None:
    assert render(error) == (message, hint)
    # quoted outside the CLI (a list row, a wrapping error), the facts read the same
    assert error.message == message and error.hint == ""


def test_every_file_problem_kind_has_a_renderer_and_a_golden_message() -> None:
    assert {type(e.problem) for e, _, _ in GOLDEN} == set(RENDERERS)
    kinds = {(type(e.problem), getattr(e.problem, "found", "")) for e, _, _ in GOLDEN}
    assert len(kinds) == len(GOLDEN)  # one case per kind


def test_sizes_are_said_in_binary_units() -> None:
    assert [human_size(n) for n in (0, 1023, 1024, 1536, 5 << 20, 3 << 30)] == [
        "0 bytes",
        "1023 bytes",
        "1 KiB",
        "1.5 KiB",
        "5 MiB",
        "3 GiB",
    ]
