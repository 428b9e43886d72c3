#!/usr/bin/env python3
"""A stand-in for llama-bench in bench tests, replaying REAL output from tests/data/bench.

bench.json beside it: {"help": path, "record": path of a real -o json output,
"rates": {"<substring of the args>": [pp tok/s, tg tok/s]}, "fail": {"<substring>": mode},
"calls": path (each call's argv is appended as one JSON line)}.
Fail modes: oom (CUDA-style message, exit 1), abort (half the JSON, GGML_ASSERT, SIGABRT),
hang (sleeps), silent (exit 0, no output).
"""

import json
import os
import sys
import time
from pathlib import Path

here = Path(__file__).resolve().parent
cfg = json.loads((here / "bench.json").read_text())
args = sys.argv[1:]
joined = " ".join(args)
with open(cfg["calls"], "a") as f:
    f.write(json.dumps(args) + "\n")


def arg(flag, default=None):
    return args[args.index(flag) + 1] if flag in args else default


if "--help" in args:
    sys.stdout.write(Path(cfg["help"]).read_text())
    sys.exit(0)
rpc = arg("-rpc")
if "--list-devices" in args:
    print("Available devices:")
    if not rpc:
        print("  (none)")
    for i, ep in enumerate(rpc.split(",") if rpc else []):
        print(f"  RPC{i}: {ep} (128000 MiB, 127000 MiB free)")
    sys.exit(0)

fail = next((mode for key, mode in cfg.get("fail", {}).items() if key in joined), None)
if fail == "hang":
    time.sleep(60)
if fail == "silent":
    sys.exit(0)
if fail == "oom":
    sys.stderr.write("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9216.00 MiB on device 1: "
                     "cudaMalloc failed: out of memory\n"
                     "alloc_tensor_range: failed to allocate CUDA1 buffer of size 9663676416\n"
                     "main: error: failed to load model '/models/m.gguf'\n")
    sys.exit(1)

template = json.loads(Path(cfg["record"]).read_text())[0]
pp, tg = next((v for k, v in cfg.get("rates", {}).items() if k in joined), [100.0, 10.0])
reps = int(arg("-r", "5"))
fmt = arg("-o", "md")
records = []
for n_prompt, n_gen, rate in ((int(arg("-p", "512")), 0, pp), (0, int(arg("-n", "128")), tg)):
    if n_prompt == 0 and n_gen == 0:
        continue
    samples = [rate * (1 + 0.02 * (i - reps // 2)) for i in range(reps)]
    n_tok = n_prompt + n_gen
    rec = dict(template, n_prompt=n_prompt, n_gen=n_gen, split_mode=arg("-sm", "layer"),
               devices=arg("-dev", "auto"), samples_ts=samples,
               samples_ns=[int(1e9 * n_tok / s) for s in samples],
               avg_ts=sum(samples) / reps)
    records.append(rec)

if fmt == "jsonl":
    for i, rec in enumerate(records):
        if fail == "abort" and i == 1:
            break
        print(json.dumps(rec), flush=True)
else:
    out = "[\n" + ",\n".join(json.dumps(r, indent=4) for r in records) + "\n]\n"
    if fail == "abort":
        out = out[: len(out) * 2 // 3]
    sys.stdout.write(out)
    sys.stdout.flush()
if fail == "abort":
    sys.stderr.write("/src/ggml/src/ggml-rpc/ggml-rpc.cpp:1094: GGML_ASSERT(data + nbytes <= base + size) failed\n")
    sys.stderr.flush()
    os.abort()
sys.exit(0)
