"""`patchkit model path|list|get`: the result on stdout (the path alone, for `$(...)`)."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from patchkit.cli import main
from patchkit.weights import store

DATA = b"GGUF" + bytes(range(256)) * 8
MODEL_KEYS = {"name", "description", "package", "version", "sha256", "size", "license", "path"}


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> store.KnownModel:
    m = dataclasses.replace(
        store.KNOWN["smollm2"],
        name="tiny",
        package="llm-tiny",
        module="llm_tiny_fake_pk",
        member="llm_tiny_fake_pk/tiny.gguf",
        sha256=hashlib.sha256(DATA).hexdigest(),
        size=len(DATA),
    )
    monkeypatch.setitem(store.KNOWN, "tiny", m)
    return m


def _cli(*args: str) -> Result:
    r = CliRunner().invoke(main, list(args))
    assert "Traceback" not in r.output
    return r


def _get(tmp_path: Path) -> Path:
    src = tmp_path / "s.tar.gz"
    with tarfile.open(src, "w:gz") as tar:
        info = tarfile.TarInfo("x/llm_tiny_fake_pk/tiny.gguf")
        info.size = len(DATA)
        tar.addfile(info, io.BytesIO(DATA))
    r = _cli("model", "get", "tiny", "--from", str(src))
    assert r.exit_code == 0, r.output
    path = Path(r.stdout.strip())  # get: the path alone on stdout, the rest on stderr
    assert r.stdout == f"{path}\n" and path.read_bytes() == DATA
    assert "sha256" in r.stderr and str(path) in r.stderr
    return path


def test_model_path_is_the_path_and_nothing_else(tiny: store.KnownModel, tmp_path: Path) -> None:
    r = _cli("model", "path", "tiny")
    assert r.exit_code == 2 and r.stdout == "" and "patchkit model get tiny" in r.stderr
    path = _get(tmp_path)
    r = _cli("model", "path", "tiny")
    assert r.exit_code == 0 and r.stdout == f"{path}\n" and r.stderr == ""
    r = _cli("model", "path", "tiny", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout) == {"name": "tiny", "path": str(path)}


def test_model_list_on_stdout_and_as_json(tiny: store.KnownModel, tmp_path: Path) -> None:
    r = _cli("model", "list")
    assert r.exit_code == 0 and r.stderr == ""
    lines = r.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines] == list(store.KNOWN)
    assert "tiny: SmolLM2-135M-Instruct" in r.stdout and "not fetched (`patchkit model get tiny`)" in r.stdout
    data = json.loads(_cli("model", "list", "--json").stdout)
    assert data["schema"] == 1 and [m["name"] for m in data["models"]] == list(store.KNOWN)
    assert all(set(m) == MODEL_KEYS for m in data["models"])
    (t,) = [m for m in data["models"] if m["name"] == "tiny"]
    assert t["path"] is None and t["sha256"] == tiny.sha256 and t["size"] == len(DATA)
    path = _get(tmp_path)
    r = _cli("model", "list")
    assert f"tiny: {tiny.description}, from llm-tiny==0.1.2: {path}" in r.stdout.splitlines()
    data = json.loads(_cli("model", "list", "--json").stdout)
    assert next(m for m in data["models"] if m["name"] == "tiny")["path"] == str(path)
