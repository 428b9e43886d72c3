"""An upstream whose history makes a patch drift: applies, shifts, breaks, gets merged.

    d1 initial                      guard applies
    d2 core: version 2              guard applies; cli patch enters its When range
    d3 rpc: add a file comment      guard applies with offset +3
    d4 docs: readme                 guard applies with offset +3
    d5 rpc: reword bounds comment   guard CONFLICTS (its context line changed)
    d6 core: version 3              guard conflicts; last commit of the cli patch's range
    d7 rpc: zero-byte tensors (#42) upstream merged the guard: it reverse-applies
    d8 docs: note the rpc fix       readme patch is now upstream too
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from upstream_fixture import commit_files, git

__all__ = [
    "CLI_PATCH_BODY",
    "GUARD_COMMENT_PATCH_BODY",
    "GUARD_PATCH_BODY",
    "README_PATCH_BODY",
    "DriftUpstream",
    "make_drift_upstream",
    "make_project",
    "patch_header",
    "standard_patches",
]

RPC = """\
/* fixture rpc */
#include "fixture.h"
#include <string.h>

int rpc_check_bounds(size_t data, size_t nbytes, size_t base, size_t size) {
    /* reject anything outside [base, base + size) */
    if (data < base || data + nbytes > base + size) {
        return 0;
    }
    return 1;
}
"""
FILE_COMMENT = "/*\n * bounds checks for the rpc server\n */\n"
RPC_D3 = RPC.replace("/* fixture rpc */\n", "/* fixture rpc */\n" + FILE_COMMENT, 1)
RPC_D5 = RPC_D3.replace("/* reject anything outside [base, base + size) */",
                        "/* reject anything not inside the buffer */")
GUARD = ("    if (nbytes == 0) {\n"
         "        return 1; /* zero-byte views carry no data */\n"
         "    }\n")
RPC_D7 = RPC_D3.replace("size_t size) {\n", "size_t size) {\n" + GUARD, 1)

CLI = """\
#include <stdio.h>
int main(void) {
    printf("cli\\n");
    return 0;
}
"""
README = "fixture upstream\n"
README_D4 = "fixture upstream\n\nSee docs/ for more.\n"
README_D8 = "fixture upstream\n\nSee docs/ for more.\nZero-byte tensors pass the rpc bounds check.\n"

# patch 1 of the series, made at d1
GUARD_PATCH_BODY = """\
diff --git a/src/rpc.c b/src/rpc.c
--- a/src/rpc.c
+++ b/src/rpc.c
@@ -3,6 +3,9 @@
 #include <string.h>
 
 int rpc_check_bounds(size_t data, size_t nbytes, size_t base, size_t size) {
+    if (nbytes == 0) {
+        return 1; /* zero-byte views carry no data */
+    }
     /* reject anything outside [base, base + size) */
     if (data < base || data + nbytes > base + size) {
         return 0;
"""

# patch 2 of the series: only applies on top of the guard
GUARD_COMMENT_PATCH_BODY = """\
diff --git a/src/rpc.c b/src/rpc.c
--- a/src/rpc.c
+++ b/src/rpc.c
@@ -4,7 +4,7 @@
 
 int rpc_check_bounds(size_t data, size_t nbytes, size_t base, size_t size) {
     if (nbytes == 0) {
-        return 1; /* zero-byte views carry no data */
+        return 1; /* zero-byte views: nothing to check */
     }
     /* reject anything outside [base, base + size) */
     if (data < base || data + nbytes > base + size) {
"""

CLI_PATCH_BODY = """\
diff --git a/tools/cli.c b/tools/cli.c
--- a/tools/cli.c
+++ b/tools/cli.c
@@ -1,5 +1,5 @@
 #include <stdio.h>
 int main(void) {
-    printf("cli\\n");
+    printf("cli (patched)\\n");
     return 0;
 }
"""

README_PATCH_BODY = """\
diff --git a/README.md b/README.md
--- a/README.md
+++ b/README.md
@@ -1,3 +1,4 @@
 fixture upstream
 
 See docs/ for more.
+Zero-byte tensors pass the rpc bounds check.
"""


def patch_header(subject: str, when: str = "..", default: str = "yes") -> str:
    return (f"Subject: {subject}\nWhy: a test patch\nUpstream-Status: pending\n"
            f"When: {when}\nDefault: {default}\nExperimental: no\n\n")


@dataclasses.dataclass(frozen=True)
class DriftUpstream:
    path: Path
    c: dict[str, str]  # d1..d8 -> sha

    @property
    def order(self) -> list[str]:
        return [self.c[f"d{i}"] for i in range(1, 9)]


def make_drift_upstream(root: Path) -> DriftUpstream:
    repo = root / "drift"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "master")
    git(repo, "config", "uploadpack.allowFilter", "true")
    c: dict[str, str] = {}
    steps: list[tuple[dict[str, str | bytes | None], str]] = [
        ({"src/rpc.c": RPC, "src/core.c": "int v = 1;\n", "tools/cli.c": CLI,
          "README.md": README}, "initial"),
        ({"src/core.c": "int v = 2;\n"}, "core: version 2"),
        ({"src/rpc.c": RPC_D3}, "rpc: add a file comment"),
        ({"README.md": README_D4}, "docs: readme"),
        ({"src/rpc.c": RPC_D5}, "rpc: reword the bounds comment"),
        ({"src/core.c": "int v = 3;\n"}, "core: version 3"),
        ({"src/rpc.c": RPC_D7}, "rpc: let zero-byte tensors through (#42)"),
        ({"README.md": README_D8}, "docs: note the rpc fix"),
    ]
    for i, (files, msg) in enumerate(steps, 1):
        c[f"d{i}"] = commit_files(repo, files, msg, date=f"2026-02-{i:02d}T00:00:00+00:00")
    return DriftUpstream(path=repo, c=c)



def make_project(root: Path, up: DriftUpstream, *, pin: str,
                 patches: list[tuple[str, str, str]], recipe_patches: str | None = None) -> Path:
    """A project whose recipe ``fixture`` pins ``pin``; patches = [(file, header, body)]."""
    from patchkit.core.fs import sha256_file

    proj = root / "project"
    (proj / "recipes").mkdir(parents=True)
    (proj / "patches").mkdir()
    lines = ["# fixture series\n"]
    for fname, header, body in patches:
        (proj / "patches" / fname).write_text(header + body, encoding="utf-8")
        lines.append(f"{fname} sha256={sha256_file(proj / 'patches' / fname)}\n")
    (proj / "patches" / "series").write_text("".join(lines), encoding="utf-8")
    text = 'name = "fixture"\ndescription = "drift fixture"  # keep me\n'
    if recipe_patches is not None:
        text += f"patches = {recipe_patches}\n"
    text += (f'\n[upstream]\nurl = "{up.path}"\ncommit = "{pin}"\n'
             '\n[build]\ntargets = ["fixture-cli"]\n')
    (proj / "recipes" / "fixture.toml").write_text(text, encoding="utf-8")
    return proj


def standard_patches(up: DriftUpstream) -> list[tuple[str, str, str]]:
    """guard, guard-comment (on top of guard), cli (When d2..d6)."""
    return [
        ("0001-guard.patch", patch_header("rpc: zero-byte guard"), GUARD_PATCH_BODY),
        ("0002-guard-comment.patch", patch_header("rpc: reword"), GUARD_COMMENT_PATCH_BODY),
        ("0003-cli.patch", patch_header("cli: say patched", f"{up.c['d2']}..{up.c['d6']}"),
         CLI_PATCH_BODY),
    ]
