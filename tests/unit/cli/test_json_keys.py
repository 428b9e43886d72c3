"""The ``--json`` keys each command's docstring lists are generated from its records'
field docs (core.record.key_list), so they cannot drift from what ``--json`` prints.

After changing a record, the failure message shows the text to paste into the docstring.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from patchkit.binary.pe_stack import PEInfo, StackEdit
from patchkit.core.record import encode, json_keys, key_list

# (command module, the heading its key list follows, the record --json prints)
KEY_LISTS = [
    ("patchkit.cli.pe", "``pe-stack --json`` keys:", "EditsJson"),
    ("patchkit.cli.pe", "``pe-info --json`` keys:", "InfoJson"),
    ("patchkit.cli.bench", "``bench --json`` (bench.json) keys:", "BenchReport"),
    ("patchkit.cli.rpc_probe", "``rpc-probe --json`` keys:", "ProbeJson"),
    ("patchkit.cli.doctor", "``doctor --json`` keys:", "Report"),
    ("patchkit.cli.release", "``release --json`` keys:", "ReleaseJson"),
    ("patchkit.cli.verify", "``verify --json`` keys:", "VerifyJson"),
    ("patchkit.cli.model", "``model path --json`` keys:", "PathJson"),
    ("patchkit.cli.model", "``model list --json`` keys:", "ModelsJson"),
    ("patchkit.cli.list", "``list --json`` keys:", "ListJson"),
    ("patchkit.cli.root", "``root prepare --json`` keys:", "RootRecord"),
    ("patchkit.cli.root", "``root list --json`` keys:", "RootsJson"),
    ("patchkit.cli.refresh", "``refresh --json`` keys:", "RefreshResult"),
    ("patchkit.cli.plan", "``plan --json`` keys:", "PlanReport"),
    ("patchkit.cli.rebuild", "``rebuild --json`` keys (of each archive's object):", "RebuildJson"),
]


def _section(doc: str, heading: str) -> str:
    """The list after ``heading`` in ``doc``, up to a blank line or the end."""
    assert heading in doc, f"the docstring has no {heading!r} heading"
    after = doc.split(heading, 1)[1].lstrip("\n")
    return after.split("\n\n", 1)[0].rstrip()


@pytest.mark.parametrize(("module", "heading", "record"), KEY_LISTS)
def test_the_docstring_lists_the_generated_keys(module: str, heading: str, record: str) -> None:
    mod = importlib.import_module(module)
    want = key_list(getattr(mod, record))
    got = _section(mod.__doc__ or "", heading)
    assert got == want, f"{module}: paste this after {heading!r}:\n\n{want}\n"


@pytest.mark.parametrize(("module", "heading", "record"), KEY_LISTS)
def test_every_key_has_a_doc(module: str, heading: str, record: str) -> None:
    mod = importlib.import_module(module)
    assert [k for k, doc in json_keys(getattr(mod, record)) if not doc] == []


def _keys(obj: object, prefix: str = "") -> set[str]:
    """The dotted keys of JSON data, as json_keys names them."""
    out: set[str] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.add(prefix + k)
            out |= _keys(v, prefix + k + ".")
    elif isinstance(obj, list):
        for v in obj:
            out |= _keys(v, prefix[:-1] + "[].")
    return out


def test_the_listed_keys_are_the_printed_keys(tmp_path: Path) -> None:
    """What the key list says is what encode writes (pe-info's record, a real value)."""
    from patchkit.cli.pe import EditsJson, InfoJson

    info = PEInfo(
        path=tmp_path / "a.exe",
        machine="x86_64",
        format="PE32+",
        subsystem="console",
        is_dll=False,
        large_address_aware=True,
        stack_reserve=1 << 21,
        stack_commit=4096,
        checksum=1,
        checksum_computed=1,
        signed=False,
        certificate_offset=0,
        certificate_size=0,
        size=1024,
    )
    edit = StackEdit(
        file=tmp_path / "a.exe",
        reserve_before=1,
        reserve_after=2,
        commit_before=1,
        commit_after=1,
        checksum_before=3,
        checksum_after=4,
        changed=True,
    )
    for rec in (InfoJson(files=(info,)), EditsJson(edits=(edit,))):
        data = json.loads(json.dumps(encode(rec)))
        assert _keys(data) == {k for k, _ in json_keys(type(rec))}
    assert encode(info)["path"] == str(tmp_path / "a.exe") and encode(info)["checksum_ok"] is True
