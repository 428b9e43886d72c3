"""The CLI's result printer (cli._common): results on stdout, plain off a terminal."""

from __future__ import annotations

import io
import json
import sys

import click
import pytest
from click.testing import CliRunner
from rich.table import Table

from patchkit.cli._common import TABLE_WIDTH, out, out_json, out_table


def _run(body: object) -> tuple[str, str]:
    """Run ``body()`` as a click command; its (stdout, stderr)."""

    @click.command()
    def cmd() -> None:
        body()  # type: ignore[operator]

    r = CliRunner().invoke(cmd, [])
    assert r.exit_code == 0, r.output
    return r.stdout, r.stderr


def _wide_table() -> Table:
    t = Table(title="things", title_justify="left")
    for col in ("name", "what"):
        t.add_column(col)
    t.add_row("[red]cuda[/red]", "x" * 150)  # markup styles a terminal only
    t.add_row("cpu", "short")
    return t


def test_out_is_stdout_and_err_is_the_log() -> None:
    stdout, stderr = _run(lambda: (out("the result ✓"), out("a note", err=True)))
    assert stdout == "the result ✓\n"
    assert stderr == "a note\n"


def test_a_table_off_a_terminal_is_plain_one_line_per_row() -> None:
    stdout, stderr = _run(lambda: out_table(_wide_table()))
    assert stderr == ""
    assert "\x1b[" not in stdout  # no colour codes in a pipe or a file
    rows = [ln for ln in stdout.splitlines() if "cuda" in ln]
    assert len(rows) == 1 and "x" * 150 in rows[0]  # not squeezed to 80 columns: grep finds it
    assert all(len(ln) <= TABLE_WIDTH and ln == ln.rstrip() for ln in stdout.splitlines())
    assert stdout.splitlines()[0] == "things"


def test_a_table_for_the_log_goes_to_stderr() -> None:
    stdout, stderr = _run(lambda: out_table(_wide_table(), err=True))
    assert stdout == ""
    assert [ln for ln in stderr.splitlines() if "cuda" in ln and "x" * 150 in ln]


def test_json_is_one_sorted_document() -> None:
    stdout, stderr = _run(lambda: out_json({"b": 1, "a": {"d": [2], "c": None}}))
    assert stderr == ""
    assert json.loads(stdout) == {"a": {"c": None, "d": [2]}, "b": 1}
    assert stdout.index('"a"') < stdout.index('"b"') and stdout.index('"c"') < stdout.index('"d"')


def test_a_pipe_in_a_legacy_code_page_gets_escapes_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="cp1252", errors="strict")
    monkeypatch.setattr(sys, "stdout", stream)
    out("✓ ok: 0001.patch")
    stream.flush()
    assert raw.getvalue().decode("cp1252") == "\\u2713 ok: 0001.patch\n"


def test_a_table_on_a_terminal_is_styled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich: treat stdout as a terminal
    stdout, _ = _run(lambda: out_table(_wide_table()))
    assert "\x1b[31mcuda" in stdout
