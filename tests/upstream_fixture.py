"""A small synthetic 'llama.cpp-like' upstream: a CMake project in a git repo.

It has a shared library and three executables (like libggml + tools), a file
the test patches change (``src/rpc.c``), a big model blob the sparse checkout
must leave out (``models/tiny.gguf``), a LICENSE, several commits and a tag.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

__all__ = ["GIT_ENV", "FixtureUpstream", "commit_files", "git", "make_upstream"]

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Fixture Author",
    "GIT_AUTHOR_EMAIL": "fixture@example.invalid",
    "GIT_COMMITTER_NAME": "Fixture Author",
    "GIT_COMMITTER_EMAIL": "fixture@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}

CMAKELISTS = """\
cmake_minimum_required(VERSION 3.16)
project(fixture C)
option(FIXTURE_BUILD_TESTS "build tests" OFF)
option(FIXTURE_RPC "build the rpc server" ON)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_library(fixture-core SHARED src/core.c src/rpc.c)
target_include_directories(fixture-core PUBLIC include)
set_target_properties(fixture-core PROPERTIES VERSION 0.0.1 SOVERSION 0)
add_executable(fixture-cli tools/cli.c)
target_link_libraries(fixture-cli PRIVATE fixture-core)
add_executable(fixture-bench tools/bench.c)
target_link_libraries(fixture-bench PRIVATE fixture-core)
if (FIXTURE_RPC)
  add_executable(fixture-rpc-server tools/rpc_server.c)
  target_link_libraries(fixture-rpc-server PRIVATE fixture-core)
endif()
if (FIXTURE_BUILD_TESTS)
  add_executable(fixture-test tests/test.c)
  target_link_libraries(fixture-test PRIVATE fixture-core)
endif()
"""

HEADER = """\
#pragma once
#include <stddef.h>
const char * fixture_version(void);
int rpc_check_bounds(size_t data, size_t nbytes, size_t base, size_t size);
"""

CORE = """\
#include "fixture.h"
const char * fixture_version(void) { return "VERSION"; }
"""

RPC = """\
#include "fixture.h"

int rpc_check_bounds(size_t data, size_t nbytes, size_t base, size_t size) {
    /* reject anything outside [base, base + size) */
    if (data < base || data + nbytes > base + size) {
        return 0;
    }
    return 1;
}
"""

TOOL = """\
#include <stdio.h>
#include <string.h>
#include "fixture.h"
int main(int argc, char ** argv) {
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        printf("version: %s (NAME)\\n", fixture_version());
        return 0;
    }
    printf("NAME: bounds(zero past end) = %d\\n", rpc_check_bounds(200, 0, 0, 100));
    return 0;
}
"""


@dataclasses.dataclass(frozen=True)
class FixtureUpstream:
    path: Path
    commits: dict[str, str]  # label -> sha
    tag: str

    @property
    def head(self) -> str:
        return self.commits["c3"]


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    out = subprocess.run(["git", *args], cwd=repo, env=env, check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def commit_files(repo: Path, files: dict[str, str | bytes | None], message: str,
                 *, date: str | None = None) -> str:
    """Write (None = delete) files and commit them; returns the new sha."""
    for rel, content in files.items():
        p = repo / rel
        if content is None:
            p.unlink()
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
    git(repo, "add", "-A")
    env_date = date or "2026-01-01T00:00:00+00:00"
    os.environ.setdefault("GIT_COMMITTER_DATE", env_date)
    subprocess.run(["git", "commit", "-q", "-m", message, "--date", env_date], cwd=repo,
                   env={**os.environ, **GIT_ENV, "GIT_COMMITTER_DATE": env_date}, check=True)
    return git(repo, "rev-parse", "HEAD")


def _tool(name: str) -> str:
    return TOOL.replace("NAME", name)


def make_upstream(root: Path) -> FixtureUpstream:
    repo = root / "upstream"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "master")
    commits: dict[str, str] = {}
    commits["c1"] = commit_files(repo, {
        "CMakeLists.txt": CMAKELISTS,
        "LICENSE": "MIT License\n\nCopyright (c) fixture\n",
        "include/fixture.h": HEADER,
        "src/core.c": CORE.replace("VERSION", "1"),
        "src/rpc.c": RPC,
        "tools/cli.c": _tool("fixture-cli"),
        "tools/bench.c": _tool("fixture-bench"),
        "tools/rpc_server.c": _tool("fixture-rpc-server"),
        "tests/test.c": _tool("fixture-test"),
        "models/tiny.gguf": b"GGUF" + bytes(4096),
        "README.md": "fixture upstream\n",
    }, "initial", date="2026-01-01T00:00:00+00:00")
    commits["c2"] = commit_files(repo, {"src/core.c": CORE.replace("VERSION", "2")},
                                 "core: version 2", date="2026-01-02T00:00:00+00:00")
    git(repo, "tag", "v2")
    commits["c3"] = commit_files(repo, {"README.md": "fixture upstream, now with docs\n"},
                                 "docs: readme", date="2026-01-03T00:00:00+00:00")
    return FixtureUpstream(path=repo, commits=commits, tag="v2")


# The guard patch the fixture project ships: lets zero-byte tensors through.
GUARD_PATCH_BODY = """\
diff --git a/src/rpc.c b/src/rpc.c
--- a/src/rpc.c
+++ b/src/rpc.c
@@ -1,6 +1,9 @@
 #include "fixture.h"
 
 int rpc_check_bounds(size_t data, size_t nbytes, size_t base, size_t size) {
+    if (nbytes == 0) {
+        return 1; /* zero-byte views carry no data */
+    }
     /* reject anything outside [base, base + size) */
     if (data < base || data + nbytes > base + size) {
         return 0;
"""
