"""smoke.realmodel: which real model the kld and speed checks use, and the skip without one."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from patchkit.core.errors import ConfigError
from patchkit.smoke import kld, realmodel, speed
from patchkit.smoke.env import SmokeEnv
from patchkit.spec.buildinfo import BuildInfo, CheckStatus
from tests.fixtures.buildinfo import build_info_json


def _gguf(path: Path, body: bytes = b"\x03\x00\x00\x00rest") -> Path:
    path.write_bytes(b"GGUF" + body)
    return path


def test_nothing_found_is_none_and_the_checks_skip_naming_the_command(tmp_path: Path) -> None:
    assert realmodel.find_model(env={}) is None  # a fresh cache, no installed package, no env var
    out = tmp_path / "out"
    (out / "bin").mkdir(parents=True)
    for tool in ("llama-perplexity", "llama-bench"):
        (out / "bin" / tool).write_text("")  # present, but never run: there is no model
    env = SmokeEnv(
        out_dir=out,
        info=BuildInfo.from_json(build_info_json()),
        workdir=tmp_path / "w",
        timeout=5,
        base_env={},
        model=None,
        model_why=realmodel.NO_MODEL,
    )
    for check in (kld.check_kld, speed.check_speed):
        r = check(env)
        assert r.status is CheckStatus.SKIP and "`patchkit model get smollm2`" in r.why
        assert r.kld == () and r.speed == () and r.model == ""


def test_an_explicit_path_and_the_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = _gguf(tmp_path / "m.gguf")
    got = realmodel.find_model(m, env={})
    assert got is not None and got.path == m.resolve()
    assert got.label == f"m.gguf sha256={hashlib.sha256(m.read_bytes()).hexdigest()}"
    env_got = realmodel.find_model(env={realmodel.ENV_VAR: str(m)})
    assert env_got is not None and env_got.path == m.resolve()
    assert realmodel.find_model(m, env={realmodel.ENV_VAR: "smollm2"}) == got  # --model first
    # the environment passed in, never the process's
    monkeypatch.setenv(realmodel.ENV_VAR, str(m))
    assert realmodel.find_model(env={}) is None


@pytest.mark.parametrize("what", ["missing", "dir", "not-gguf"])
def test_a_bad_model_is_one_line(tmp_path: Path, what: str) -> None:
    path = {"missing": tmp_path / "nope.gguf", "dir": tmp_path, "not-gguf": tmp_path / "x.bin"}[what]
    if what == "not-gguf":
        path.write_bytes(b"PK\x03\x04zip")
    with pytest.raises(ConfigError, match="--model"):
        realmodel.find_model(path, env={})
    with pytest.raises(ConfigError, match=realmodel.ENV_VAR):
        realmodel.find_model(env={realmodel.ENV_VAR: str(path)})


def test_a_known_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {realmodel.ENV_VAR: "smollm2"}
    with pytest.raises(ConfigError, match="not in the cache") as e:
        realmodel.find_model(env=env)
    assert "patchkit model get smollm2" in (e.value.hint or "")
    cached = _gguf(tmp_path / "SmolLM2.gguf")
    monkeypatch.setattr(realmodel, "cached_model", lambda name: cached)
    got = realmodel.find_model(env=env)
    assert got is not None and got.path == cached
    assert got.label.endswith("sha256=" + realmodel.KNOWN["smollm2"].sha256)  # not re-hashed
    assert realmodel.find_model(env={}) == got  # the cached default
