"""Provenance beside each archive: an in-toto Statement v1 with a SLSA provenance v1 predicate.

``<name>.intoto.json`` (canonical JSON, no timestamps: one release gives one statement)::

    _type          https://in-toto.io/Statement/v1
    subject        [{name: <archive file>, digest: {sha256: <archive sha256>}}]
    predicateType  https://slsa.dev/provenance/v1
    predicate.buildDefinition
      buildType            BUILD_TYPE
      externalParameters   recipe (name, file, sha256), upstream (url, commit, ref),
                           patches (names, in order), platform, targets
      internalParameters   cmake (generator, build type, defines, toolchain), cuda,
                           source_date_epoch, pe_edits, waivers
      resolvedDependencies llama.cpp (gitCommit), each patch and the recipe (sha256),
                           patchkit and each tool with its version
    predicate.runDetails   builder.id BUILDER_ID (+ patchkit's version);
                           byproducts: the manifest (sha256)

Everything in it follows from the manifest inside the archive and the archive's sha256,
so `verify` recomputes it and names each key that differs (``statement_for``).
"""

from __future__ import annotations

import json
import os
import stat
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from patchkit.core.fs import atomic_write_bytes, sha256_bytes, sha256_file
from patchkit.core.text import diff_keys
from patchkit.release.signing import SIG_SUFFIX, SIGNATURE_MAX, check, sign

__all__ = [
    "BESIDE_SUFFIXES",
    "BUILDER_ID",
    "BUILD_TYPE",
    "PREDICATE_TYPE",
    "STATEMENT_MAX",
    "STATEMENT_SUFFIX",
    "STATEMENT_TYPE",
    "check_beside",
    "dump_statement",
    "statement_for",
    "statement_name",
    "write_beside",
]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:patchkit:buildtype:release:v1"
BUILDER_ID = "urn:patchkit:builder:v1"
STATEMENT_SUFFIX = ".intoto.json"
BESIDE_SUFFIXES = (STATEMENT_SUFFIX, STATEMENT_SUFFIX + ".sig")  # listed in SHA256SUMS


def statement_name(stem: str) -> str:
    return stem + STATEMENT_SUFFIX


def _purl_version(v: str) -> str:
    return urllib.parse.quote(v, safe=".+-_")


def _tool(name: str, version: str) -> dict[str, Any]:
    return {
        "name": name,
        "uri": f"pkg:generic/{urllib.parse.quote(name, safe='')}@{_purl_version(version)}",
        "annotations": {"version": version},
    }


def _deps(manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    up = manifest.get("upstream") or {}
    url, commit = str(up.get("url")), str(up.get("commit"))
    deps: list[dict[str, Any]] = [
        {"name": "llama.cpp", "uri": f"git+{url}@{commit}", "digest": {"gitCommit": commit}},
    ]
    recipe = manifest.get("recipe") or {}
    deps.append(
        {
            "name": f"recipe:{recipe.get('name')}",
            "uri": f"file:{recipe.get('file')}",
            "digest": {"sha256": str(recipe.get("sha256"))},
        }
    )
    for p in manifest.get("patches") or []:
        if isinstance(p, Mapping):
            deps.append(
                {
                    "name": f"patch:{p.get('name')}",
                    "uri": f"file:patches/{p.get('file')}",
                    "digest": {"sha256": str(p.get("sha256"))},
                    "annotations": {"result": p.get("result")},
                }
            )
    built_with = manifest.get("patchkit_version")
    if isinstance(built_with, str):
        deps.append(_tool("patchkit", built_with))
    tools = manifest.get("tools") or {}
    for name in sorted(tools):
        if isinstance(tools[name], str):
            deps.append(_tool(name, tools[name]))
    return deps


def statement_for(
    archive: str, sha256: str, manifest: Mapping[str, Any], manifest_sha256: str
) -> dict[str, Any]:
    """The statement for ``archive`` (its sha256) built from its manifest."""
    up = manifest.get("upstream") or {}
    recipe = manifest.get("recipe") or {}
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": archive, "digest": {"sha256": sha256}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "recipe": {k: recipe.get(k) for k in ("name", "file", "sha256")},
                    "upstream": {k: up.get(k) for k in ("url", "commit", "ref")},
                    "patches": [
                        p.get("name") for p in manifest.get("patches") or [] if isinstance(p, Mapping)
                    ],
                    "platform": manifest.get("platform"),
                    "targets": manifest.get("targets"),
                },
                "internalParameters": {
                    "cmake": manifest.get("cmake"),
                    "cuda": manifest.get("cuda"),
                    "source_date_epoch": manifest.get("source_date_epoch"),
                    "pe_edits": manifest.get("pe_edits"),
                    "waivers": manifest.get("waivers"),
                },
                "resolvedDependencies": _deps(manifest),
            },
            "runDetails": {
                "builder": {"id": BUILDER_ID, "version": {"patchkit": str(manifest.get("released_by"))}},
                "metadata": {"invocationId": str(manifest.get("identity"))},
                "byproducts": [{"name": "manifest.json", "digest": {"sha256": manifest_sha256}}],
            },
        },
    }


