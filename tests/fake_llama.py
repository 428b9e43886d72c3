#!/usr/bin/env python3
"""A stand-in for llama.cpp's binaries in smoke tests; behaviour from fake.json beside it.

Modes (fake.json {"mode": ...}): ok | rpc-abort (servers die on tensor split) |
differ (RPC generation differs) | crash (every tool exits 1).
"""

import json
import os
import socket
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
name = Path(sys.argv[0]).name
cfg = json.loads((here / "fake.json").read_text())
mode = cfg.get("mode", "ok")
args = sys.argv[1:]


def arg(flag, default=None):
    return args[args.index(flag) + 1] if flag in args else default


if mode == "crash":
    sys.exit(1)
if name == "ggml-rpc-server":
    if "--version" in args:
        print("error: unknown argument: --version")
        sys.exit(0)
    if "--help" in args:
        print("usage: ggml-rpc-server [options]")
        sys.exit(0)
    assert arg("-H") == "127.0.0.1", "fake server must bind loopback"
    piddir = Path(cfg["piddir"])
    piddir.mkdir(exist_ok=True)
    (piddir / str(os.getpid())).write_text("")
    if mode.startswith("proto-"):  # speak the real protocol (tests/rpc_fake_server.py)
        sys.path.insert(0, str(Path(cfg["tests_dir"])))
        from rpc_fake_server import FakeRpcServer

        fake = FakeRpcServer(mode.removeprefix("proto-"))
        fake.listener.close()
        fake.listener = socket.socket()
        fake.listener.bind((arg("-H"), int(arg("-p"))))
        fake.listener.listen(8)
        with fake:
            while not fake.aborted.wait(0.1):
                pass
        os.abort()
    srv = socket.socket()
    srv.bind((arg("-H"), int(arg("-p"))))
    srv.listen(8)
    while True:
        conn, _ = srv.accept()
        data = conn.recv(16)
        conn.close()
        if data.startswith(b"T") and mode == "rpc-abort":
            print("GGML_ASSERT(data + nbytes <= base + size) failed", flush=True)
            os.abort()
if "--version" in args:
    print(f"version: 1 (fake {name})")
    sys.exit(0)
if name == "llama-cli":
    rpc = arg("--rpc")
    if rpc:
        host, port = rpc.split(",")[0].rsplit(":", 1)
        socket.create_connection((host, int(port))).close()
    tail = " it was a dog" if (rpc and mode == "differ") else " the mat and slept"
    print(f"> {arg('-p')}{tail}\n\n[ Prompt: 1 t/s | Generation: 2 t/s ]\nExiting...")
    sys.exit(0)
if name == "llama-bench":
    for addr in arg("-rpc").split(","):
        host, port = addr.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as s:
            s.sendall(b"T" if arg("-sm") == "tensor" else b"L")
    import time
    time.sleep(0.5)
    print("[]")
    sys.exit(0)
if name == "test-llama-archs":
    out = Path(arg("-o"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "qwen35-dense.gguf").write_bytes(b"GGUF")
    sys.exit(0)
sys.exit(2)
