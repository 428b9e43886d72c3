"""bench.result: real llama-bench output (json, jsonl, a crash halfway) and failures
classified from real error text."""

from __future__ import annotations

from patchkit.bench.result import (
    classify_failure,
    measurements,
    parse_bench_output,
)
from patchkit.core.proc import RunResult
from tests.fixtures.paths import BENCH_DATA

DATA = BENCH_DATA


# ---- llama-bench output --------------------------------------------------------------------


def test_real_json_output() -> None:
    text = (DATA / "layer-2rpc-82bb485.json").read_text()
    recs = parse_bench_output(text)
    assert len(recs) == 2 and recs[0]["build_commit"]
    ms = measurements(recs)
    assert [m.kind for m in ms] == ["prompt", "decode"]
    pp, tg = ms
    assert pp.test == "pp64" and tg.test == "tg16"
    assert len(pp.samples_ts) == 3 and pp.min <= pp.median <= pp.max
    assert pp.median == sorted(recs[0]["samples_ts"])[1]
    assert tg.devices == "RPC0/RPC1" and tg.split_mode == "layer"


def test_real_jsonl_and_a_crash_halfway() -> None:
    text = (DATA / "tensor-2rpc-82bb485.jsonl").read_text()
    ms = measurements(parse_bench_output(text))
    assert [m.test for m in ms] == ["pp64", "tg16"] and ms[0].split_mode == "tensor"
    json_text = (DATA / "layer-2rpc-82bb485.json").read_text()
    cut = json_text[: json_text.index('"samples_ns"', json_text.index('"n_gen": 16'))]
    assert [m.test for m in measurements(parse_bench_output(cut))] == ["pp64"]
    assert parse_bench_output("main: error: failed to load model\n") == []
    # log lines mixed into stdout are skipped
    assert len(parse_bench_output("load: something\n" + text)) == 2


def _run(rc: int | None, err: str = "", out: str = "", secs: float = 3.0) -> RunResult:
    return RunResult(args=("llama-bench",), returncode=rc, stdout=out, stderr=err, seconds=secs)


def test_failures_are_classified() -> None:
    real_err = (DATA / "failed-dev-82bb485.txt").read_text()
    kind, msg = classify_failure(_run(1, real_err))
    assert (kind, msg) == ("args", "exit 1: error: invalid device: CUDA0")
    # -sm tensor with no device but the CPU, at 82bb485
    real_err = (DATA / "failed-tensor-cpu-82bb485.txt").read_text()
    assert classify_failure(_run(1, real_err)) == (
        "load",
        "exit 1: llama_bench: error: failed to load model 'tiny-llama.gguf'",
    )
    kind, msg = classify_failure(
        _run(
            1,
            "llama_model_load: ...\nggml_backend_cuda_buffer_type_alloc_buffer: "
            "allocating 9216.00 MiB on device 1: cudaMalloc failed: out of memory\n"
            "main: error: failed to load model 'm.gguf'\n",
        )
    )
    assert kind == "oom" and "cudaMalloc failed: out of memory" in msg
    kind, msg = classify_failure(
        _run(-6, "ggml-rpc.cpp:1094: GGML_ASSERT(data + nbytes <= base + size) failed\n")
    )
    assert kind == "abort" and msg.startswith("killed by signal 6: ") and "GGML_ASSERT" in msg
    assert classify_failure(_run(None, secs=900)) == ("timeout", "timed out after 900s")
    assert classify_failure(_run(-11)) == ("signal", "killed by signal 11")
    assert classify_failure(_run(2, "weird\n"))[0] == "error"
    # no kind's pattern: the message is llama.cpp's telling line (the scheduler's refusal),
    # not merely the last error line
    prealloc = (
        "/src/ggml/src/ggml-backend.cpp:930: pre-allocated tensor (blk.1.attn_q.weight) in a buffer "
        "(RPC0[127.0.0.1:50052]) that cannot run the operation (NONE)"
    )
    assert classify_failure(_run(-6, f"{prealloc}\nerror: later\n")) == (
        "signal",
        f"killed by signal 6: {prealloc[:200]}",
    )
    assert classify_failure(_run(1, f"{prealloc}\nerror: later\n")) == ("error", f"exit 1: {prealloc[:200]}")
