"""Integration tests run real processes (git, cmake, ninja, compilers, fake binaries,
servers) on hermetic fixtures: every test collected under this folder is marked
``integration``, so ``-m integration`` / ``-m "not integration"`` select by folder."""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # hooks in a conftest see the whole session's items: mark only those under this folder
    for item in items:
        if _HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.integration)
