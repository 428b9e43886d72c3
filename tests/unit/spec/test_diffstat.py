"""The diffstat of a diff (spec.diffstat), against what `git format-patch` wrote for the
synthetic queue (renames, a mode change, created and deleted files, binary literal and
delta hunks) and git's rules for names and widths."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.spec.diffstat import diffstat, is_stat_line, pprint_rename, quote_path
from tests.fixtures.queue import QUEUE_DATA

MAILS = sorted(QUEUE_DATA.glob("*.patch"))


def _split(path: Path) -> tuple[str, str]:
    """(the diffstat git wrote, the diff) of a format-patch file."""
    text = path.read_bytes().decode("utf-8", "surrogateescape")
    at = text.index("\ndiff --git ") + 1
    stat_at = text.index("\n---\n") + len("\n---\n")
    return text[stat_at : at - 1], text[at:]


@pytest.mark.parametrize("mail", MAILS, ids=[m.name[:4] for m in MAILS])
def test_the_block_is_the_one_git_wrote(mail: Path) -> None:
    written, diff = _split(mail)
    assert diffstat(diff) == written


def test_every_kind_of_line_is_in_the_fixture() -> None:
    stats = "".join(_split(m)[0] for m in MAILS)
    for needle in (
        "| Bin 0 -> 1024 bytes",  # a new binary file (literal)
        "| Bin 1024 -> 1024 bytes",  # a changed one (delta)
        " rename docs/{ => guide}/howto.txt (90%)",
        " mode change 100644 => 100755 tools/run.sh",
        " delete mode 100644 tests/test.c",
        " create mode 100644 docs/notes.txt",
    ):
        assert needle in stats


def test_names_widths_and_scaling() -> None:
    long = "d/" + "x" * 80 + ".c"
    diff = (
        f"diff --git a/{long} b/{long}\n--- a/{long}\n+++ b/{long}\n@@ -1,200 +1,1 @@\n"
        + "-a\n" * 200
        + "+b\n"
    )
    # both as git 2.39 writes them: a name cut from the front ("..." and from its first
    # "/" on, when one is left), the graph scaled to what is left of 72 columns
    assert diffstat(diff) == (
        " ..." + "x" * 40 + ".c | 201 +-----------------\n 1 file changed, 1 insertion(+), 200 deletions(-)\n"
    )
    deep = "/".join(f"dir{i:02d}" for i in range(12)) + "/f.c"
    created = f"diff --git a/{deep} b/{deep}\nnew file mode 100644\n--- /dev/null\n+++ b/{deep}\n@@ -0,0 +1 @@\n+a\n"
    assert diffstat(created) == (
        " .../dir03/dir04/dir05/dir06/dir07/dir08/dir09/dir10/dir11/f.c    | 1 +\n"
        " 1 file changed, 1 insertion(+)\n"
        f" create mode 100644 {deep}\n"
    )
    assert diffstat("") == ""
    assert quote_path("plain/name.c") == "plain/name.c"
    assert quote_path('tab\there "q" é') == '"tab\\there \\"q\\" \\303\\251"'
    assert pprint_rename("a/b/c.txt", "a/d/c.txt") == "a/{b => d}/c.txt"
    assert pprint_rename("old.txt", "new.txt") == "old.txt => new.txt"
    assert pprint_rename("src/x.c", "src/y/x.c") == "src/{ => y}/x.c"


def test_stat_lines_are_recognised() -> None:
    assert is_stat_line(" a.txt | 3 ++-") == "file"
    assert is_stat_line(" b.bin | Bin 0 -> 5 bytes") == "file"
    assert is_stat_line(" 2 files changed, 3 insertions(+), 1 deletion(-)") == "totals"
    assert is_stat_line(" 1 file changed, 1 deletion(-)") == "totals"
    assert is_stat_line(" create mode 100644 x") == "summary"
    assert is_stat_line(" rename a => b (100%)") == "summary"
    assert is_stat_line("a | b") is None
    assert is_stat_line("prose that mentions 2 files changed") is None
