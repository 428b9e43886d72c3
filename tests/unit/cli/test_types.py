"""No float option takes NaN or infinity (click's FloatRange lets NaN
through every bound: `--timeout nan` was a traceback in bench and rpc-probe)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from patchkit.cli import _COMMANDS, main
from patchkit.cli._types import FiniteFloatRange

NOT_FINITE = ("nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e999")


def _commands() -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(main)
    for name in sorted(_COMMANDS):
        cmd = main.get_command(ctx, name)
        assert cmd is not None
        stack = [(name, cmd)]
        while stack:
            path, c = stack.pop()
            yield path, c
            if isinstance(c, click.Group):
                stack += [(f"{path} {n}", c.commands[n]) for n in c.commands]


def _float_params() -> list[tuple[str, click.Command, click.Parameter]]:
    """Every float parameter of every command (also one whose type click inferred from a
    float default)."""
    found = [
        (path, cmd, p)
        for path, cmd in [("patchkit", main), *_commands()]
        for p in cmd.params
        if isinstance(p.type, click.types.FloatParamType)
    ]
    assert found, "no float options found: the walk is broken"
    return found


@pytest.mark.parametrize(
    ("path", "cmd", "param"), [pytest.param(*t, id=f"{t[0]} {t[2].name}") for t in _float_params()]
)
def test_no_float_option_accepts_nan_or_infinity(
    path: str, cmd: click.Command, param: click.Parameter
) -> None:
    ctx = click.Context(cmd, info_name=path)
    for value in NOT_FINITE:
        with pytest.raises(click.BadParameter, match="is not a finite number"):
            param.type.convert(value, param, ctx)
    assert isinstance(param.type, FiniteFloatRange), f"{path} {param.name}: use patchkit.cli._types"


def test_the_walk_finds_the_known_timeouts() -> None:
    names = {(path, p.name) for path, _, p in _float_params()}
    assert {("bench", "timeout"), ("rpc-probe", "timeout"), ("smoke", "timeout")} <= names


@pytest.mark.parametrize(
    "args",
    [
        ["rpc-probe", "127.0.0.1:9", "--timeout", "nan"],
        ["bench", "out/none", "--timeout", "nan"],
        ["smoke", "out/none", "--timeout", "nan"],
        ["bench", "out/none", "--timeout", "inf"],
    ],
)
def test_nan_is_a_usage_error_before_anything_runs(args: list[str], tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["--project", str(tmp_path), *args])
    assert r.exit_code == 2, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    lines = [ln for ln in r.output.splitlines() if ln.startswith("error: ")]
    assert lines == [f"error: Invalid value for '--timeout': {args[-1]!r} is not a finite number."], r.output
    assert "Traceback" not in r.output


def test_finite_floats_still_pass_and_bounds_still_hold() -> None:
    t = FiniteFloatRange(min=0.1, max=600)
    assert t.convert("5", None, None) == 5.0 and t.convert(2.5, None, None) == 2.5
    with pytest.raises(click.BadParameter, match="0.1<=x<=600"):
        t.convert("0.01", None, None)
    with pytest.raises(click.BadParameter, match="not a valid float"):
        t.convert("abc", None, None)
