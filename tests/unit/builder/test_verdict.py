"""The smoke verdict a build keeps: every input changes its key, only a passed verdict is
kept and reused, ``rerun`` and a changed input run the checks (run_smoke faked here)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from patchkit.builder import verdict
from patchkit.builder.verdict import SmokeInputs, read_record, run_or_reuse, smoke_inputs, write_record
from patchkit.spec.buildinfo import (
    BuildInfo,
    CheckResult,
    CheckStatus,
    SmokeReport,
    SmokeStatus,
    read_build_info,
    write_build_info,
)
from tests.fixtures.buildinfo import build_info_json, patch_json

PASSED = SmokeReport(
    status=SmokeStatus.PASSED,
    checks=(
        CheckResult(name="version", status=CheckStatus.PASS, why="answered: llama-cli"),
        CheckResult(name="kld", status=CheckStatus.SKIP, why="no real model"),
    ),
)
FAILED = SmokeReport(
    status=SmokeStatus.FAILED,
    checks=(CheckResult(name="version", status=CheckStatus.FAIL, why="exit 1"),),
)


def _info(**overrides: Any) -> BuildInfo:
    return BuildInfo.from_json(build_info_json(**{"artifacts": [_art()], **overrides}))


@dataclasses.dataclass
class Case:
    info: BuildInfo
    tool_dir: Path
    model: Path | None
    checks: str = "suite-1"
    skip: tuple[str, ...] = ()
    reference: BuildInfo | None = None

    def inputs(self, known: dict[str, Any] | None = None) -> tuple[SmokeInputs, dict[str, Any]]:
        return smoke_inputs(
            self.info,
            tool_dirs=(self.tool_dir,),
            tools=("llama-perplexity", "test-llama-archs"),
            model=self.model,
            checks=self.checks,
            skip=self.skip,
            reference=self.reference,
            known=known,
        )


@pytest.fixture
def case(tmp_path: Path) -> Case:
    tools = tmp_path / "build" / "bin"
    tools.mkdir(parents=True)
    (tools / "llama-perplexity").write_bytes(b"perplexity v1")
    (tools / "libllama.so").write_bytes(b"libllama v1")
    (tools / "llama-cli").write_bytes(b"not a smoke tool: the artifact's hash counts")
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF model v1")
    return Case(info=_info(), tool_dir=tools, model=model)


def _key(case: Case) -> str:
    return case.inputs()[0].key


def test_each_input_changes_the_key(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    base = _key(case)
    assert _key(case) == base  # stable
    keys = {"base": base}

    def changed(label: str, c: Case) -> None:
        keys[label] = _key(c)

    changed(
        "artifact bytes", dataclasses.replace(case, info=_info(artifacts=[{**_art(), "sha256": "22" * 32}]))
    )
    changed(
        "another artifact", dataclasses.replace(case, info=_info(artifacts=[_art(), _art("bin/libggml.so")]))
    )
    changed("patches in build-info", dataclasses.replace(case, info=_info(patches=[patch_json("other")])))
    changed("runtime env", dataclasses.replace(case, info=_info(runtime_env={"LD_LIBRARY_PATH": "/cuda"})))
    changed("platform", dataclasses.replace(case, info=_info(platform={"os": "windows", "arch": "x86_64"})))
    changed("no model", dataclasses.replace(case, model=None))
    changed("checks", dataclasses.replace(case, checks="suite-2"))
    changed("skip", dataclasses.replace(case, skip=("kld",)))
    changed("reference", dataclasses.replace(case, reference=_info(identity="ef" * 32)))
    monkeypatch.setattr(verdict, "__version__", "9.9.9")
    changed("patchkit version", case)
    monkeypatch.undo()
    monkeypatch.setattr(verdict.platform, "machine", lambda: "riscv64")
    changed("host", case)
    monkeypatch.undo()
    (case.tool_dir / "llama-perplexity").write_bytes(b"perplexity v2")
    changed("smoke tool bytes", case)
    (case.tool_dir / "libllama.so").write_bytes(b"libllama v2")
    changed("a library beside the tools", case)
    (case.tool_dir / "test-llama-archs").write_bytes(b"archs")
    changed("a smoke tool appeared", case)
    assert case.model is not None
    case.model.write_bytes(b"GGUF model v2")
    changed("model bytes", case)
    assert len(set(keys.values())) == len(keys), keys


def _art(path: str = "bin/llama-cli") -> dict[str, Any]:
    return {"target": "llama-cli", "type": "EXECUTABLE", "path": path, "sha256": "11" * 32, "size": 3}


def test_what_does_not_change_the_key(case: Case) -> None:
    base = _key(case)
    volatile = _info(timings={"build": 99.0}, smoke=PASSED.to_json())
    assert _key(dataclasses.replace(case, info=volatile)) == base
    (case.tool_dir / "llama-cli").write_bytes(b"the out dir's copy is what counts")
    (case.tool_dir / "notes.txt").write_text("neither a smoke tool nor a library")
    assert _key(case) == base


def test_a_remembered_hash_is_used_only_for_the_same_file(case: Case) -> None:
    assert case.model is not None
    inputs, hashes = case.inputs()
    entry = hashes[str(case.model)]
    assert entry["sha256"] == inputs.model and len(entry["id"]) == 5
    # the same file (device, inode, size, mtime, ctime): its remembered hash is believed
    fake = {str(case.model): {"id": entry["id"], "sha256": "ab" * 32}}
    assert case.inputs(known=fake)[0].model == "ab" * 32
    # written since (same size): read again
    case.model.write_bytes(b"GGUF model v3")
    assert case.inputs(known=fake)[0].model not in ("ab" * 32, inputs.model)
    os.utime(case.model, ns=(0, 0))
    assert case.inputs(known={str(case.model): {"id": None, "sha256": "ab" * 32}})[0].model != "ab" * 32


def test_record_round_trip_and_refusals(case: Case, tmp_path: Path) -> None:
    inputs, hashes = case.inputs()
    path = tmp_path / "smoke.json"
    with pytest.raises(ValueError, match="only a passed smoke verdict is kept"):
        write_record(path, inputs, FAILED, hashes)
    assert not path.exists()
    write_record(path, inputs, PASSED, hashes)
    rec = read_record(path)
    assert rec is not None and rec.passed and rec.key == inputs.key
    assert rec.report == PASSED.to_json() and rec.hashes == hashes
    assert rec.when.endswith(" UTC")
    for junk in ("", "[]", '{"format": 99}', json.dumps({"format": 1, "key": 1})):
        path.write_text(junk)
        assert read_record(path) is None


class FakeRun:
    def __init__(self, report: SmokeReport) -> None:
        self.report = report
        self.runs = 0

    def __call__(self, out_dir: Path, **kw: Any) -> SmokeReport:
        self.runs += 1
        self.kw = kw
        write_build_info(out_dir, dataclasses.replace(read_build_info(out_dir), smoke=self.report))
        return self.report


def _stage(
    case: Case, out: Path, record: Path, *, rerun: bool = False, env: dict[str, str] | None = None
) -> SmokeReport:
    info = read_build_info(out)
    return run_or_reuse(
        out,
        info,
        record_path=record,
        tool_dirs=(case.tool_dir,),
        tools=("llama-perplexity",),
        skip=(),
        runtime_env={},
        on_check=None,
        rerun=rerun,
        env={} if env is None else env,
    )


def test_reuse_rerun_and_failure(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import patchkit.smoke.runner as runner

    out = tmp_path / "out"
    out.mkdir()
    write_build_info(out, case.info)
    record = tmp_path / "work" / "smoke.json"
    record.parent.mkdir()
    fake = FakeRun(PASSED)
    monkeypatch.setattr(runner, "run_smoke", fake)
    assert _stage(case, out, record) == PASSED and fake.runs == 1
    assert read_record(record) is not None
    # nothing changed: the kept report, said so, recorded in the output
    write_build_info(out, case.info)  # a new output, without a smoke report
    capsys.readouterr()
    assert _stage(case, out, record) == PASSED and fake.runs == 1
    assert "smoke: unchanged since " in capsys.readouterr().err
    assert read_build_info(out).smoke == PASSED
    # rerun: runs although nothing changed
    assert _stage(case, out, record, rerun=True) == PASSED and fake.runs == 2
    # a changed input runs; a failed run is not kept, so the next one runs again
    (case.tool_dir / "llama-perplexity").write_bytes(b"perplexity v9")
    fake.report = FAILED
    assert _stage(case, out, record) == FAILED and fake.runs == 3
    assert not record.exists()
    fake.report = PASSED
    assert _stage(case, out, record) == PASSED and fake.runs == 4
    assert _stage(case, out, record) == PASSED and fake.runs == 4


def test_reused_message_names_when_and_how_many(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import patchkit.smoke.runner as runner

    out = tmp_path / "out"
    out.mkdir()
    write_build_info(out, case.info)
    record = tmp_path / "smoke.json"
    monkeypatch.setattr(runner, "run_smoke", FakeRun(PASSED))
    _stage(case, out, record)
    when = read_record(record).when  # type: ignore[union-attr]
    write_build_info(out, case.info)
    capsys.readouterr()
    _stage(case, out, record)
    assert f"smoke: unchanged since {when}, 2 checks" in capsys.readouterr().err
    assert read_build_info(out).smoke == PASSED


def test_the_checks_run_in_the_environment_passed_in(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build's environment (BuildOptions.env), not the process's: what the binaries run
    with, and its PATCHKIT_MODEL names the real model (an input of the verdict)."""
    import patchkit.smoke.runner as runner
    from patchkit.smoke.realmodel import ENV_VAR

    out = tmp_path / "out"
    out.mkdir()
    write_build_info(out, case.info)
    record = tmp_path / "smoke.json"
    fake = FakeRun(PASSED)
    monkeypatch.setattr(runner, "run_smoke", fake)
    monkeypatch.setenv("FROM_THE_PROCESS", "1")
    assert case.model is not None
    env = {"PATH": "/usr/bin", ENV_VAR: str(case.model)}
    assert _stage(case, out, record, env=env) == PASSED and fake.runs == 1
    assert fake.kw["env"] == env and "FROM_THE_PROCESS" not in fake.kw["env"]
    assert fake.kw["model"].path == case.model.resolve()
    # without PATCHKIT_MODEL there it is another input (no model): the checks run again
    assert _stage(case, out, record, env={"PATH": "/usr/bin"}) == PASSED and fake.runs == 2
    assert fake.kw["model"] is None