def dump_statement(statement: Mapping[str, Any]) -> bytes:
    """The one canonical serialisation (verify compares bytes)."""
    return (json.dumps(statement, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def write_beside(
    out_dir: Path,
    *,
    stem: str,
    archive: str,
    sha256: str,
    manifest: Mapping[str, Any],
    manifest_data: bytes,
    sign_key: Path | None,
) -> dict[str, Path]:
    """Write ``<stem>.intoto.json`` (and its ``.sig`` with ``sign_key``); {name: path}."""
    data = dump_statement(statement_for(archive, sha256, manifest, sha256_bytes(manifest_data)))
    sig = sign(data, sign_key) if sign_key is not None else None
    path = out_dir / statement_name(stem)
    atomic_write_bytes(path, data, mode=0o644)
    out = {path.name: path}
    if sig is not None:
        sig_path = out_dir / (path.name + SIG_SUFFIX)
        atomic_write_bytes(sig_path, sig, mode=0o644)
        out[sig_path.name] = sig_path
    return out


STATEMENT_MAX = 4 << 20  # a statement is a few KiB


def check_beside(
    dist: Path,
    *,
    archive: str,
    stem: str,
    manifest: Mapping[str, Any],
    manifest_data: bytes,
    allowed_signers: Path | None,
) -> list[str]:
    """Each way ``<stem>.intoto.json`` (and its signature) beside ``archive`` is wrong."""

    def plain(p: Path) -> str:
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            return "missing"
        except OSError as e:
            return f"cannot be read ({e.strerror or e})"
        if not stat.S_ISREG(st.st_mode):
            return "is not a regular file (not followed)"
        return ""

    name = statement_name(stem)
    path = dist / name
    why = plain(path)
    if why:
        return [f"{name}: {why} (the provenance of {archive})"]
    if path.stat().st_size > STATEMENT_MAX:
        return [f"{name}: larger than {STATEMENT_MAX >> 20} MiB, so not one a release wrote"]
    data = path.read_bytes()
    want = dump_statement(
        statement_for(archive, sha256_file(dist / archive), manifest, sha256_bytes(manifest_data))
    )
    diffs: list[str] = []
    if data != want:
        try:
            got = json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            got = None
        if not isinstance(got, dict):
            diffs.append(f"{name}: not a JSON in-toto statement")
        else:
            keys = diff_keys(json.loads(want), got)
            shown = ", ".join(keys[:6]) + (f" (+{len(keys) - 6} more)" if len(keys) > 6 else "")
            diffs.append(f"{name}: does not match {archive} and its manifest: {shown or 'formatting only'}")
    if allowed_signers is not None:
        sig_path = dist / (name + SIG_SUFFIX)
        why = plain(sig_path)
        if why:
            diffs.append(f"{sig_path.name}: {why} (--allowed-signers asks for a signature)")
        elif sig_path.stat().st_size > SIGNATURE_MAX:
            diffs.append(f"{sig_path.name}: larger than {SIGNATURE_MAX >> 10} KiB, not an SSH signature")
        else:
            res = check(data, sig_path.read_bytes(), allowed_signers)
            if not res.ok:
                diffs.append(f"{sig_path.name}: {res.problem}")
    return diffs
