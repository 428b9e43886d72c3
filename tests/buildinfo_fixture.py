"""Complete, schema-valid build-info.json contents for tests that fake a build output."""

from __future__ import annotations

from typing import Any

COMMIT = "82bb48500a9a6b3374da2cf5811695369278e4d3"


def patch_json(name: str, result: str = "applied", **kw: Any) -> dict[str, Any]:
    return {"name": name, "file": f"0001-{name}.patch", "sha256": "ef" * 32,
            "upstream_status": "pending", "when": "..", "experimental": False,
            "result": result, **kw}


def build_info_json(**overrides: Any) -> dict[str, Any]:
    info: dict[str, Any] = {
        "schema": 1,
        "patchkit_version": "0.1.0",
        "recipe": {"name": "cpu-rpc", "file": "recipes/cpu-rpc.toml", "sha256": "ab" * 32},
        "identity": "cd" * 32,
        "upstream": {"url": "https://github.com/ggml-org/llama.cpp", "commit": COMMIT,
                     "commit_date": "2026-08-07T12:34:56+00:00", "subject": "x", "ref": None},
        "patches": [patch_json("rpc-deserialize-tensor-zero-nbytes")],
        "series_hash": "5f3c2a1b" + "0" * 56,
        "experimental": False,
        "platform": {"os": "linux", "arch": "x86_64"},
        "cmake": {"generator": "Ninja", "build_type": "Release", "defines": {}, "toolchain": None},
        "targets": ["llama-cli"],
        "tools": {"cmake": "4.1.2", "ninja": "1.13.0"},
        "cuda": None,
        "pe_edits": [],
        "smoke": None,
        "runtime_env": {},
        "timings": {},
        "log": "",
        "build_dir": "",
        "artifacts": [],
    }
    info.update(overrides)
    return info
