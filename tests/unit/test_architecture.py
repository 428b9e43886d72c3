"""The import rules of the package (README, "Code map") and who may catch FatalError,
checked on the source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.fixtures.paths import PACKAGE

PKG = PACKAGE

# room -> the rooms it may import (besides itself). cli may import anything.
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "spec": {"core"},
    "git": {"core"},
    "rpc": {"core", "spec"},
    "smoke": {"core", "spec", "rpc", "weights"},
    "weights": {"core"},
    "binary": {"core"},
    "builder": {"core", "spec", "git", "smoke", "binary"},
    "upkeep": {"core", "spec", "git"},
    "release": {"core", "spec", "binary"},
    "bench": {"core", "spec", "rpc", "smoke", "weights"},
    "doctor": {"core", "spec", "builder"},
    "rebuild": {"core", "spec", "builder", "release"},
    "plan": {"core", "spec", "rpc", "bench", "smoke", "weights"},
}
TOP_LEVEL = {"__init__.py", "__main__.py"}
# ruff's TID251 refuses subprocess everywhere but core/proc.py and the modules allowed to
# read the environment (its allowances are per rule, not per API); this covers those too
SUBPROCESS_OK = {"core/proc.py"}
# only the CLI turns a FatalError into one line and an exit code; below it a module catches
# the subclasses it expects (ToolMissing, SourceError, ...), never the base class
CATCH_FATAL_OK = ("cli/",)


def _imports(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, node.lineno))
            out += [(f"{node.module}.{a.name}", node.lineno) for a in node.names]
    return out


def _room(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "patchkit" or parts[1].startswith("__"):
        return None  # not patchkit's, or the package face (patchkit.__version__)
    return parts[1]


def _sources() -> list[Path]:
    return sorted(PKG.rglob("*.py"))


def violations(root: Path = PKG) -> list[str]:
    bad: list[str] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if "/" not in rel:
            if rel not in TOP_LEVEL:
                bad.append(f"{rel}: a module at the package top level")
            continue
        room = rel.split("/")[0]
        for module, line in _imports(path):
            if module.split(".")[0] == "subprocess" and rel not in SUBPROCESS_OK:
                bad.append(f"{rel}:{line} imports subprocess (only core/proc.py runs processes)")
            target = _room(module)
            if target is None or target == room or room == "cli":
                continue
            if target not in ALLOWED.get(room, set()):
                bad.append(
                    f"{rel}:{line} imports patchkit.{target} ({room} may import "
                    f"{', '.join(sorted(ALLOWED.get(room, set()))) or 'nothing of patchkit'})"
                )
    return bad


def test_every_room_is_known() -> None:
    rooms = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms == set(ALLOWED) | {"cli"}


def test_the_import_rules_hold() -> None:
    assert violations() == []


def test_the_rule_check_fails_on_a_forbidden_import(tmp_path: Path) -> None:
    fake = tmp_path / "patchkit"
    for room, body in (
        ("core", "from patchkit.cli import main\n"),
        ("spec", "import subprocess\nfrom patchkit.builder import pipeline\n"),
    ):
        (fake / room).mkdir(parents=True)
        (fake / room / "__init__.py").write_text("")
        (fake / room / "x.py").write_text(body)
    (fake / "loose.py").write_text("")
    found = violations(fake)
    assert any("core/x.py:1 imports patchkit.cli" in v for v in found)
    assert any("spec/x.py:1 imports subprocess" in v for v in found)
    assert any("spec/x.py:2 imports patchkit.builder" in v for v in found)
    assert any("loose.py: a module at the package top level" in v for v in found)


def _names_of_fatal(tree: ast.AST) -> set[str]:
    """The names FatalError goes by in a module (``FatalError``, an ``as`` alias)."""
    names = {"FatalError"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "patchkit.core.errors":
            names |= {a.asname or a.name for a in node.names if a.name == "FatalError"}
    return names


def _catches_fatal(handler: ast.ExceptHandler, names: set[str]) -> bool:
    """Whether ``except ...`` names FatalError itself (alone, in a tuple, as errors.FatalError)."""
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    for t in types:
        if isinstance(t, ast.Name) and t.id in names:
            return True
        if isinstance(t, ast.Attribute) and t.attr == "FatalError":
            return True
    return False


def fatal_catchers(root: Path = PKG) -> list[str]:
    """``file:line`` of every ``except FatalError`` outside the CLI."""
    bad: list[str] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(CATCH_FATAL_OK):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        names = _names_of_fatal(tree)
        handlers = [n for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler) and n.type is not None]
        for node in sorted(handlers, key=lambda n: n.lineno):
            if _catches_fatal(node, names):
                bad.append(f"{rel}:{node.lineno} catches FatalError (only the CLI does; catch the subclass)")
    return bad


def test_only_the_cli_catches_fatal_error() -> None:
    assert fatal_catchers() == []


def test_the_catch_check_fails_on_a_caught_fatal_error(tmp_path: Path) -> None:
    fake = tmp_path / "patchkit"
    bodies = {
        "smoke/a.py": "from patchkit.core.errors import FatalError\ntry:\n    pass\nexcept FatalError:\n    pass\n",
        "smoke/b.py": "from patchkit.core import errors\ntry:\n    pass\nexcept (OSError, errors.FatalError):\n    pass\n",
        "doctor/c.py": (
            "from patchkit.core.errors import FatalError as Fatal\n"
            "try:\n    pass\nexcept Fatal as e:\n    print(e)\n"
        ),
        "doctor/ok.py": (
            "from patchkit.core.errors import FatalError, ToolMissing\n"
            "try:\n    pass\nexcept (ToolMissing, OSError):\n    pass\nexcept:\n    raise\n"
        ),
        "cli/cmd.py": "from patchkit.core.errors import FatalError\ntry:\n    pass\nexcept FatalError:\n    pass\n",
        "builder/x.py": "try:\n    pass\nexcept FatalError:\n    pass\n",
    }
    for rel, body in bodies.items():
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        (fake / rel).write_text(body)
    found = fatal_catchers(fake)
    assert sorted(found) == [
        "builder/x.py:3 catches FatalError (only the CLI does; catch the subclass)",
        "doctor/c.py:4 catches FatalError (only the CLI does; catch the subclass)",
        "smoke/a.py:4 catches FatalError (only the CLI does; catch the subclass)",
        "smoke/b.py:4 catches FatalError (only the CLI does; catch the subclass)",
    ]


@pytest.mark.parametrize("path", _sources(), ids=lambda p: p.relative_to(PKG).as_posix())
def test_modules_declare_all(path: Path) -> None:
    if path.name in ("__init__.py", "__main__.py"):
        return
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    }
    assert "__all__" in names, f"{path.relative_to(PKG)} has no __all__"
