"""core.errors: one base for user-facing failures, a distinct exit code per class."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.core import errors
from patchkit.core.errors import FatalError

EXIT_CODES = {
    "FatalError": 1,
    "ConfigError": 2,
    "RecipeError": 3,
    "SourceError": 4,
    "PatchError": 5,
    "BuildError": 6,
    "SmokeError": 7,
    "ToolMissing": 8,
    "LockBusy": 9,
    "PEError": 10,
    "CheckFailed": 11,
    "ReleaseError": 12,
    "CudaError": 13,
    "RpcError": 14,
    "RebuildDiffers": 15,
    "ServerStartError": 16,
}


def test_every_class_has_its_documented_exit_code() -> None:
    assert set(errors.__all__) == set(EXIT_CODES) | {"Problem"}
    for name, code in EXIT_CODES.items():
        cls = getattr(errors, name)
        assert issubclass(cls, FatalError) and cls.exit_code == code, name
    assert len(set(EXIT_CODES.values())) == len(EXIT_CODES)  # none shared


@pytest.mark.parametrize("name", sorted(EXIT_CODES))
def test_message_detail_and_hint(name: str) -> None:
    cls = getattr(errors, name)
    e = cls("the thing failed", detail="line 1\nline 2", hint="do this")
    assert str(e) == e.message == "the thing failed"
    assert (e.detail, e.hint) == ("line 1\nline 2", "do this")
    plain = cls("x")
    assert (plain.detail, plain.hint) == ("", "")
    with pytest.raises(FatalError, match="^the thing failed$"):
        raise e


def test_a_structured_error_carries_its_fields_and_says_them_without_a_renderer() -> None:
    from patchkit.core.fs import Foreign, ForeignEntry

    problem = ForeignEntry(folder=Path("/out"), entry=Foreign("x.txt"), owner="build")
    e = errors.ConfigError(problem=problem)
    assert e.problem is problem and e.exit_code == 2 and e.hint == ""
    assert (
        e.message
        == str(e)
        == "ForeignEntry(folder=/out, entry=Foreign(name='x.txt', link=False, why=''), owner=build)"
    )
